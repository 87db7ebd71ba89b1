#!/usr/bin/env bash
# Checks that cri-bridge serves inside the sandbox of contrib/cri-bridge.service, where systemd
# is not PID 1 (CI's machines): the directives that decide what cri-bridge may touch are
# emulated one by one, as root, and the quick start is run inside them.
#
#   ProtectSystem=strict      every mount read-only but /proc, /sys and /dev (a private mount
#                             namespace, each mount remounted read-only)
#   RuntimeDirectory=         /run/cri-bridge writable (bound in before the rest turns read-only)
#   PrivateTmp=               a /tmp of its own
#   CapabilityBoundingSet=    exactly the unit's set (setpriv: after exec, root's capabilities are
#                             the bounding set)
#   NoNewPrivileges=          setpriv --no-new-privs
#
# Inside: the binary serves its socket (mode 0666, a group), answers `cri-bridge probe`, serves a
# grpc-go session, and names a caller of another uid by its executable (readlink of another
# user's /proc/<pid>/exe needs CAP_SYS_PTRACE: the check is run again without it, as the
# control, where that caller's executable must read `?`). The seccomp filter, address families,
# MemoryDenyWriteExecute and the Protect* of kernel state need systemd itself: `systemd-analyze
# verify` checks the unit's syntax (tools/check-package.sh) and `systemd-analyze security
# --offline=true` its exposure, printed here.
#
# Usage: tools/check-unit-sandbox.sh [BINARY]   (default: target/release/cri-bridge if built, else
# target/debug/cri-bridge, which `cargo test` builds)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-}
if [ -z "$bin" ]; then
  bin=$top/target/release/cri-bridge
  [ -x "$bin" ] || bin=$top/target/debug/cri-bridge
fi
session=$top/target/clients/bin/cri-session-v1
unit=$top/contrib/cri-bridge.service
die() { echo "check-unit-sandbox.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it makes a mount namespace)"
[ -x "$bin" ] || die "$bin is missing: cargo build (or cargo test)"
[ -x "$session" ] || die "$session is missing: bash tests/clients/go/build.sh"
for tool in unshare setpriv systemd-analyze; do command -v "$tool" >/dev/null || die "$tool is missing"; done

# The unit's capabilities, as setpriv writes them: CAP_CHOWN -> +chown.
caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")
[ -n "$caps" ] || die "$unit sets no CapabilityBoundingSet="
grep -qx 'ProtectSystem=strict' "$unit" || die "$unit: ProtectSystem=strict expected"
grep -qx 'RuntimeDirectory=cri-bridge' "$unit" || die "$unit: RuntimeDirectory=cri-bridge expected"
grep -qx 'NoNewPrivileges=yes' "$unit" || die "$unit: NoNewPrivileges=yes expected"
setpriv_caps=$(for c in $caps; do c=${c#CAP_}; printf ',+%s' "${c,,}"; done)

work=$(mktemp -d /var/tmp/crib-sandbox.XXXXXX)
chmod 0755 "$work"
made_run_dir=false
[ -d /run/cri-bridge ] || made_run_dir=true
trap 'rm -rf "$work"; if $made_run_dir; then rmdir /run/cri-bridge 2>/dev/null || true; fi' EXIT
mkdir -p /run/cri-bridge "$work/run" "$work/tmp"
# The binary and the session client where the sandbox sees them (the checkout may be under /tmp,
# which the sandbox replaces with its own) and uid 65534 may run them (or in a 0700 home).
install -m 0755 "$session" "$work/cri-session-v1"
install -m 0755 "$bin" "$work/cri-bridge"
bin=$work/cri-bridge

# run_in_sandbox CAPS: serves, then runs the quick start; prints the exe of the uid-65534 caller.
run_in_sandbox() {
  local caps=$1
  rm -rf "${work:?}/run/"* "$work/out"
  cat >"$work/config.yaml" <<EOF
listen:
  path: /run/cri-bridge/cri-bridge.sock
  mode: "0666"
  group: "0"
backend:
  endpoint: memory
EOF
  unshare --mount --propagation private bash -s "$bin" "$work" "$caps" <<'INSIDE'
set -euo pipefail
bin=$1 work=$2 caps=$3
mount --bind "$work/run" /run/cri-bridge
mount --bind "$work/tmp" /tmp
# ProtectSystem=strict: every mount read-only but the API file systems and the two above.
awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r mp; do
  case "$mp" in
    /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/run/cri-bridge|/tmp) continue ;;
  esac
  mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
if touch /usr/.crib-sandbox 2>/dev/null || touch "$work/.crib-sandbox" 2>/dev/null; then
  echo "the file system is writable inside: ProtectSystem=strict not emulated" >&2; exit 1
fi
setpriv --no-new-privs --bounding-set "-all$caps" --inh-caps -all \
  "$bin" serve --config "$work/config.yaml" >/run/cri-bridge/log 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S /run/cri-bridge/cri-bridge.sock ] && break; sleep 0.1; done
[ -S /run/cri-bridge/cri-bridge.sock ] || { cat /run/cri-bridge/log >&2; echo "no socket" >&2; exit 1; }
[ "$(stat -c %a /run/cri-bridge/cri-bridge.sock)" = 666 ] || { echo "listen.mode not applied" >&2; exit 1; }
"$bin" probe /run/cri-bridge/cri-bridge.sock >/run/cri-bridge/probe || { cat /run/cri-bridge/probe >&2; exit 1; }
"$work/cri-session-v1" -socket /run/cri-bridge/cri-bridge.sock >/run/cri-bridge/session 2>&1 ||
  { cat /run/cri-bridge/session >&2; exit 1; }
setpriv --reuid 65534 --regid 65534 --clear-groups "$work/cri-session-v1" -socket /run/cri-bridge/cri-bridge.sock \
  >/run/cri-bridge/session-nobody 2>&1 || { cat /run/cri-bridge/session-nobody >&2; exit 1; }
"$bin" callers --json /run/cri-bridge/cri-bridge.sock >/run/cri-bridge/callers
kill -TERM "$daemon"; wait "$daemon" || true
INSIDE
  python3 - "$work/run/callers" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
nobody = [r for r in rows if r["uid"] == 65534]
print(nobody[0]["exe"] if nobody else "none")
PY
}

echo "== systemd-analyze security --offline=true (exposure, lower is safer)"
(cd "$(dirname "$unit")" && systemd-analyze security --offline=true "$(basename "$unit")" | tail -1)

echo "== the unit's sandbox (capabilities: $caps)"
exe=$(run_in_sandbox "$setpriv_caps")
case "$exe" in
  */cri-session-v1) echo "served: probe, a v1 session as root and as uid 65534; that caller named $exe" ;;
  *) die "inside the sandbox, the uid-65534 caller's executable reads ${exe@Q}" ;;
esac

echo "== control: the same without CAP_SYS_PTRACE"
control=${setpriv_caps/,+sys_ptrace/}
exe=$(run_in_sandbox "$control")
[ "$exe" = "?" ] || die "without CAP_SYS_PTRACE the other uid's executable should be unreadable, got ${exe@Q}"
echo "without CAP_SYS_PTRACE the uid-65534 caller's executable reads ?: the capability is what names it"
echo "== the unit's sandbox serves"
