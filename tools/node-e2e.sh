#!/usr/bin/env bash
# Kubernetes' node end-to-end suite (test/e2e_node, 1.37.2) against a runtime, directly or
# through cri-bridge on its default config; and a test-by-test comparison of two runs.
#
#   tools/node-e2e.sh RUNTIME [--through-bridge] [--focus REGEX] [--skip REGEX] [--procs N] [--out DIR]
#   tools/node-e2e.sh compare A/results.txt B/results.txt
#
# RUNTIME: containerd-2.4.2, containerd-2.1.9, containerd-1.7.24, containerd-1.6.20,
# containerd-1.4.13 (started here, each with the suite's images in a registry of its own),
# cri-dockerd (Docker 20.10 behind cri-dockerd 0.4.3), routed (containerd 2.4.2 as the default
# and cri-dockerd for the `docker` RuntimeClass handler, behind one cri-bridge), or the path or
# unix:// address of any CRI socket already serving (CRI-O, say); that one needs
# NODE_E2E_REGISTRY=HOST:PORT, a registry holding the suite's images.
#
# The suite starts its own etcd and API server and the kubelet 1.37.2, with /var/lib/kubelet as
# its root: run as root, one run at a time, on a machine whose kubelet is not running.
# --focus and --skip are ginkgo regular expressions over the tests' full names; by default the
# run is what containerd's CI runs: focus `\[NodeConformance\]`, skip `\[Flaky\]|\[Slow\]|\[Serial\]`.
# --procs N runs N tests at once through ginkgo's CLI (default 8; 1 runs the suite's binary alone).
# The run writes DIR (default target/node-e2e/RUNTIME-{direct,through-bridge}): report.json
# (ginkgo's JSON report), results.txt (`PASS|FAIL|SKIP <test>` per line), suite.log, kubelet.log,
# and cri-bridge's log.
#
# `compare` prints each test whose outcome differs between two results.txt files, and those only
# one has; it exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

if [ "${1:-}" = compare ]; then
  [ $# -eq 3 ] || usage
  a=$2 b=$3
  for f in "$a" "$b"; do [ -f "$f" ] || { echo "node-e2e.sh compare: no file $f" >&2; exit 2; }; done
  # name<TAB>outcome per file, joined on the name.
  awk -v A="$a" -v B="$b" '
    FNR == 1 { file++ }
    { outcome = $1; name = substr($0, length($1) + 2); seen[name] = 1; if (file == 1) ra[name] = outcome; else rb[name] = outcome }
    END {
      differ = 0; same = 0
      for (name in seen) {
        oa = (name in ra) ? ra[name] : "-"; ob = (name in rb) ? rb[name] : "-"
        if (oa == ob) { same++; continue }
        printf "%s -> %s  %s\n", oa, ob, name; differ++
      }
      printf "== %d tests the same, %d different (%s -> %s)\n", same, differ, A, B > "/dev/stderr"
      exit differ > 0 ? 1 : 0
    }' "$a" "$b" | sort -k4
  exit "${PIPESTATUS[0]}"
fi

[ $# -ge 1 ] || usage
runtime=$1
shift
bridge=0
focus=
skip=
procs=
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --through-bridge) bridge=1 ;;
    --focus) focus=$2; shift ;;
    --skip) skip=$2; shift ;;
    --procs) procs=$2; shift ;;
    --out) out=$(realpath -m "$2"); shift ;;
    *) echo "node-e2e.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "node-e2e.sh: run as root (the suite runs a kubelet)" >&2; exit 1; }

# The peers: the suite, its kubelet, agnhost and kubectl; containerd 2.4.2 and the look-alikes'
# programs; cri-dockerd; Debian's containerds.
bash tools/build-node-e2e.sh
bash tools/go-peers.sh
case "$runtime" in
  cri-dockerd | routed) bash tools/docker-peers.sh ;;
esac
case "$runtime" in
  containerd-1.4.13) tools/debian-unpack.sh bullseye target/debian/containerd-1.4.13 containerd ;;
  containerd-1.7.24) tools/debian-unpack.sh trixie target/debian/containerd-1.7.24 containerd ;;
  containerd-2.1.9) tools/debian-unpack.sh sid target/debian/containerd-2.1.9 containerd ;;
esac

export NODE_E2E_RUNTIME=$runtime NODE_E2E_BRIDGE=$bridge
[ -n "$focus" ] && export NODE_E2E_FOCUS=$focus
[ -n "$skip" ] && export NODE_E2E_SKIP=$skip
[ -n "$procs" ] && export NODE_E2E_PROCS=$procs
[ -n "$out" ] && export NODE_E2E_OUT=$out
exec cargo test --locked --test node_e2e -- --ignored --exact suite_from_env --nocapture
