#!/usr/bin/env bash
# Builds the ax image with buildah from scratch, without any registry (it
# works offline): the binary comes from the local Go toolchain, the image
# holds only /ax and an empty /var/lib/ax owned by the image's user. The
# same image as the Dockerfile at the repository's root.
#
#   deploy/image/build.sh [IMAGE]        # default IMAGE: localhost/ax:dev
#
# Environment: AX_VERSION and AX_COMMIT (default: from git, else devel /
# unknown), GOARCH (default: this machine's). Needs buildah (Debian:
# apt-get install buildah); run as root or in `buildah unshare`.
# Prints the image id on the last line of stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
image=${1:-localhost/ax:dev}
version=${AX_VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)}
commit=${AX_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}

work=$(mktemp -d)
ctr=""
cleanup() {
	if [ -n "$ctr" ]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X main.buildVersion=$version -X main.buildCommit=$commit" \
	-o "$work/ax" ./cmd/ax)
mkdir "$work/empty" "$work/data"

ctr=$(buildah from scratch)
buildah copy --quiet --chmod 0755 "$ctr" "$work/ax" /ax >/dev/null
# /var/lib owned by root, /var/lib/ax (the working and data dir) by the user.
buildah copy --quiet --chmod 0755 "$ctr" "$work/empty" /var/lib >/dev/null
buildah copy --quiet --chown 65532:65532 "$ctr" "$work/data" /var/lib/ax >/dev/null
buildah config \
	--entrypoint '["/ax"]' --cmd sidecar \
	--user 65532:65532 --workingdir /var/lib/ax \
	--label org.opencontainers.image.title=ax \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.revision="$commit" \
	"$ctr"
id=$(buildah commit --quiet --rm "$ctr" "$image")
ctr=""
echo "$id"
