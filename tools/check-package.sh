#!/usr/bin/env bash
# CI: builds the static binary and the .deb (tools/build-static.sh, tools/build-deb.sh), then
# checks that the binary is static and runs the README's quick start, and that the package
# installs, verifies, serves, starts nothing, and leaves nothing behind but what dpkg keeps on
# purpose. Runs as root from the repo root (it installs and purges the package):
#
#   bash tools/check-package.sh [BINARY DEB]
#
# With BINARY and DEB, checks those instead of building. Any failure fails the run; nothing is
# skipped. The package is purged on the way out, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
[ "$(id -u)" -eq 0 ] || fail "run as root: the check installs and purges the package"
for tool in ldd file dpkg dpkg-deb systemd-analyze chroot; do
  command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install file systemd)"
done

# Whether dpkg holds anything of cri-bridge: installed, half-installed or only its conffile.
known() {
  local status
  status=$(dpkg-query -W -f '${Status}' cri-bridge 2>/dev/null || true)
  [ -n "$status" ] && [[ $status != *not-installed ]]
}
# Never touch an operator's install: dpkg -i would replace it and the purge below remove it.
if known; then
  fail "cri-bridge is installed here already; this check installs and purges its own"
fi

work=$(mktemp -d /tmp/cri-bridge-check.XXXXXX)
serve_pid= units_stamp=
cleanup() {
  rc=$?
  [ -z "$serve_pid" ] || kill "$serve_pid" 2>/dev/null || true
  if known; then
    echo "== cleanup: dpkg -P cri-bridge"
    dpkg -P cri-bridge >/dev/null || rc=1
  fi
  rm -rf "$work" ${units_stamp:+"$units_stamp"}
  [ "$rc" -eq 0 ] || echo "check-package: FAILED" >&2
  exit "$rc"
}
trap cleanup EXIT

if [ $# -eq 2 ]; then
  binary=$1 deb=$2
else
  step "build: tools/build-static.sh, tools/build-deb.sh"
  binary=$(tools/build-static.sh | tail -n 1)
  deb=$(tools/build-deb.sh "$binary" | tail -n 1)
fi
[ -x "$binary" ] || fail "$binary is not an executable"
[ -f "$deb" ] || fail "$deb is missing"

step "static: $binary"
# ldd prints "statically linked" for a static-pie, "not a dynamic executable" for a plain
# static one; a dynamic file lists its libraries with "=>".
ldd_out=$(ldd "$binary" 2>&1 || true)
echo "ldd:  $ldd_out"
grep -q '=>' <<<"$ldd_out" && fail "ldd lists shared libraries"
grep -Eq 'statically linked|not a dynamic executable' <<<"$ldd_out" || fail "ldd does not say static"
file_out=$(file -b "$binary")
echo "file: $file_out"
grep -Eq 'static-pie linked|statically linked' <<<"$file_out" || fail "file does not say statically linked"
grep -q 'interpreter' <<<"$file_out" && fail "the binary names a dynamic loader"
# glibc's static libc resolves users, groups and host names only by loading the NSS modules of
# the very glibc it was built with, which a node need not have: its NSS code must not be linked
# in. std references getaddrinfo and getpwuid_r; unused, they are dropped at link time. The
# binary is stripped, so look for the NSS loader's own strings rather than for symbols.
nss=$(grep -a -o -e 'nsswitch\.conf' -e 'libnss_[a-z0-9_%.]*' "$binary" | sort -u | tr '\n' ' ' || true)
[ -z "$nss" ] || fail "glibc's NSS code is linked into the static binary ($nss)"
# It runs with no library and no loader at all: an empty root holds only the binary.
mkdir "$work/empty-root"
cp "$binary" "$work/empty-root/cri-bridge"
chroot "$work/empty-root" /cri-bridge --version || fail "the binary does not run in an empty root"

# The README's quick start: serve on a socket with the in-memory runtime, probe it, stop it.
serve() { # serve BINARY SOCKET [SERVE-ARGS...]: starts it, waits for its socket
  local bin=$1 sock=$2
  shift 2
  mkdir -p "$(dirname "$sock")"
  "$bin" serve --listen "$sock" "$@" >"$sock.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 100); do
    [ -S "$sock" ] && return 0
    kill -0 "$serve_pid" 2>/dev/null || { cat "$sock.log" >&2; fail "$bin serve exited"; }
    sleep 0.1
  done
  cat "$sock.log" >&2
  fail "$bin serve: no socket at $sock after 10 s"
}
probe() { # probe BINARY SOCKET: succeeds and names every version served
  local out=$work/probe.out
  "$1" probe "$2" >"$out" 2>&1 || { cat "$out" >&2; fail "$1 probe $2 failed"; }
  grep -q '^bridge: .*serving CRI v1, v1alpha2, v1alpha1' "$out" ||
    { cat "$out" >&2; fail "probe does not report the bridge serving v1, v1alpha2, v1alpha1"; }
  for v in v1 v1alpha2 v1alpha1; do
    grep -qx "CRI $v served" "$out" || { cat "$out" >&2; fail "probe does not say CRI $v served"; }
  done
  echo "probe: $(head -n 1 "$out")"
}
stop() { # stop SOCKET: SIGTERM drains, removes the socket and exits 0
  kill -TERM "$serve_pid"
  wait "$serve_pid" || { cat "$1.log" >&2; fail "serve did not exit 0 on SIGTERM"; }
  serve_pid=
  [ ! -e "$1" ] || fail "$1 is still there after SIGTERM"
}
quick_start() { # quick_start BINARY DIR
  serve "$1" "$2/cri-bridge.sock"
  probe "$1" "$2/cri-bridge.sock"
  stop "$2/cri-bridge.sock"
}

step "quick start: $binary serve --listen $work/static/cri-bridge.sock"
quick_start "$binary" "$work/static"
# listen.group by name: cri-bridge reads /etc/group itself, so the static binary needs no NSS.
group=$(awk -F: '$3 == 1 { print $1; exit }' /etc/group)
[ -n "$group" ] || fail "no group with gid 1 in /etc/group"
printf 'listen:\n  group: %s\n' "$group" >"$work/group.yaml"
serve "$binary" "$work/group/cri-bridge.sock" --config "$work/group.yaml"
[ "$(stat -c %G "$work/group/cri-bridge.sock")" = "$group" ] || fail "listen.group: $group was not applied"
stop "$work/group/cri-bridge.sock"
echo "listen.group: $group (by name) applied"

step "package: $deb"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Suggests\): /  \1: /p'
# Every path the package holds. A file already there would be overwritten now and removed by the
# purge: refuse. Directories already there must stay after removal; the others must go.
mapfile -t paths < <(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|; s|/$||; s|^$|/|')
before_dirs=()
for p in "${paths[@]}"; do
  if [ -d "$p" ]; then before_dirs+=("$p"); elif [ -e "$p" ] || [ -L "$p" ]; then fail "$p exists already"; fi
done
was_dir() { local d; for d in "${before_dirs[@]}"; do [ "$d" = "$1" ] && return 0; done; return 1; }
enabled_before=$(find /etc/systemd/system -name 'cri-bridge*' | sort)

step "dpkg -i"
dpkg -i "$deb"
dpkg -L cri-bridge | sed 's|^/\.$|/|' >"$work/installed.list"
for f in /usr/bin/cri-bridge /lib/systemd/system/cri-bridge.service /lib/systemd/system/cri-bridge.socket \
  /etc/cri-bridge/config.yaml /usr/share/cri-bridge/kubelet-cri-bridge.conf \
  /usr/share/doc/cri-bridge/copyright /usr/share/doc/cri-bridge/changelog.gz; do
  grep -qx "$f" "$work/installed.list" && [ -f "$f" ] || fail "$f is not installed"
done
conffiles=$(dpkg-query -W -f '${Conffiles}' cri-bridge | awk 'NF { print $1 }')
[ "$conffiles" = /etc/cri-bridge/config.yaml ] || fail "conffiles are '$conffiles', not /etc/cri-bridge/config.yaml"
cmp -s /usr/bin/cri-bridge "$binary" || fail "/usr/bin/cri-bridge is not $binary"

step "systemd-analyze verify"
# Works without systemd as PID 1: it loads the units as a manager would (syntax, ExecStart
# executable, the socket's service, the dependencies named). systemd 252 only warns on an unknown
# key or a bad value, exit 0: any output is a failure. A stub kubelet.service carries the
# installed drop-in (as the operator installs it), so its Requires= must find our units.
units=$work/units
mkdir -p "$units/kubelet.service.d"
printf '[Unit]\nDescription=stub kubelet\n[Service]\nExecStart=/bin/true\n' >"$units/kubelet.service"
cp /usr/share/cri-bridge/kubelet-cri-bridge.conf "$units/kubelet.service.d/20-cri-bridge.conf"
verify() { SYSTEMD_UNIT_PATH="$units:" systemd-analyze verify "$@" 2>&1; }
# Its manager stamps /run/systemd/systemd-units-load; where no systemd runs, that stamp is ours.
[ -d /run/systemd/system ] || [ -e /run/systemd/systemd-units-load ] || units_stamp=/run/systemd/systemd-units-load
out=$(verify /lib/systemd/system/cri-bridge.socket /lib/systemd/system/cri-bridge.service \
  "$units/kubelet.service") || { echo "$out" >&2; fail "systemd-analyze verify failed"; }
[ -z "$out" ] || { echo "$out" >&2; fail "systemd-analyze verify warned"; }
# ... and it does catch errors here: a unit with a bad key and a missing binary must not pass.
sed 's|^ExecStart=/usr/bin/cri-bridge|ExecStart=/nonexistent/cri-bridge|; s|^Type=notify|Type=notify\nNoSuchKey=1|' \
  /lib/systemd/system/cri-bridge.service >"$units/broken.service"
out=$(verify "$units/broken.service" || true)
grep -q NoSuchKey <<<"$out" && grep -q /nonexistent/cri-bridge <<<"$out" ||
  { echo "$out" >&2; fail "systemd-analyze verify did not catch a broken unit"; }
echo "verified: cri-bridge.socket, cri-bridge.service, kubelet.service + 20-cri-bridge.conf"

step "installed: /usr/bin/cri-bridge"
/usr/bin/cri-bridge check-config /etc/cri-bridge/config.yaml
quick_start /usr/bin/cri-bridge "$work/installed"

step "nothing enabled or started"
[ "$(find /etc/systemd/system -name 'cri-bridge*' | sort)" = "$enabled_before" ] ||
  fail "dpkg -i enabled a unit: $(find /etc/systemd/system -name 'cri-bridge*')"
for pid_exe in /proc/[0-9]*/exe; do
  [ "$(readlink "$pid_exe" 2>/dev/null)" != /usr/bin/cri-bridge ] || fail "a cri-bridge runs: ${pid_exe%/exe}"
done
if [ -d /run/systemd/system ]; then
  for u in cri-bridge.service cri-bridge.socket; do
    ! systemctl is-active --quiet "$u" || fail "$u is active"
    [ "$(systemctl is-enabled "$u" 2>/dev/null || true)" = disabled ] || fail "$u is not disabled"
  done
  echo "systemd runs: both units inactive and disabled"
else
  echo "systemd is not PID 1 here: no enablement link, no cri-bridge process"
fi

step "dpkg -r: only the conffile stays"
dpkg -r cri-bridge
left=()
while read -r p; do
  case $p in /etc/cri-bridge/config.yaml | /etc/cri-bridge) continue ;; esac
  if [ -e "$p" ] || [ -L "$p" ]; then was_dir "$p" || left+=("$p"); fi
done <"$work/installed.list"
[ ${#left[@]} -eq 0 ] || fail "left after dpkg -r: ${left[*]}"
[ -f /etc/cri-bridge/config.yaml ] || fail "dpkg -r removed the conffile"

step "dpkg -P: the conffile goes too"
dpkg -P cri-bridge
[ ! -e /etc/cri-bridge/config.yaml ] || fail "dpkg -P left /etc/cri-bridge/config.yaml"
was_dir /etc/cri-bridge || [ ! -e /etc/cri-bridge ] || fail "dpkg -P left /etc/cri-bridge"
! known || fail "dpkg still knows cri-bridge"

size() { numfmt --to=iec-i --suffix=B "$(stat -c %s "$1")"; }
echo "check-package: OK in ${SECONDS}s: $(basename "$binary") $(size "$binary") (static), $(basename "$deb") $(size "$deb")"
