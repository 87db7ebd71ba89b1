#!/usr/bin/env bash
# crictl-check.sh SOCKET IMAGE WORKDIR: crictl 1.37 (tools/go-peers.sh builds it) over the CRI
# socket SOCKET (CRI v1), a fixed script of commands: version, info, rmi, pull, images, inspecti,
# runp, pods, inspectp, create, start, ps, inspect, exec (streaming and sync), logs, stop, rm,
# stopp, rmp, rmi; a pod and a container from JSON configs written to WORKDIR (where the pod's
# logs go too), the container running IMAGE. Prints each command as `== <name> (exit <status>)`
# and its output with what differs from run to run replaced: ids and digests, times and ages,
# pids, the pod's address, MAC and namespace paths, the runtime's directory
# (CRICTL_CHECK_RUNTIME_DIR, else the socket's), ports, column padding. Two runs (natively and
# through cri-bridge, say) can then be compared line by line (tests/critest.rs does). A failing
# command is printed with its status and the script goes on; it exits 0 unless it cannot run.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 SOCKET IMAGE WORKDIR" >&2; exit 2; }
socket=$1 image=$2 work=$3
top=$(cd "$(dirname "$0")/.." && pwd)
crictl=$top/target/peers/crictl-1.37.0
[ -x "$crictl" ] || { echo "crictl-check.sh: $crictl is missing: run \`bash tools/go-peers.sh\`" >&2; exit 2; }
mkdir -p "$work/logs"
# crictl's own configuration: the endpoints again (no /etc/crictl.yaml of the machine's is read).
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$socket" "$socket" >"$work/crictl.yaml"

# The runtime's own directory, as it names its paths: CRICTL_CHECK_RUNTIME_DIR, or the socket's.
runtime_dir=${CRICTL_CHECK_RUNTIME_DIR:-$(dirname "$socket")}

normalize() {
  sed -E \
    -e "s#$runtime_dir#<runtime-dir>#g" \
    -e "s#$work#<work>#g" \
    -e 's/sha256:[0-9a-f]{64}/sha256:<digest>/g' \
    -e 's/\b[0-9a-f]{64}\b/<id>/g' \
    -e 's/\b[0-9a-f]{13}\b/<id>/g' \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:?[0-9]{2})?( [A-Z]{3,4})?/<time>/g' \
    -e 's/\b[0-9]{16,19}\b/<ns>/g' \
    -e 's/(About (a|an) [a-z]+|Less than a second|[0-9]+ [a-z]+s?) ago/<ago>/g' \
    -e 's/"pid": [0-9]+/"pid": <pid>/g' \
    -e 's#/proc/[0-9]+/#/proc/<pid>/#g' \
    -e 's#/var/run/netns/cni-[0-9a-f-]+#/var/run/netns/cni-<id>#g' \
    -e 's/\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b/<mac>/g' \
    -e 's/127\.0\.0\.1:[0-9]+/127.0.0.1:<port>/g' \
    -e 's/127\.213\.[0-9]+\.[0-9]+/<pod-ip>/g' \
    -e 's/[ \t]+/ /g' -e 's/ $//'
}

# step NAME ARGS...: crictl ARGS against the socket; its output normalized.
step() {
  local name=$1
  shift
  local out status
  out=$("$crictl" --config "$work/crictl.yaml" --runtime-endpoint "unix://$socket" --image-endpoint "unix://$socket" --timeout 60s "$@" 2>&1)
  status=$?
  echo "== $name (exit $status)"
  printf '%s\n' "$out" | normalize
  last=$out
}

cat >"$work/pod.json" <<EOF
{
  "metadata": { "name": "crictl-check", "namespace": "crictl-check", "uid": "crictl-check-uid", "attempt": 1 },
  "log_directory": "$work/logs",
  "labels": { "app": "crictl-check" },
  "linux": {}
}
EOF
cat >"$work/container.json" <<EOF
{
  "metadata": { "name": "main" },
  "image": { "image": "$image" },
  "command": ["sh", "-c", "echo started; exec sleep 3600"],
  "log_path": "main.log",
  "labels": { "role": "main" },
  "linux": {}
}
EOF

last=""
step version version
step info info
# A pull that fetches: the image removed first (whether or not it was there).
step rmi-before rmi "$image"
step pull pull "$image"
step images images
step inspecti inspecti "$image"
step runp runp "$work/pod.json"
pod=$(printf '%s' "$last" | tail -1)
step pods pods --name crictl-check
step inspectp inspectp "$pod"
step create create "$pod" "$work/container.json" "$work/pod.json"
ctr=$(printf '%s' "$last" | tail -1)
step start start "$ctr"
step ps ps -a --pod "$pod"
step inspect inspect "$ctr"
step exec exec "$ctr" echo hello
step exec-sync exec -s "$ctr" sh -c 'echo to stdout; echo to stderr >&2; exit 3'
sleep 1
step logs logs "$ctr"
step stop stop --timeout 2 "$ctr"
step ps-exited ps -a --pod "$pod"
step rm rm "$ctr"
step stopp stopp "$pod"
step rmp rmp "$pod"
step pods-gone pods --name crictl-check
step rmi rmi "$image"
exit 0
