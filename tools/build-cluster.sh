#!/usr/bin/env bash
# Builds the control plane of a Kubernetes 1.37.2 cluster, from the Go module proxy, for
# tools/control-plane.sh:
#
#   tools/build-cluster.sh
#
# writes into target/peers/kubernetes-1.37.2/, beside the kubelet, kubeadm and kubectl of the same
# version:
#
#   kube-apiserver, kube-controller-manager,   k8s.io/kubernetes/cmd/NAME v1.37.2
#   kube-scheduler, kube-proxy
#   etcd                                       go.etcd.io/etcd/server/v3 (its package main), at the
#                                              version k8s.io/kubernetes v1.37.2's go.mod requires
#                                              (v3.7.0)
#
# kubectl is not built here: tools/build-node-e2e.sh builds it into the same directory.
#
# How: the Kubernetes commands are built in tools/build-kubelets.sh's scratch module
# (target/peers/src/kubernetes-1.37.2; the script runs it first if that module or the kubelet is
# missing), with the version stamped in by -ldflags as there. etcd's server module is already in
# that module's graph (k8s.io/kubernetes's go.mod lists it as an indirect requirement), so the
# script makes it a requirement of the scratch module too, and checks that the build list
# (`go list -m all`) stays exactly as it was: the kubelet and the other binaries built there keep
# their versions. Should a later version break that, it puts go.mod and go.sum back and stops.
# etcd reports its version from a constant of go.etcd.io/etcd/api/v3/version; -ldflags stamps only
# its GitSHA, which the module proxy does not know, with the module version instead.
#
# A stamp records what built the outputs; a rerun with the same Go and versions builds nothing.
# Any failure stops the script, naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

VERSION=1.37.2
GO=${GO:-/usr/local/go/bin/go}
out=$top/target/peers/kubernetes-$VERSION
src=$top/target/peers/src/kubernetes-$VERSION
stamp=$out/cluster.stamp
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
ETCD_MODULE=go.etcd.io/etcd/server/v3

step="looking for Go at $GO"
on_exit() {
  local status=$?
  if [ "$status" -ne 0 ]; then echo "build-cluster.sh: FAILED ($status) while: $step" >&2; fi
}
trap on_exit EXIT
[ -x "$GO" ] || { echo "build-cluster.sh: no Go at $GO (set GO=/path/to/go)" >&2; exit 1; }

step="building kubelet $VERSION and its scratch module (tools/build-kubelets.sh $VERSION)"
if [ ! -f "$src/go.mod" ] || [ ! -x "$out/kubelet" ]; then
  bash tools/build-kubelets.sh "$VERSION"
fi
# tools/build-kubelets.sh writes the scratch module only when it builds something.
[ -f "$src/go.mod" ] || {
  echo "build-cluster.sh: no scratch module $src; delete $out/kubelet and rerun to have tools/build-kubelets.sh make it" >&2
  exit 1
}

export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
cd "$src"

step="reading the etcd version from k8s.io/kubernetes v$VERSION's go.mod (in $src)"
k8s_gomod=$("$GO" list -m -f '{{.GoMod}}' k8s.io/kubernetes)
etcd_version=$(sed -n "s#^[[:space:]]*$ETCD_MODULE \(v[^[:space:]]*\).*#\1#p" "$k8s_gomod" | head -n 1)
[ -n "$etcd_version" ] || { echo "build-cluster.sh: $k8s_gomod does not require $ETCD_MODULE" >&2; exit 1; }

text="k8s.io/kubernetes v$VERSION: ${COMMANDS[*]}; $ETCD_MODULE $etcd_version: etcd; $("$GO" env GOVERSION)"
built=1
for cmd in "${COMMANDS[@]}" etcd; do
  [ -x "$out/$cmd" ] || built=0
done
if [ "$built" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$text" ]; then
  echo "cluster $VERSION: already built in $out (etcd $etcd_version)"
  exit 0
fi
rm -f "$stamp"
mkdir -p "$out"
start=$SECONDS

step="adding $ETCD_MODULE $etcd_version to the scratch module without changing its build list"
if ! grep -Eq "^(require)?[[:space:]]*$ETCD_MODULE $etcd_version( |\$)" go.mod; then
  cp go.mod go.mod.before-etcd
  cp go.sum go.sum.before-etcd
  before=$("$GO" list -m all)
  "$GO" mod edit -require="$ETCD_MODULE@$etcd_version"
  after=$("$GO" list -m all)
  if [ "$before" != "$after" ]; then
    mv -f go.mod.before-etcd go.mod
    mv -f go.sum.before-etcd go.sum
    echo "build-cluster.sh: requiring $ETCD_MODULE $etcd_version changes the versions the scratch module builds Kubernetes with:" >&2
    diff <(echo "$before") <(echo "$after") >&2 || true
    echo "build-cluster.sh: build etcd in a scratch module of its own instead" >&2
    exit 1
  fi
  rm -f go.mod.before-etcd go.sum.before-etcd
fi

pkg=k8s.io/component-base/version
minor_patch=${VERSION#*.}
ldflags="-s -w -X $pkg.gitVersion=v$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor_patch%%.*}"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"

for cmd in "${COMMANDS[@]}"; do
  step="go build k8s.io/kubernetes/cmd/$cmd (in $src)"
  echo "cluster $VERSION: $step"
  "$GO" build -trimpath -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv -f "$out/$cmd.tmp" "$out/$cmd"
  step="checking that $out/$cmd reports v$VERSION"
  reported=$("$out/$cmd" --version)
  [ "$reported" = "Kubernetes v$VERSION" ] || { echo "build-cluster.sh: $cmd --version says: $reported" >&2; exit 1; }
done

step="go build $ETCD_MODULE $etcd_version (in $src)"
echo "cluster $VERSION: $step"
"$GO" build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version" \
  -o "$out/etcd.tmp" "$ETCD_MODULE"
mv -f "$out/etcd.tmp" "$out/etcd"
step="checking that $out/etcd reports ${etcd_version#v}"
reported=$("$out/etcd" --version)
grep -qx "etcd Version: ${etcd_version#v}" <<<"$reported" || { echo "build-cluster.sh: etcd --version says: $reported" >&2; exit 1; }

echo "$text" >"$stamp"
echo "cluster $VERSION: built in $((SECONDS - start))s (etcd $etcd_version)"
if [ ! -x "$out/kubectl" ]; then
  echo "cluster $VERSION: note: no $out/kubectl yet; tools/build-node-e2e.sh builds it" >&2
fi
