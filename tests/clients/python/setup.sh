#!/usr/bin/env bash
# Installs the Python CRI test client's dependencies into target/clients/venv and generates its
# stubs from proto/{v1,v1alpha2,v1alpha1}/api.proto into target/clients/python/gen.
# Idempotent: run it again after a proto or a pin changed. Fails (never skips) with what is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="$repo/target/clients/venv"
gen="$repo/target/clients/python/gen"
python="${PYTHON:-python3}"

die() { echo "setup.sh: $*" >&2; exit 1; }

command -v "$python" >/dev/null || die "$python not found on PATH (need CPython 3.11 with venv and pip)"
"$python" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null \
  || die "$python is $("$python" -V 2>&1); need CPython >= 3.9 (CI uses 3.11)"
"$python" -c 'import venv, ensurepip' 2>/dev/null \
  || die "$python lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"

# A venv whose interpreter is gone (say, a removed pyenv version) or that is half made is rebuilt.
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi
# --only-binary: were a wheel missing, pip would otherwise build grpcio from source, which takes
# far too long on a CI machine; failing says at once that the pins do not fit this Python.
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet --only-binary=:all: \
  -r "$here/requirements.txt" \
  || die "pip could not install $here/requirements.txt into $venv (is PyPI reachable? a cp3xx manylinux wheel for this Python?)"

# The three schemas share the file name api.proto. Generated modules register their file in
# protobuf's global descriptor pool by that name, and a second, different api.proto is refused
# there; so each is compiled under its own name. The proto package, which decides the gRPC
# method paths (/runtime.v1.RuntimeService/...), is inside the file and stays as it is.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for version in v1 v1alpha2 v1alpha1; do
  src="$repo/proto/$version/api.proto"
  [[ -f "$src" ]] || die "missing $src"
  cp "$src" "$scratch/cri_$version.proto"
done
# Build into a fresh dir and swap it in, so a failed run leaves no mix of old and new stubs.
rm -rf "$gen.new"
mkdir -p "$gen.new"
"$venv/bin/python" -m grpc_tools.protoc -I"$scratch" --python_out="$gen.new" --pyi_out="$gen.new" \
  --grpc_python_out="$gen.new" "$scratch"/cri_v1.proto "$scratch"/cri_v1alpha2.proto "$scratch"/cri_v1alpha1.proto \
  || die "grpc_tools.protoc failed on the protos in $repo/proto"
rm -rf "$gen"
mv "$gen.new" "$gen"

# Importing every stub checks they load together (the descriptor-pool clash above fails here).
PYTHONPATH="$gen" "$venv/bin/python" -c 'import cri_v1_pb2_grpc, cri_v1alpha2_pb2_grpc, cri_v1alpha1_pb2_grpc' \
  || die "the generated stubs in $gen do not import"
echo "setup.sh: venv $venv, stubs $gen"
