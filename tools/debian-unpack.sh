#!/usr/bin/env bash
# Unpacks packages of another Debian suite into a private directory, leaving the machine's apt
# sources, package database and installed files untouched: a private apt configuration
# (sources, lists and cache under target/debian/apt-SUITE), `apt-get download`, `dpkg-deb -x`.
#
#   tools/debian-unpack.sh SUITE DEST PACKAGE[=VERSION]...
#
# e.g. tools/debian-unpack.sh bullseye target/debian/containerd-1.4.13 containerd
# Prints the versions it unpacked. Idempotent: a package already unpacked in DEST is kept.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 SUITE DEST PACKAGE[=VERSION]..." >&2; exit 2; }
suite=$1 dest=$2
shift 2
top=$(cd "$(dirname "$0")/.." && pwd)
apt_root=$top/target/debian/apt-$suite
mkdir -p "$apt_root/lists/partial" "$apt_root/cache/archives/partial" "$apt_root/debs" "$apt_root/parts" "$dest"
# An empty package database: what this machine has installed must not steer the choice.
: >"$apt_root/status"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "$keyring is missing: apt-get install debian-archive-keyring" >&2; exit 1; }
{
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main"
  # sid (unstable) has no security suite.
  case $suite in
    sid | unstable) ;;
    *) echo "deb [signed-by=$keyring] http://deb.debian.org/debian-security $suite-security main" ;;
  esac
} >"$apt_root/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_root/sources.list"
  -o "Dir::Etc::SourceParts=$apt_root/parts"
  -o "Dir::State::status=$apt_root/status"
  -o "Dir::State::Lists=$apt_root/lists"
  -o "Dir::Cache=$apt_root/cache"
  -o "Dir::Etc::Preferences=/dev/null"
  -o "Dir::Etc::PreferencesParts=$apt_root/parts"
  -o "APT::Architectures::=$(dpkg --print-architecture)"
  -o "Debug::NoLocking=1"
  -o "APT::Sandbox::User=root"
)
# Lists older than a day are fetched again.
if [ -z "$(find "$apt_root/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
  apt-get "${apt_opts[@]}" update -qq >&2 || { echo "apt-get update for $suite failed" >&2; exit 1; }
fi
stamp=$dest/.unpacked
for package in "$@"; do
  if [ -f "$stamp" ] && grep -qx "$package .*" "$stamp"; then
    grep -x "$package .*" "$stamp"
    continue
  fi
  (cd "$apt_root/debs" && apt-get "${apt_opts[@]}" download -qq "$package" >&2) ||
    { echo "cannot download $package from Debian $suite" >&2; exit 1; }
  name=${package%%=*}
  deb=$(ls -t "$apt_root/debs/${name}"_*.deb | head -n 1)
  dpkg-deb -x "$deb" "$dest"
  echo "$package $(dpkg-deb -f "$deb" Version)" | tee -a "$stamp"
done
