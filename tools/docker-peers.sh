#!/usr/bin/env bash
# cri-dockerd 0.4.3 (Mirantis' CRI v1 server in front of Docker Engine, the successor of the
# kubelet's dockershim), built from source with Go into target/peers/cri-dockerd-0.4.3/cri-dockerd
# for tests/docker_backend.rs (which also needs Debian's docker.io, containernetworking-plugins
# and socat; see tests/docker_support). Usage: bash tools/docker-peers.sh (no arguments).
# v0.4.3 is the newest tag the Go module proxy serves. `go install` refuses it (its go.mod has
# replace directives), so the module is copied out of Go's module cache into a scratch directory
# (target/peers/src/cri-dockerd) and built there as the main module, with the version flags of its
# Makefile: `cri-dockerd --version` then says `cri-dockerd 0.4.3 (<commit>)` as a release does,
# the commit being the one the proxy reports for the tag. Go is /usr/local/go/bin/go (or $GO);
# Go's module and build caches stay where Go keeps them, so a second run on the same machine is
# quick. A binary already built at this version with this Go is kept (a stamp records what built
# it). Any failure stops the script, saying which step failed.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
peers=$top/target/peers

GO=${GO:-/usr/local/go/bin/go}
CRI_DOCKERD_VERSION=0.4.3
module=github.com/Mirantis/cri-dockerd

step="looking for Go at $GO"
trap 'status=$?; if [ $status -ne 0 ]; then echo "docker-peers.sh: FAILED ($status) while: $step" >&2; fi' EXIT

[ -x "$GO" ] || { echo "docker-peers.sh: no Go at $GO (set GO=/path/to/go)" >&2; exit 1; }
step="asking $GO for its version"
go_version=$("$GO" env GOVERSION)
mkdir -p "$peers"

out=$peers/cri-dockerd-$CRI_DOCKERD_VERSION
binary=$out/cri-dockerd
stamp="cri-dockerd v$CRI_DOCKERD_VERSION $go_version"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] && [ -x "$binary" ]; then
  echo "cri-dockerd $CRI_DOCKERD_VERSION: built ($binary)"
  exit 0
fi

step="downloading $module@v$CRI_DOCKERD_VERSION (go mod download -json)"
echo "== building cri-dockerd $CRI_DOCKERD_VERSION"
download=$(cd "$peers" && GOFLAGS= "$GO" mod download -json "$module@v$CRI_DOCKERD_VERSION")
module_dir=$(printf '%s\n' "$download" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
commit=$(printf '%s\n' "$download" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)",\{0,1\}$/\1/p')
[ -n "$module_dir" ] && [ -d "$module_dir" ] || {
  echo "docker-peers.sh: go mod download named no module directory:" >&2
  printf '%s\n' "$download" >&2
  exit 1
}
# The Makefile's REVISION is `git log -1 --pretty=%h`: the commit, abbreviated.
revision=${commit:0:7}
revision=${revision:-unknown}

step="copying $module_dir to target/peers/src/cri-dockerd"
src=$peers/src/cri-dockerd
rm -rf "$src" "$out"
mkdir -p "$peers/src" "$out"
cp -R "$module_dir" "$src"
chmod -R u+w "$src"

# As the Makefile's `cri-dockerd` target: go build -trimpath with CRI_DOCKERD_LDFLAGS. -mod=mod
# lets Go complete go.sum if the tag's lacks a line; GOTOOLCHAIN=local keeps the machine's Go.
step="building cri-dockerd $CRI_DOCKERD_VERSION (go build in $src)"
(cd "$src" && GOFLAGS=-mod=mod GOTOOLCHAIN=local "$GO" build -trimpath \
  -ldflags "-s -w -buildid=$revision \
    -X $module/cmd/version.Version=$CRI_DOCKERD_VERSION \
    -X $module/cmd/version.PreRelease= \
    -X $module/cmd/version.GitCommit=$revision" \
  -o "$binary" .)

step="checking the version cri-dockerd $CRI_DOCKERD_VERSION reports"
reported=$("$binary" --version 2>&1)
case "$reported" in
  *" $CRI_DOCKERD_VERSION ("*) ;;
  *) echo "docker-peers.sh: cri-dockerd reports '$reported', not $CRI_DOCKERD_VERSION" >&2; exit 1 ;;
esac
echo "$stamp" >"$out/stamp"
step=""
echo "cri-dockerd $CRI_DOCKERD_VERSION: $reported ($binary, $go_version)"
