#!/usr/bin/env bash
# A two-node Kubernetes 1.37.2 cluster on this machine (tests/cluster_support): the control plane
# of tools/control-plane.sh, node-a (Docker 20.10 through cri-dockerd 0.4.3 behind cri-bridge,
# containerd 2.4.2 beside it) and node-b (containerd 2.4.2), their kubelets, and kube-proxy.
#
#   tools/cluster.sh up [DIR]     builds what is missing, starts the cluster in DIR (default
#                                 target/cluster/up), waits until both nodes are Ready, and prints
#                                 the admin's KUBECONFIG and kubectl
#   tools/cluster.sh down [DIR]   stops it all: containers, runtimes, kubelets, control plane
#
# The cluster is held by a test process (cargo test --test cluster_move, ignored test
# hold_the_cluster_for_tools_cluster_sh) that starts it, writes DIR/ready, and stops it when
# DIR/stop appears; its output is DIR/holder.log. Run as root, never beside the node e2e suite
# (tools/node-e2e.sh): the kubelets share /var/lib/kubelet/device-plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 1 ] || usage
command=$1
dir=$(realpath -m "${2:-$top/target/cluster/up}")
[ "$(id -u)" = 0 ] || { echo "cluster.sh: run as root (the cluster runs kubelets)" >&2; exit 1; }

case "$command" in
up)
  if [ -f "$dir/holder.pid" ] && kill -0 "$(cat "$dir/holder.pid")" 2>/dev/null; then
    echo "cluster.sh: a cluster already runs in $dir (tools/cluster.sh down $dir)" >&2
    exit 1
  fi
  bash tools/go-peers.sh
  bash tools/build-node-e2e.sh
  bash tools/build-cluster.sh
  cargo test --locked --test cluster_move --no-run
  mkdir -p "$dir"
  rm -f "$dir/ready" "$dir/stop"
  CLUSTER_DIR=$dir nohup cargo test --locked --test cluster_move -- --ignored --exact \
    hold_the_cluster_for_tools_cluster_sh --nocapture > "$dir/holder.log" 2>&1 &
  echo $! > "$dir/holder.pid"
  for _ in $(seq 600); do
    if [ -f "$dir/ready" ]; then
      bin=$top/target/peers/kubernetes-1.37.2
      echo "cluster up in $dir: node-a (Docker behind cri-bridge, $dir/node-a/cri-bridge.yaml), node-b (containerd)"
      echo "export KUBECONFIG=$(cat "$dir/ready")"
      echo "alias kubectl=$bin/kubectl"
      exit 0
    fi
    if ! kill -0 "$(cat "$dir/holder.pid")" 2>/dev/null; then
      echo "cluster.sh: the cluster did not start; the end of $dir/holder.log:" >&2
      tail -n 40 "$dir/holder.log" >&2
      exit 1
    fi
    sleep 1
  done
  echo "cluster.sh: no cluster after 600 s; see $dir/holder.log" >&2
  exit 1
  ;;
down)
  if [ ! -f "$dir/holder.pid" ] || ! kill -0 "$(cat "$dir/holder.pid")" 2>/dev/null; then
    echo "cluster down (nothing runs in $dir)"
    # A holder that died leaves the control plane: stop it too.
    [ -d "$dir/control-plane" ] && bash tools/control-plane.sh down "$dir/control-plane"
    exit 0
  fi
  touch "$dir/stop"
  for _ in $(seq 180); do
    if ! kill -0 "$(cat "$dir/holder.pid")" 2>/dev/null; then
      echo "cluster down"
      exit 0
    fi
    sleep 1
  done
  echo "cluster.sh: the cluster did not stop within 180 s; see $dir/holder.log" >&2
  exit 1
  ;;
*) usage ;;
esac
