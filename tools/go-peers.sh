#!/usr/bin/env bash
# The newest real peers, built from source with Go into target/peers (issue 35):
#   containerd 2.4.2 (containerd, containerd-shim-runc-v2, ctr) in target/peers/containerd-2.4.2/bin,
#   crictl 1.37.0 and 1.34.0 as target/peers/crictl-<version>,
#   critest 1.37.0 (cri-tools' test binary) as target/peers/critest-1.37.0,
# and what tests/critest.rs needs to run critest: ginkgo's CLI (parallel runs) as
# target/peers/ginkgo-<version>, the CNI plugins loopback, tap and host-local in
# target/peers/cni-1.10.0/bin, and two programs of the look-alike images in
# target/peers/critest-images. Usage: bash tools/go-peers.sh (no arguments; `.ci/run` calls it).
# Go is /usr/local/go/bin/go (or $GO); modules come from the Go module proxy; Go's module and
# build caches stay where Go keeps them, so a second run on the same machine is quick. Whatever is
# already built at the right version is kept (a stamp per peer records what built it). Any
# failure stops the script, saying which step failed.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
peers=$top/target/peers

GO=${GO:-/usr/local/go/bin/go}
CONTAINERD_VERSION=2.4.2
CRI_TOOLS_VERSION=1.37.0
OLDER_CRICTL_VERSION=1.34.0
# The storage drivers containerd's release builds also leave out here (no btrfs, zfs or
# devmapper headers needed; the tests use the native snapshotter).
CONTAINERD_TAGS="no_btrfs no_zfs no_devmapper"

step="looking for Go at $GO"
trap 'status=$?; if [ $status -ne 0 ]; then echo "go-peers.sh: FAILED ($status) while: $step" >&2; fi' EXIT

[ -x "$GO" ] || { echo "go-peers.sh: no Go at $GO (set GO=/path/to/go)" >&2; exit 1; }
step="asking $GO for its version"
go_version=$("$GO" env GOVERSION)
mkdir -p "$peers"

# up_to_date STAMP TEXT: the stamp says TEXT and every later argument is an executable file.
up_to_date() {
  local stamp=$1 text=$2
  shift 2
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$text" ] || return 1
  for f in "$@"; do [ -x "$f" ] || return 1; done
}

# containerd: the version reported (containerd --version, the CRI's runtime_version) is the tag,
# as containerd's own Makefile sets it for a release (`git describe`: v2.4.2); left alone, a
# module build says 2.4.2+unknown. The revision (a commit) stays empty: the proxy does not say it.
ctd=$peers/containerd-$CONTAINERD_VERSION
ctd_bins=("$ctd/bin/containerd" "$ctd/bin/containerd-shim-runc-v2" "$ctd/bin/ctr")
ctd_pkg=github.com/containerd/containerd/v2
ctd_stamp="containerd v$CONTAINERD_VERSION tags=[$CONTAINERD_TAGS] $go_version"
if up_to_date "$ctd/stamp" "$ctd_stamp" "${ctd_bins[@]}"; then
  echo "containerd $CONTAINERD_VERSION: built ($ctd/bin)"
else
  step="building containerd $CONTAINERD_VERSION (go install $ctd_pkg/cmd/{containerd,containerd-shim-runc-v2,ctr}@v$CONTAINERD_VERSION)"
  echo "== $step"
  rm -rf "$ctd"
  mkdir -p "$ctd/bin"
  GOBIN=$ctd/bin "$GO" install -tags "$CONTAINERD_TAGS" \
    -ldflags "-X $ctd_pkg/version.Version=v$CONTAINERD_VERSION" \
    "$ctd_pkg/cmd/containerd@v$CONTAINERD_VERSION" \
    "$ctd_pkg/cmd/containerd-shim-runc-v2@v$CONTAINERD_VERSION" \
    "$ctd_pkg/cmd/ctr@v$CONTAINERD_VERSION"
  step="checking the version containerd $CONTAINERD_VERSION reports"
  reported=$("$ctd/bin/containerd" --version)
  case "$reported" in
    *" v$CONTAINERD_VERSION "*) ;;
    *) echo "go-peers.sh: containerd reports '$reported', not v$CONTAINERD_VERSION" >&2; exit 1 ;;
  esac
  echo "$ctd_stamp" >"$ctd/stamp"
  echo "containerd $CONTAINERD_VERSION: $reported"
fi

# crictl: the version it prints is set as cri-tools' Makefile sets it. 1.34.0 too: the oldest
# cri-tools release the module proxy serves (no 1.26 is served), an older v1 client for the
# scoped sockets (tests/pod_scoped.rs).
build_crictl() {
  local version=$1
  local crictl=$peers/crictl-$version
  local stamp="crictl v$version $go_version"
  if up_to_date "$crictl.stamp" "$stamp" "$crictl"; then
    echo "crictl $version: built ($crictl)"
    return
  fi
  step="building crictl $version (go install sigs.k8s.io/cri-tools/cmd/crictl@v$version)"
  echo "== $step"
  local gobin=$peers/crictl-gobin
  rm -rf "$gobin" "$crictl"
  GOBIN=$gobin "$GO" install \
    -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=v$version" \
    "sigs.k8s.io/cri-tools/cmd/crictl@v$version"
  mv "$gobin/crictl" "$crictl"
  rmdir "$gobin"
  step="checking the version crictl $version reports"
  local reported
  reported=$("$crictl" --version)
  case "$reported" in
    *"$version"*) ;;
    *) echo "go-peers.sh: crictl reports '$reported', not $version" >&2; exit 1 ;;
  esac
  echo "$stamp" >"$crictl.stamp"
  echo "crictl $version: $reported"
}
build_crictl "$CRI_TOOLS_VERSION"
build_crictl "$OLDER_CRICTL_VERSION"

# critest: cri-tools' conformance suite is a Go test binary (`go test -c`), which needs a main
# module: a scratch one under target/peers/src that requires cri-tools at the tag.
critest=$peers/critest-$CRI_TOOLS_VERSION
critest_stamp="critest v$CRI_TOOLS_VERSION $go_version"
if up_to_date "$critest.stamp" "$critest_stamp" "$critest"; then
  echo "critest $CRI_TOOLS_VERSION: built ($critest)"
else
  step="making the scratch module for critest $CRI_TOOLS_VERSION (target/peers/src/critest)"
  echo "== building critest $CRI_TOOLS_VERSION (go test -c sigs.k8s.io/cri-tools/cmd/critest)"
  src=$peers/src/critest
  rm -rf "$src" "$critest"
  mkdir -p "$src"
  cat >"$src/go.mod" <<EOF
module cri-bridge.test/critest

go 1.24

require sigs.k8s.io/cri-tools v$CRI_TOOLS_VERSION
EOF
  # A blank import keeps `go mod tidy` from dropping the requirement.
  cat >"$src/tools.go" <<'EOF'
//go:build tools

package tools

import _ "sigs.k8s.io/cri-tools/cmd/critest"
EOF
  step="resolving critest $CRI_TOOLS_VERSION's dependencies (go mod tidy in $src)"
  (cd "$src" && "$GO" mod tidy)
  step="building critest $CRI_TOOLS_VERSION (go test -c sigs.k8s.io/cri-tools/cmd/critest in $src)"
  (cd "$src" && "$GO" test -c \
    -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRI_TOOLS_VERSION" \
    -o "$critest" sigs.k8s.io/cri-tools/cmd/critest)
  [ -x "$critest" ] || { echo "go-peers.sh: go test -c made no $critest" >&2; exit 1; }
  echo "$critest_stamp" >"$critest.stamp"
  echo "critest $CRI_TOOLS_VERSION: $critest"
fi

# ginkgo's CLI, at the version critest is built with: it runs critest's specs on several
# processes at once (`ginkgo --procs N critest-1.37.0`), which the test binary alone cannot.
step="finding the ginkgo version critest $CRI_TOOLS_VERSION is built with"
ginkgo_version=$(cd "$peers/src/critest" && "$GO" list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
ginkgo=$peers/ginkgo-${ginkgo_version#v}
if up_to_date "$ginkgo.stamp" "ginkgo $ginkgo_version $go_version" "$ginkgo"; then
  echo "ginkgo $ginkgo_version: built ($ginkgo)"
else
  step="building ginkgo $ginkgo_version (go install github.com/onsi/ginkgo/v2/ginkgo@$ginkgo_version)"
  echo "== $step"
  gobin=$peers/ginkgo-gobin
  rm -rf "$gobin" "$ginkgo"
  GOBIN=$gobin "$GO" install "github.com/onsi/ginkgo/v2/ginkgo@$ginkgo_version"
  mv "$gobin/ginkgo" "$ginkgo"
  rmdir "$gobin"
  echo "ginkgo $ginkgo_version $go_version" >"$ginkgo.stamp"
  echo "ginkgo $ginkgo_version: $("$ginkgo" version)"
fi

# CNI plugins for the pods of critest's containerds (tests/containerd_support): `tap` gives each
# pod an interface (a tap device no process holds) and an address (from `host-local`) inside its
# own network namespace, and touches nothing on the host (no bridge, no veth, no route, no
# iptables); `loopback` is the one containerd adds. (`dummy` would do as well, where the kernel
# has dummy devices: the CI machines' kernel has not.)
CNI_VERSION=1.10.0
cni=$peers/cni-$CNI_VERSION
cni_pkg=github.com/containernetworking/plugins/plugins
if up_to_date "$cni/stamp" "cni plugins v$CNI_VERSION $go_version" "$cni/bin/loopback" "$cni/bin/tap" "$cni/bin/host-local"; then
  echo "CNI plugins $CNI_VERSION: built ($cni/bin)"
else
  step="building the CNI plugins $CNI_VERSION (go install $cni_pkg/{main/loopback,main/tap,ipam/host-local}@v$CNI_VERSION)"
  echo "== $step"
  rm -rf "$cni"
  mkdir -p "$cni/bin"
  GOBIN=$cni/bin "$GO" install "$cni_pkg/main/loopback@v$CNI_VERSION" "$cni_pkg/main/tap@v$CNI_VERSION" \
    "$cni_pkg/ipam/host-local@v$CNI_VERSION"
  echo "cni plugins v$CNI_VERSION $go_version" >"$cni/stamp"
  echo "CNI plugins $CNI_VERSION: $cni/bin"
fi

# Two programs of critest's look-alike images (tests/containerd_support/lookalikes.rs) that
# busybox cannot stand in for, ours, static so that they run on busybox: `nnp`, the
# no-new-privileges image's set-user-ID root program that prints its effective uid (busybox drops
# a set-user-ID root before running any applet), and `pause`, the sandbox image's process, named
# `pause` and waiting for a signal without a child (critest looks for `sleep` processes in pods).
images=$peers/critest-images
nnp_source='package main

import (
	"fmt"
	"os"
)

// Prints the effective user ID: 0 when the set-user-ID bit took effect, the caller'"'"'s otherwise.
func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
'
pause_source='package main

import (
	"os"
	"os/signal"
	"syscall"
)

// Waits for SIGINT or SIGTERM, then exits 0. Zombies are reaped by the runtime'"'"'s shim here.
func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
'
images_stamp="critest-images $(printf '%s%s' "$nnp_source" "$pause_source" | sha256sum | cut -c1-16) $go_version"
if up_to_date "$images/stamp" "$images_stamp" "$images/nnp" "$images/pause"; then
  echo "critest look-alike programs nnp, pause: built ($images)"
else
  step="building the look-alike images' programs nnp and pause (target/peers/src/critest-images)"
  echo "== $step"
  src=$peers/src/critest-images
  rm -rf "$src" "$images"
  mkdir -p "$src/nnp" "$src/pause" "$images"
  printf 'module cri-bridge.test/critest-images\n\ngo 1.24\n' >"$src/go.mod"
  printf '%s' "$nnp_source" >"$src/nnp/main.go"
  printf '%s' "$pause_source" >"$src/pause/main.go"
  (cd "$src" && CGO_ENABLED=0 "$GO" build -trimpath -o "$images/" ./nnp ./pause)
  echo "$images_stamp" >"$images/stamp"
  echo "critest look-alike programs nnp, pause: $images"
fi

step=""
echo "peers in $peers: containerd $CONTAINERD_VERSION, crictl $CRI_TOOLS_VERSION and $OLDER_CRICTL_VERSION, critest $CRI_TOOLS_VERSION," \
  "ginkgo $ginkgo_version, CNI plugins $CNI_VERSION ($go_version)"
