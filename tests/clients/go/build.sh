#!/usr/bin/env bash
# Builds our Go CRI clients, one binary per CRI version, on grpc-go from Debian packages:
#
#   target/clients/bin/cri-session-v1        k8s.io/cri-api's runtime/v1 (gogo protobuf)
#   target/clients/bin/cri-session-v1alpha2  generated here from proto/v1alpha2/api.proto
#   target/clients/bin/cri-session-v1alpha1  generated here from proto/v1alpha1/api.proto
#   target/clients/bin/cri-kubelet-v1        kubelet.go: a kubelet 1.29+'s calls, on k8s.io/cri-api's v1
#   target/clients/bin/cri-streams-v1        streams.go: the v1 Stream* calls, on stubs generated here
#                                            from proto/v1/api.proto (cri-api 0.32 has no Stream* RPCs)
#
# Run as root on Debian bookworm (it apt-get installs what is missing); idempotent. The build is
# offline, in GOPATH mode, on a private GOPATH (target/clients/gopath) whose src merges Debian's
# Go libraries (/usr/share/gocode/src) with k8s.io/cri-api unpacked from trixie (bookworm has
# none). Fails, saying what, when anything it needs is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
out=$top/target/clients
gopath=$out/gopath
bin=$out/bin
trixie=$top/target/debian/go-trixie

die() { echo "build.sh: $*" >&2; exit 1; }

# --- Debian packages ------------------------------------------------------------------------
# golang-goprotobuf-dev is, on bookworm, protoc-gen-go 1.3.5 (github.com/golang/protobuf): it
# still has the built-in grpc plugin (`plugins=grpc`) and its output needs only
# github.com/golang/protobuf/proto, which grpc-go 1.33 itself uses.
packages=(golang-go golang-google-grpc-dev golang-github-gogo-protobuf-dev protobuf-compiler golang-goprotobuf-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build.sh: installing ${missing[*]}" >&2
  [ "$(id -u)" = 0 ] || die "need root to apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
fi
for tool in go protoc; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH after installing ${packages[*]}"
done
# Named explicitly: a protoc-gen-go of another generation earlier on PATH must not be picked.
plugin=/usr/bin/protoc-gen-go
plugin_package=$(dpkg-query -S "$plugin" 2>/dev/null | cut -d: -f1) ||
  die "$plugin is missing (it comes with golang-goprotobuf-dev)"

# --- k8s.io/cri-api from trixie -------------------------------------------------------------
"$top/tools/debian-unpack.sh" trixie "$trixie" golang-github-kubernetes-cri-api-dev >&2 ||
  die "could not unpack golang-github-kubernetes-cri-api-dev from trixie"
cri_api=$trixie/usr/share/gocode/src/k8s.io/cri-api
[ -f "$cri_api/pkg/apis/runtime/v1/api.pb.go" ] || die "$cri_api/pkg/apis/runtime/v1/api.pb.go is missing"

# --- the private GOPATH ---------------------------------------------------------------------
# merge SRC DEST: makes every entry of SRC visible under DEST through symlinks. Where two
# sources share a directory (say both have k8s.io/), the symlink becomes a real directory
# holding links to both.
merge() {
  local src=$1 dest=$2 entry name
  mkdir -p "$dest"
  for entry in "$src"/*; do
    [ -e "$entry" ] || continue
    name=$(basename "$entry")
    if [ -L "$dest/$name" ] && [ "$(readlink "$dest/$name")" = "$entry" ]; then
      continue
    elif [ -L "$dest/$name" ] && [ -d "$entry" ] && [ -d "$dest/$name" ]; then
      local earlier
      earlier=$(readlink "$dest/$name")
      rm "$dest/$name"
      merge "$earlier" "$dest/$name"
      merge "$entry" "$dest/$name"
    elif [ -d "$dest/$name" ] && [ ! -L "$dest/$name" ] && [ -d "$entry" ]; then
      merge "$entry" "$dest/$name"
    elif [ -e "$dest/$name" ] || [ -L "$dest/$name" ]; then
      die "both $(readlink -f "$dest/$name") and $entry want $dest/$name"
    else
      ln -s "$entry" "$dest/$name"
    fi
  done
}
[ -d /usr/share/gocode/src ] || die "/usr/share/gocode/src is missing (Debian's Go libraries)"
# Rebuilt every time: links into packages that have since been removed must not linger.
rm -rf "$gopath/src"
merge /usr/share/gocode/src "$gopath/src"
merge "$trixie/usr/share/gocode/src" "$gopath/src"
for pkg in google.golang.org/grpc github.com/golang/protobuf/proto github.com/gogo/protobuf/proto \
  k8s.io/cri-api/pkg/apis/runtime/v1; do
  [ -d "$gopath/src/$pkg" ] || die "$pkg is not in $gopath/src"
done

# --- generated v1alpha2 and v1alpha1 packages -----------------------------------------------
# Our protos have no go_package; the M option names the Go import path (and so the package
# name, its last element) without touching proto/.
ours=$gopath/src/cribridge
for v in v1alpha2 v1alpha1; do
  mkdir -p "$ours/cri/$v"
  protoc -I "$top/proto/$v" --plugin="protoc-gen-go=$plugin" \
    --go_opt="Mapi.proto=cribridge/cri/$v" --go_opt=paths=source_relative \
    --go_out="plugins=grpc:$ours/cri/$v" "$top/proto/$v/api.proto" ||
    die "protoc failed on proto/$v/api.proto"
  grep -q 'grpc.SupportPackageIsVersion' "$ours/cri/$v/api.pb.go" ||
    die "$plugin wrote no grpc client into cri/$v/api.pb.go (plugins=grpc unsupported?)"
done

# proto/v1 follows the newest Kubernetes schema, whose field options may be newer than this protoc
# (3.21 knows no `debug_redact`, cri-api 0.34+). Field options never change the wire, so a copy
# without `debug_redact` and `deprecated` options is what gets generated.
mkdir -p "$out/proto-v1" "$ours/cri/v1"
perl -pe 's{\s*\[([^\]]*)\]}{ my @o = grep { !/^\s*(debug_redact|deprecated)\s*=\s*\w+\s*$/ } split(/,/, $1); @o ? " [" . join(",", @o) . "]" : "" }ge' \
  "$top/proto/v1/api.proto" >"$out/proto-v1/api.proto" || die "could not copy proto/v1/api.proto"
protoc -I "$out/proto-v1" --plugin="protoc-gen-go=$plugin" \
  --go_opt="Mapi.proto=cribridge/cri/v1" --go_opt=paths=source_relative \
  --go_out="plugins=grpc:$ours/cri/v1" "$out/proto-v1/api.proto" ||
  die "protoc failed on proto/v1/api.proto (copied to $out/proto-v1/api.proto without debug_redact/deprecated)"
grep -q 'StreamContainers' "$ours/cri/v1/api.pb.go" ||
  die "cri/v1/api.pb.go has no StreamContainers client (proto/v1/api.proto without Stream* RPCs?)"

# --- the three main packages ----------------------------------------------------------------
# session.go is written against k8s.io/cri-api's v1 package; for the other versions its one
# import of it is pointed at our generated package. version_*.go holds what really differs.
declare -A api_package=(
  [v1]=k8s.io/cri-api/pkg/apis/runtime/v1
  [v1alpha2]=cribridge/cri/v1alpha2
  [v1alpha1]=cribridge/cri/v1alpha1
)
v1_import='runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"'
[ "$(grep -c "^	$v1_import" "$here/session.go")" = 1 ] ||
  die "session.go must import $v1_import exactly once, on a line of its own"

export GOPATH=$gopath GOCACHE=$out/go-cache GO111MODULE=off GOPROXY=off GOFLAGS= CGO_ENABLED=0
mkdir -p "$bin" "$GOCACHE"
for v in v1 v1alpha2 v1alpha1; do
  main=$ours/cmd/cri-session-$v
  rm -rf "$main"
  mkdir -p "$main"
  sed "s|^	$v1_import|	runtimeapi \"${api_package[$v]}\"|" "$here/session.go" >"$main/session.go"
  cp "$here/version_$v.go" "$main/"
  # -tags: the version files carry build tags so that tests/clients/go itself is never one
  # inconsistent package.
  (cd "$main" && go build -tags "cri_$v" -o "$bin/cri-session-$v" .) || die "go build of cri-session-$v failed"
done

# --- the kubelet replay and the streams client ----------------------------------------------
for tool in kubelet streams; do
  main=$ours/cmd/cri-$tool-v1
  rm -rf "$main"
  mkdir -p "$main"
  cp "$here/$tool.go" "$main/"
  (cd "$main" && go build -tags "cri_$tool" -o "$bin/cri-$tool-v1" .) || die "go build of cri-$tool-v1 failed"
done

version() { dpkg-query -W -f '${Version}' "$1"; }
echo "build.sh: built with $(go version | cut -d' ' -f3), grpc-go $(version golang-google-grpc-dev)," \
  "protoc-gen-go $plugin_package $(version "$plugin_package"), protoc $(version protobuf-compiler)," \
  "gogo protobuf $(version golang-github-gogo-protobuf-dev)," \
  "cri-api $(awk '$1 == "golang-github-kubernetes-cri-api-dev" { print $2 }' "$trixie/.unpacked")" >&2
for v in v1 v1alpha2 v1alpha1; do
  echo "$bin/cri-session-$v"
done
echo "$bin/cri-kubelet-v1"
echo "$bin/cri-streams-v1"
