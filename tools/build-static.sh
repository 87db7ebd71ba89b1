#!/usr/bin/env bash
# Builds the release binary with no dynamic library dependency, so that one file runs on any
# x86_64 Linux (Flatcar's /opt/bin, an old or a new distribution) and goes into the .deb as is:
#
#   tools/build-static.sh
#
# Writes target/dist/cri-bridge-VERSION-x86_64-linux-static and its .sha512 (VERSION from
# Cargo.toml), and prints the artifact's path last.
#
# glibc, statically linked (-C target-feature=+crt-static), rather than musl: the musl target is
# not installed on the CI machines. glibc's static libc cannot load NSS modules for name lookups
# (getpwnam, getgrnam, getaddrinfo): cri-bridge needs none. listen.group is read from /etc/group
# by cri-bridge itself (src/frontend.rs), metrics.listen is a numeric address, and the endpoints
# are unix sockets; tools/check-package.sh checks that glibc's NSS code is not linked in.
# `cri-bridge move` is left out (`--no-default-features`, Cargo.toml's `move` feature): its
# Kubernetes client resolves the API server's name and reads the home directory through NSS.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n '/^\[package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "no version in Cargo.toml's [package]" >&2; exit 1; }
target=x86_64-unknown-linux-gnu

# An explicit --target: RUSTFLAGS then applies only to what runs on the node, not to build.rs
# and the proc macros, which run here. A target dir of its own: the flags differ from a plain
# `cargo build`, so sharing target/ would rebuild everything each time one or the other runs.
# Symbols stripped, as Debian wants its binaries (about 2.5 of 11.5 MB): a panic still names its
# file and line, a backtrace no longer its functions.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked --no-default-features --target "$target" --target-dir target/static --bin cri-bridge

built=target/static/$target/release/cri-bridge
# A dynamically linked file must never leave here under a "-static" name.
# (Its output kept first: under pipefail, grep -q's early exit could fail ldd and hide a match.)
ldd_out=$(ldd "$built" 2>&1 || true)
if grep -q '=>' <<<"$ldd_out"; then
  echo "$built is dynamically linked:" >&2
  ldd "$built" >&2
  exit 1
fi

name=cri-bridge-$version-x86_64-linux-static
mkdir -p target/dist
# install writes a new file instead of rewriting one that a test may be running.
install -m 0755 "$built" "target/dist/$name"
# Written in target/dist so the file names the artifact alone: `sha512sum -c NAME.sha512` works
# next to a download.
(cd target/dist && sha512sum "$name" >"$name.sha512")
echo "target/dist/$name"
