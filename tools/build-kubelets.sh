#!/usr/bin/env bash
# Builds the kubelets and kubeadms that tests/kubelet.rs runs, from the Go module proxy:
#
#   tools/build-kubelets.sh [VERSION...]
#
# With no argument it builds every version in VERSIONS below. For each VERSION it writes
#
#   target/peers/kubernetes-VERSION/kubelet
#   target/peers/kubernetes-VERSION/kubeadm   (not for 1.22: its kubelet only)
#
# and skips a binary that is already there and reports VERSION. Idempotent: a rerun builds only
# what is missing. Go's module and build caches stay where Go keeps them by default
# (`go env GOMODCACHE GOCACHE`), so a rerun on the same machine, even after the outputs were
# deleted, compiles little. Any failure stops the script with a message naming the version and
# the step that failed.
#
# How: k8s.io/kubernetes is not meant to be required as a module; its go.mod requires each of
# its staging modules (k8s.io/api, k8s.io/client-go, k8s.io/kubelet, ...) at v0.0.0 and replaces
# them with ./staging/src/... directories that are not in the published module. A scratch module
# under target/peers/src/kubernetes-VERSION (not committed) therefore requires k8s.io/kubernetes
# vVERSION and replaces each of those staging modules with its published tag v0.MINOR.PATCH
# (the list is read from k8s.io/kubernetes's own go.mod in the module cache), then builds
# k8s.io/kubernetes/cmd/kubelet and cmd/kubeadm with the version stamped in by -ldflags, as
# Kubernetes' own build does.
#
# Kubernetes 1.38 requires sigs.k8s.io/iptables-wrappers v1.0.0, which the module proxy does not
# serve. It is replaced by tools/iptables-none (a package of ours with the same API that finds no
# iptables), so the kubelet takes its "No iptables support on this system" path, as on a host
# with nftables only. It creates no iptables chain then; nothing the tests run needs one.
#
# Kubernetes 1.22 is built with Go 1.19 (Debian bookworm's golang-1.19-go, /usr/lib/go-1.19),
# kubelet only, and with github.com/modern-go/reflect2 raised from v1.0.1 to v1.0.2: v1.0.1
# crashes under Go 1.18 and later.
#
# Environment: GO (default /usr/local/go/bin/go, else `go` on the PATH); GO_1_19 (default
# /usr/lib/go-1.19/bin/go), the Go that builds Kubernetes 1.22.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# The versions tests/kubelet.rs runs: the newest served pre-release, the newest release, the
# newest 1.34 patch release; and the last 1.22 release (kubelet only).
VERSIONS=(1.38.0-beta.0 1.37.2 1.34.4 1.22.17)

# Go toolchain per version, when the one installed is too old for that version's go.mod; the go
# command downloads it from the module proxy (GOTOOLCHAIN).
toolchain_for() {
  case "$1" in
    1.38.*) echo go1.27.3 ;;
    *) echo local ;;
  esac
}

# The Go command per version: $GO, except for 1.22 (Go 1.19, which knows no GOTOOLCHAIN).
go_for() {
  case "$1" in
    1.22.*) echo "${GO_1_19:-/usr/lib/go-1.19/bin/go}" ;;
    *) echo "$GO" ;;
  esac
}

# The commands built per version.
commands_for() {
  case "$1" in
    1.22.*) echo kubelet ;;
    *) echo kubelet kubeadm ;;
  esac
}

# Modules the scratch module requires at a higher version than Kubernetes' go.mod does.
raised_requires_for() {
  case "$1" in
    1.22.*) echo "github.com/modern-go/reflect2 v1.0.2" ;;
  esac
}

GO=${GO:-}
if [ -z "$GO" ]; then
  if [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; else GO=$(command -v go || true); fi
fi
[ -n "$GO" ] && [ -x "$GO" ] || { echo "build-kubelets.sh: no Go toolchain (set GO=...)" >&2; exit 1; }

fail() {
  echo "build-kubelets.sh: FAILED: $*" >&2
  exit 1
}

peers=$repo/target/peers
mkdir -p "$peers/src"
# One build at a time, even across concurrent runs of this script.
exec 9>"$peers/.build-kubelets.lock"
flock 9

# Prints "has VERSION" if binary $1 reports version v$2.
reports_version() {
  local bin=$1 version=$2
  [ -x "$bin" ] || return 1
  "$bin" --version 2>/dev/null | grep -q "v$version\$" || "$bin" version -o short 2>/dev/null | grep -q "^v$version\$"
}

build_version() {
  local version=$1
  local out=$peers/kubernetes-$version
  local src=$peers/src/kubernetes-$version
  local toolchain go cmds cmd built=1
  toolchain=$(toolchain_for "$version")
  go=$(go_for "$version")
  read -r -a cmds <<<"$(commands_for "$version")"

  for cmd in "${cmds[@]}"; do
    reports_version "$out/$cmd" "$version" || built=0
  done
  if [ "$built" = 1 ]; then
    echo "kubernetes $version: $(sed 's/ / and /g' <<<"${cmds[*]}") already built in $out"
    return 0
  fi
  case "$version" in
    1.22.*)
      [ -x "$go" ] ||
        fail "kubernetes $version: needs Go 1.19, and $go is missing: apt-get install golang-1.19-go (Debian bookworm), or set GO_1_19=/path/to/go1.19/bin/go"
      "$go" version 2>/dev/null | grep -q ' go1\.19[. ]' ||
        fail "kubernetes $version: needs Go 1.19, and $go is $("$go" version 2>&1 | head -n 1): apt-get install golang-1.19-go, or set GO_1_19=/path/to/go1.19/bin/go"
      echo "kubernetes $version: building into $out ($("$go" version))"
      ;;
    *) echo "kubernetes $version: building into $out (GOTOOLCHAIN=$toolchain)" ;;
  esac
  local start=$SECONDS

  # -mod=mod: the scratch module's go.mod and go.sum are completed by the build itself. No VCS
  # stamp: the scratch module sits inside this repository's checkout.
  export GOTOOLCHAIN=$toolchain GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

  # Staging modules are tagged v0.MINOR.PATCH[-pre] for Kubernetes v1.MINOR.PATCH[-pre].
  local minor_patch=${version#*.}
  local staging_version=v0.$minor_patch

  # k8s.io/kubernetes's own go.mod, from the module proxy into the module cache.
  local download gomod
  download=$(cd "$peers/src" && "$go" mod download -json "k8s.io/kubernetes@v$version" 2>&1) ||
    fail "kubernetes $version: go mod download k8s.io/kubernetes@v$version: $(
      sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' <<<"$download")"
  gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$download")
  [ -f "$gomod" ] || fail "kubernetes $version: no go.mod for k8s.io/kubernetes@v$version in the module cache"
  local go_directive
  go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod" | head -n 1)
  [ -n "$go_directive" ] || fail "kubernetes $version: no go directive in $gomod"

  # The staging modules: those it replaces with ./staging/src/... directories.
  local staging
  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*$#\1#p' "$gomod")
  [ -n "$staging" ] || fail "kubernetes $version: no ./staging replace in $gomod"

  rm -rf "$src"
  mkdir -p "$src"
  {
    echo "// Scratch module of tools/build-kubelets.sh; not committed."
    echo "module cri-bridge.test/kubernetes-build"
    echo
    echo "go $go_directive"
    echo
    echo "require k8s.io/kubernetes v$version"
    local raised
    raised=$(raised_requires_for "$version")
    if [ -n "$raised" ]; then
      echo
      echo "// Raised above what k8s.io/kubernetes v$version requires."
      echo "require ("
      sed 's/^/	/' <<<"$raised"
      echo ")"
    fi
    echo
    echo "replace ("
    local m
    for m in $staging; do
      echo "	$m => $m $staging_version"
    done
    if grep -q 'sigs.k8s.io/iptables-wrappers' "$gomod"; then
      echo "	sigs.k8s.io/iptables-wrappers => $repo/tools/iptables-none"
    fi
    echo ")"
  } >"$src/go.mod"

  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=v$version -X $pkg.gitMajor=1"
  ldflags+=" -X $pkg.gitMinor=${minor_patch%%.*} -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"

  mkdir -p "$out"
  for cmd in "${cmds[@]}"; do
    if reports_version "$out/$cmd" "$version"; then
      echo "kubernetes $version: $cmd already built"
      continue
    fi
    echo "kubernetes $version: go build k8s.io/kubernetes/cmd/$cmd"
    (cd "$src" && "$go" build -trimpath -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd") ||
      fail "kubernetes $version: go build k8s.io/kubernetes/cmd/$cmd (in $src)"
    mv -f "$out/$cmd.tmp" "$out/$cmd"
    reports_version "$out/$cmd" "$version" ||
      fail "kubernetes $version: $out/$cmd does not report v$version: $("$out/$cmd" --version 2>&1 | head -n 3)"
  done
  echo "kubernetes $version: done in $((SECONDS - start))s"
}

if [ "$#" -gt 0 ]; then
  VERSIONS=("$@")
fi
for v in "${VERSIONS[@]}"; do
  build_version "$v"
done
