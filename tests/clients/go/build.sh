#!/usr/bin/env bash
# Builds our Go CRI clients, one binary per CRI version, as the Go module of this directory
# (go.mod, go.sum): grpc-go and k8s.io/cri-api from the Go module proxy, at the versions go.mod pins.
#
#   target/clients/bin/cri-session-v1        session.go on k8s.io/cri-api's runtime/v1
#   target/clients/bin/cri-session-v1alpha2  session.go on stubs generated here from proto/v1alpha2/api.proto
#   target/clients/bin/cri-session-v1alpha1  session.go on stubs generated here from proto/v1alpha1/api.proto
#   target/clients/bin/cri-kubelet-v1        kubelet.go: a kubelet 1.37's calls, on k8s.io/cri-api's v1
#   target/clients/bin/cri-streams-v1        streams.go: the v1 Stream* calls, on k8s.io/cri-api's v1
#
# Needs Go 1.26 or newer (k8s.io/cri-api v0.37 says `go 1.26.0`; $GO, else /usr/local/go/bin/go,
# else go on PATH) and Debian's protoc (protobuf-compiler: apt-get installed when missing, as
# root). protoc-gen-go and protoc-gen-go-grpc are the module's tools (go.mod's `tool` lines), so
# their versions are pinned there too. Modules and the build cache stay where Go keeps them
# (go env GOMODCACHE, GOCACHE); without them they are fetched from the proxy ($GOPROXY).
#
# Everything is built in a fresh directory under target/clients and the five binaries are moved
# into target/clients/bin only when all of them built: tests running the old ones meanwhile are
# not disturbed. Idempotent; fails, saying what, when anything it needs is missing.
#
#   build.sh          build (go.mod and go.sum are only read: a missing entry fails the build)
#   build.sh --tidy   also `go mod tidy` the module against the generated stubs and write go.mod
#                     and go.sum back here (after changing an import or a version in go.mod)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
out=$top/target/clients
bin=$out/bin

die() { echo "build.sh: $*" >&2; exit 1; }

tidy=false
case "${1-}" in
  "") ;;
  --tidy) tidy=true ;;
  *) die "unknown argument $1 (only --tidy)" ;;
esac

# --- tools ----------------------------------------------------------------------------------
if ! dpkg-query -W -f '${Status}' protobuf-compiler 2>/dev/null | grep -q 'install ok installed'; then
  echo "build.sh: installing protobuf-compiler (protoc)" >&2
  [ "$(id -u)" = 0 ] || die "protoc is missing and installing protobuf-compiler needs root"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends protobuf-compiler >&2 ||
    die "apt-get install protobuf-compiler failed"
fi
protoc=/usr/bin/protoc
[ -x "$protoc" ] || die "$protoc is missing although protobuf-compiler is installed"

go=${GO:-}
if [ -z "$go" ]; then
  if [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; else go=$(command -v go) || true; fi
fi
[ -n "$go" ] && [ -x "$go" ] || die "no Go toolchain: install Go 1.26+ as /usr/local/go or set GO=/path/to/go"
# GOTOOLCHAIN=local: an older go must fail here rather than fetch a toolchain of its own.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -trimpath"
go_version=$("$go" env GOVERSION) || die "$go does not run"
case "$go_version" in
  go1.2[6-9]* | go1.[3-9][0-9]* | go[2-9]*) ;;
  *) die "$go is $go_version; go.mod needs go1.26 or newer (k8s.io/cri-api v0.37 does)" ;;
esac
for f in go.mod go.sum session.go kubelet.go streams.go version_v1.go version_v1alpha2.go version_v1alpha1.go; do
  [ -f "$here/$f" ] || die "$here/$f is missing"
done

# --- the build directory: the module with its five main packages and the generated stubs ---
mkdir -p "$out" "$bin"
# What the former GOPATH build (Debian's Go libraries) left here; nothing uses it any more.
rm -rf "$out/gopath" "$out/go-cache" "$out/proto-v1"
work=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src" "$work/tools" "$work/bin"
cp "$here/go.mod" "$here/go.sum" "$src/"

# Tidying may add to go.mod and go.sum; a plain build must find them complete.
if $tidy; then mod=mod; else mod=readonly; fi
(cd "$src" && "$go" build -mod="$mod" -o "$work/tools/" \
  google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc) ||
  die "could not build protoc-gen-go and protoc-gen-go-grpc (go.mod's tools; module proxy: $("$go" env GOPROXY))"

# Our protos have no go_package; the M options name the Go import path (and so the package
# name, its last element) without touching proto/.
for v in v1alpha2 v1alpha1; do
  pkg=cribridge/clients/cri/$v
  mkdir -p "$src/cri/$v"
  "$protoc" -I "$top/proto/$v" \
    --plugin="protoc-gen-go=$work/tools/protoc-gen-go" --plugin="protoc-gen-go-grpc=$work/tools/protoc-gen-go-grpc" \
    --go_out="$src/cri/$v" --go_opt=paths=source_relative --go_opt="Mapi.proto=$pkg" \
    --go-grpc_out="$src/cri/$v" --go-grpc_opt=paths=source_relative --go-grpc_opt="Mapi.proto=$pkg" \
    "$top/proto/$v/api.proto" || die "protoc failed on proto/$v/api.proto"
  [ -f "$src/cri/$v/api.pb.go" ] && grep -q 'func NewRuntimeServiceClient' "$src/cri/$v/api_grpc.pb.go" ||
    die "protoc wrote no messages or no RuntimeService client for proto/$v/api.proto"
done

# session.go is written against k8s.io/cri-api's v1 package; for the other versions its one
# import of it is pointed at the generated package. version_*.go holds what really differs.
v1_import='runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"'
[ "$(grep -c "^	$v1_import\$" "$here/session.go")" = 1 ] ||
  die "session.go must import $v1_import exactly once, on a line of its own"
for v in v1 v1alpha2 v1alpha1; do
  main=$src/cmd/cri-session-$v
  mkdir -p "$main"
  if [ "$v" = v1 ]; then
    cp "$here/session.go" "$main/"
  else
    sed "s|^	$v1_import\$|	runtimeapi \"cribridge/clients/cri/$v\"|" "$here/session.go" >"$main/session.go"
  fi
  cp "$here/version_$v.go" "$main/"
done
for tool in kubelet streams; do
  mkdir -p "$src/cmd/cri-$tool-v1"
  cp "$here/$tool.go" "$src/cmd/cri-$tool-v1/"
done

if $tidy; then
  (cd "$src" && "$go" mod tidy) || die "go mod tidy failed"
  cp "$src/go.mod" "$src/go.sum" "$here/"
  echo "build.sh: wrote $here/go.mod and go.sum" >&2
fi

# --- the five binaries ----------------------------------------------------------------------
# Every file carries a build tag (so that this directory is never one inconsistent package);
# each cmd directory holds only its own files, so all tags can be given at once.
names=(cri-session-v1 cri-session-v1alpha2 cri-session-v1alpha1 cri-kubelet-v1 cri-streams-v1)
(cd "$src" && "$go" build -mod=readonly -tags "cri_v1 cri_v1alpha2 cri_v1alpha1 cri_kubelet cri_streams" \
  -o "$work/bin/" ./cmd/...) || die "go build of the clients failed"
for name in "${names[@]}"; do
  [ -x "$work/bin/$name" ] || die "go build wrote no $name"
done
# rename(2) in the same file system: a test starting a client sees the old or the new binary.
for name in "${names[@]}"; do
  mv -f "$work/bin/$name" "$bin/$name" || die "could not move $name into $bin"
done

module() { (cd "$src" && "$go" list -mod=readonly -m -f '{{.Path}} {{.Version}}' "$1"); }
echo "build.sh: built with $go_version, $(module google.golang.org/grpc), $(module k8s.io/cri-api)," \
  "$(module google.golang.org/protobuf) (protoc-gen-go), $(module google.golang.org/grpc/cmd/protoc-gen-go-grpc)," \
  "protoc $("$protoc" --version | cut -d' ' -f2) (protobuf-compiler $(dpkg-query -W -f '${Version}' protobuf-compiler))" >&2
for name in "${names[@]}"; do
  echo "$bin/$name"
done
