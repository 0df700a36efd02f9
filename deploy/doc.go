// Package deploy holds the tests of the deployment files: the container
// image (image/build.sh and the Dockerfile), the Kubernetes manifests
// (kubernetes/), compose.yaml and the systemd unit (systemd/). Its own
// module, so that k8s.io/api stays out of the product's go.mod; run its
// tests with `cd deploy && go test ./...`.
package deploy
