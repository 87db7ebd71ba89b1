#!/usr/bin/env bash
# Builds Kubernetes' node end-to-end suite and the programs it runs, from the Go module proxy, for
# tools/node-e2e.sh and tests/node_e2e.rs:
#
#   tools/build-node-e2e.sh
#
# writes, beside the kubelet of the same version (the suite starts the kubelet it finds next to
# itself):
#
#   target/peers/kubernetes-1.37.2/e2e_node.test  `go test -c k8s.io/kubernetes/test/e2e_node`
#   target/peers/kubernetes-1.37.2/agnhost        k8s.io/kubernetes/test/images/agnhost, the program
#                                                 of the suite's agnhost images, and beside it the
#                                                 TLS pair its image carries (agnhost-localhost.crt
#                                                 and .key, from test/images/agnhost/porter)
#   target/peers/kubernetes-1.37.2/kubectl        k8s.io/kubernetes/cmd/kubectl, for the cluster
#                                                 commands (exec, logs, attach, port-forward, cp)
#
# The suite starts its own etcd and API server in its own process (test/e2e_node/services), so
# neither is built apart. The scratch module is tools/build-kubelets.sh's (run first, for 1.37.2:
# it also builds that kubelet). A stamp records what built the outputs; a rerun with the same Go
# and version builds nothing. Any failure stops the script, naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

VERSION=1.37.2
GO=${GO:-/usr/local/go/bin/go}
out=$top/target/peers/kubernetes-$VERSION
src=$top/target/peers/src/kubernetes-$VERSION
stamp=$out/node-e2e.stamp

step="looking for Go at $GO"
trap 'status=$?; if [ $status -ne 0 ]; then echo "build-node-e2e.sh: FAILED ($status) while: $step" >&2; fi' EXIT
[ -x "$GO" ] || { echo "build-node-e2e.sh: no Go at $GO (set GO=/path/to/go)" >&2; exit 1; }

step="building kubelet $VERSION and its scratch module (tools/build-kubelets.sh $VERSION)"
bash tools/build-kubelets.sh "$VERSION"

text="k8s.io/kubernetes v$VERSION: e2e_node.test agnhost (with its TLS pair) kubectl; $("$GO" env GOVERSION)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$text" ] &&
  [ -x "$out/e2e_node.test" ] && [ -x "$out/agnhost" ] && [ -x "$out/kubectl" ]; then
  echo "node e2e $VERSION: already built in $out"
  exit 0
fi
rm -f "$stamp"

export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
pkg=k8s.io/component-base/version
minor_patch=${VERSION#*.}
ldflags="-s -w -X $pkg.gitVersion=v$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor_patch%%.*}"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
start=$SECONDS
cd "$src"

step="go test -c k8s.io/kubernetes/test/e2e_node (in $src)"
echo "node e2e $VERSION: $step"
"$GO" test -c -vet=off -trimpath -ldflags "$ldflags" -o "$out/e2e_node.test.tmp" k8s.io/kubernetes/test/e2e_node
mv -f "$out/e2e_node.test.tmp" "$out/e2e_node.test"

step="go build k8s.io/kubernetes/test/images/agnhost (in $src)"
echo "node e2e $VERSION: $step"
"$GO" build -trimpath -ldflags "-s -w" -o "$out/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
mv -f "$out/agnhost.tmp" "$out/agnhost"
step="copying agnhost's TLS pair (test/images/agnhost/porter/localhost.crt and .key)"
porter=$("$GO" list -m -f '{{.Dir}}' "k8s.io/kubernetes")/test/images/agnhost/porter
cp "$porter/localhost.crt" "$out/agnhost-localhost.crt"
cp "$porter/localhost.key" "$out/agnhost-localhost.key"

step="go build k8s.io/kubernetes/cmd/kubectl (in $src)"
echo "node e2e $VERSION: $step"
"$GO" build -trimpath -ldflags "$ldflags" -o "$out/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
mv -f "$out/kubectl.tmp" "$out/kubectl"

echo "$text" >"$stamp"
echo "node e2e $VERSION: built in $((SECONDS - start))s"
