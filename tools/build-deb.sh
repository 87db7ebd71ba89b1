#!/usr/bin/env bash
# Builds the Debian package from the static binary, with dpkg-deb alone (no debhelper, no
# cargo-deb): the binary CI tests is the one packaged, built once.
#
#   tools/build-deb.sh [BINARY]
#
# BINARY defaults to what tools/build-static.sh builds (run first, so the package never holds a
# stale binary). Writes target/dist/cri-bridge_VERSION_amd64.deb and prints its path last.
# What goes where, and why nothing is started: docs/packaging.md.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022

version=$(sed -n '/^\[package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "no version in Cargo.toml's [package]" >&2; exit 1; }
# A semver pre-release (0.2.0-rc.1) must sort before its release in Debian: 0.2.0~rc.1.
deb_version=${version/-/\~}
maintainer=${DEB_MAINTAINER:-cri-bridge maintainers <maintainers@users.noreply.a-seed-603291da.example>}

if [ $# -ge 1 ]; then
  binary=$1
else
  binary=$(tools/build-static.sh | tail -n 1)
fi
[ -x "$binary" ] || { echo "$binary: no such executable" >&2; exit 1; }
# The package's version is Cargo.toml's: refuse a binary built from another.
[ "$("$binary" --version)" = "cri-bridge $version" ] ||
  { echo "$binary says '$("$binary" --version)', Cargo.toml says $version" >&2; exit 1; }
ldd_out=$(ldd "$binary" 2>&1 || true)
if grep -q '=>' <<<"$ldd_out"; then
  echo "$binary is dynamically linked: build it with tools/build-static.sh" >&2
  exit 1
fi

# One timestamp for every file and for the changelog: the last commit's, so that the same tree
# gives the same package.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

root=target/deb/cri-bridge_${deb_version}_amd64
rm -rf "$root"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/cri-bridge" \
  "$root/usr/share/cri-bridge" "$root/usr/share/doc/cri-bridge"

install -m 0755 "$binary" "$root/usr/bin/cri-bridge"

# The units are contrib's, with the binary where the package puts it and a header for their new
# place (contrib's header tells how to install them by hand). Every setting (Type=notify, the
# watchdog, Restart=, ordering, the stop signal and timeout, LimitNOFILE) is kept line for line.
unit() { # unit CONTRIB-FILE HEADER-TEXT > OUT
  printf '%s\n' "$2"
  # Drop contrib's leading comment block, keep everything from the first line that is not one.
  sed -e '1,/^[^#]/ { /^#/d }' -e 's|/usr/local/bin/cri-bridge|/usr/bin/cri-bridge|g' "$1"
}
unit contrib/cri-bridge.service "\
# cri-bridge between the kubelet and the container runtime, as installed by the cri-bridge
# package (contrib/cri-bridge.service, running /usr/bin/cri-bridge). The package enables and
# starts nothing: set the runtime in /etc/cri-bridge/config.yaml, then
#   systemctl enable --now cri-bridge.socket cri-bridge.service
# Upgrades replace this file: change it with \`systemctl edit cri-bridge\` (a drop-in)." \
  >"$root/lib/systemd/system/cri-bridge.service"
unit contrib/cri-bridge.socket "\
# Optional, recommended: systemd holds cri-bridge's socket, so it exists before cri-bridge starts
# and through its restarts (connections wait in the backlog instead of being refused). cri-bridge
# then serves this socket; listen.path, listen.mode and listen.group in its config are not used.
# As installed by the cri-bridge package (contrib/cri-bridge.socket); nothing is enabled until
#   systemctl enable --now cri-bridge.socket cri-bridge.service
# Upgrades replace this file: change it with \`systemctl edit cri-bridge.socket\` (a drop-in)." \
  >"$root/lib/systemd/system/cri-bridge.socket"
chmod 0644 "$root"/lib/systemd/system/*
# The substitution must have happened exactly where it matters, and every other setting must
# have come along: a changed contrib file fails here, not on a node.
grep -qx 'ExecStart=/usr/bin/cri-bridge serve --config /etc/cri-bridge/config.yaml' \
  "$root/lib/systemd/system/cri-bridge.service" ||
  { echo "contrib/cri-bridge.service: ExecStart is not the expected line" >&2; exit 1; }
for f in cri-bridge.service cri-bridge.socket; do
  diff <(grep -v '^#' "contrib/$f" | sed 's|/usr/local/bin/|/usr/bin/|') \
    <(grep -v '^#' "$root/lib/systemd/system/$f") >&2 ||
    { echo "$f: the packaged unit's settings differ from contrib's" >&2; exit 1; }
done

# Inert: the operator copies it into /etc/systemd/system/kubelet.service.d/ to point the kubelet
# at cri-bridge (README, step 4); installed there, it would move the kubelet at the next restart.
install -m 0644 contrib/kubelet-cri-bridge.conf "$root/usr/share/cri-bridge/kubelet-cri-bridge.conf"

# The example, with backend `memory`: the service is not enabled, and the operator sets the
# runtime before enabling it. A conffile, so dpkg keeps the operator's edits across upgrades.
install -m 0644 config.example.yaml "$root/etc/cri-bridge/config.yaml"
echo /etc/cri-bridge/config.yaml >"$root/DEBIAN/conffiles"

# changelog.gz, not changelog.Debian.gz: a native package (no Debian revision). gzip -n: no name
# or time in the header, for the same bytes each time.
{
  echo "cri-bridge ($deb_version) unstable; urgency=medium"
  echo
  echo "  * cri-bridge $version$(git rev-parse --short HEAD 2>/dev/null | sed 's/^/, commit /')."
  echo
  echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$root/usr/share/doc/cri-bridge/changelog.gz"

# The binary is static: besides cri-bridge (Apache-2.0) it holds Rust's standard library, the
# crates below and glibc, whose licenses travel with it. Years: first to last commit.
glibc=$(dpkg-query -W -f '${Version}' libc6-dev)
# (tail, not head: under pipefail, head's early exit would fail git with SIGPIPE.)
first_year=$(git log --format=%cd --date=format:%Y 2>/dev/null | tail -n 1)
years=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
[ -z "$first_year" ] || [ "$first_year" = "$years" ] || years=$first_year-$years
{
  cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cri-bridge
Comment: /usr/bin/cri-bridge is statically linked. Besides cri-bridge itself it
 contains the Rust standard library (MIT or Apache-2.0), the GNU C library
 $glibc (LGPL-2.1+; its source is Debian's glibc package, named in this
 package's Built-Using field) and these Rust crates, each under the license
 its Cargo.toml names:
 .
EOF
  cargo tree --locked --offline -e normal,no-proc-macro --target x86_64-unknown-linux-gnu \
    --prefix none -f '{p} {l}' | sed 's/ (\*)$//' | grep -v '^cri-bridge ' | sort -u | sed 's/^/ /'
  cat <<EOF

Files: *
Copyright: $years the cri-bridge authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.

Files: usr/bin/cri-bridge
Copyright: $years the cri-bridge authors
 the Rust project, the authors of the crates listed above, the Free Software
 Foundation and the GNU C Library authors
License: Apache-2.0 and LGPL-2.1+ and MIT
 On Debian systems, the full texts of the Apache License, Version 2.0 and of
 the GNU Lesser General Public License, version 2.1, are in
 /usr/share/common-licenses/Apache-2.0 and /usr/share/common-licenses/LGPL-2.1.
EOF
} >"$root/usr/share/doc/cri-bridge/copyright"

# lintian takes a static-pie executable (ET_DYN, no NEEDED entry) for a shared library.
install -d -m 0755 "$root/usr/share/lintian/overrides"
cat >"$root/usr/share/lintian/overrides/cri-bridge" <<'EOF'
# static-pie: a position-independent executable with no library to need, not a shared library.
cri-bridge: shared-library-lacks-prerequisites [usr/bin/cri-bridge]
EOF
chmod 0644 "$root/usr/share/lintian/overrides/cri-bridge"

# Only a daemon-reload, and only where systemd runs, so that systemd sees the units as they now
# are (new, upgraded or removed). Never enable, start, restart or stop: enabling is the
# operator's decision, and stopping cri-bridge.socket stops the kubelet that Requires= it.
for script in postinst postrm; do
  cat >"$root/DEBIAN/$script" <<'EOF'
#!/bin/sh
set -e
# Only make systemd read the units again: the package enables, starts and stops nothing.
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF
  chmod 0755 "$root/DEBIAN/$script"
done

# For `dpkg --verify cri-bridge`. dpkg keeps the conffile's own hash: not listed here.
(cd "$root" && find . -type f ! -path './DEBIAN/*' ! -path ./etc/cri-bridge/config.yaml -printf '%P\0' |
  sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

cat >"$root/DEBIAN/control" <<EOF
Package: cri-bridge
Version: $deb_version
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Suggests: containerd | cri-o
Built-Using: glibc (= $glibc)
Section: admin
Priority: optional
Description: CRI version bridge between the kubelet and the container runtime
 cri-bridge lets a Kubernetes kubelet and a container runtime that speak
 different versions of the Container Runtime Interface (v1alpha1, v1alpha2,
 v1) work together, so either side can be upgraded on its own. It serves all
 three versions on one unix socket and converts each call to the version the
 runtime speaks.
 .
 The package installs the daemon, its systemd units, its configuration and a
 kubelet drop-in (in /usr/share/cri-bridge, inert until copied), and enables
 or starts none of them.
EOF

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
deb=target/dist/cri-bridge_${deb_version}_amd64.deb
mkdir -p target/dist
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
