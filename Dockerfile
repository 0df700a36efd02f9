# syntax=docker/dockerfile:1
# The ax image: one static binary on an empty base, run as a non-root user.
#
#   docker build -t ax:dev --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run --rm ax:dev version
#
# deploy/image/build.sh builds the same image with buildah, offline (no
# registry, no base image). The entrypoint is /ax; the default command is
# `sidecar`, so the container's args are the sidecar's flags
# (see deploy/kubernetes).

FROM golang:1.26 AS build
WORKDIR /src
COPY . .
ARG VERSION=devel
ARG COMMIT=unknown
RUN --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=cache,target=/go/pkg/mod \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.buildVersion=${VERSION} -X main.buildCommit=${COMMIT}" \
      -o /out/ax ./cmd/ax \
 && mkdir -p /out/data

FROM scratch
COPY --from=build /out/ax /ax
# The default data dir (./ax-data) and socket (./ax.sock) are relative to
# the working directory, owned by the image's user; mount a volume here
# or pass --data-dir and --socket.
COPY --from=build --chown=65532:65532 /out/data /var/lib/ax
WORKDIR /var/lib/ax
USER 65532:65532
ENTRYPOINT ["/ax"]
CMD ["sidecar"]
