#!/usr/bin/env bash
# Runs the control plane of a one-machine Kubernetes 1.37.2 test cluster: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler, built by tools/build-cluster.sh. The nodes (kubelets
# and their container runtimes) are not started here; they join with the files this writes.
#
#   tools/control-plane.sh up DIR     writes a PKI and kubeconfigs into DIR (an absolute path),
#                                     starts the four components in the background, waits until
#                                     they are ready, and prints the admin kubeconfig's path
#   tools/control-plane.sh down DIR   stops what `up` started; DIR and its logs stay
#   tools/control-plane.sh env DIR    prints KUBECONFIG and KUBECTL exports: eval "$(... env DIR)"
#
# Everything listens on 127.0.0.1 only, on ports chosen to clash with neither a kubelet (10248,
# 10250, 10255) nor a kubeadm control plane (2379, 2380, 6443, 10257, 10259; the node e2e suite's
# API server takes 6443 too):
#
#   etcd                     2479 (clients, plain HTTP), 2480 (peers)
#   kube-apiserver           7443 (HTTPS)
#   kube-controller-manager  11257 (HTTPS: /healthz, /metrics)
#   kube-scheduler           11259 (HTTPS: /healthz, /metrics)
#
# What DIR holds after `up`:
#
#   pki/ca.crt, ca.key            the cluster CA: it signs every certificate below but
#                                 front-proxy-client's, the API server trusts client
#                                 certificates it signed, and the controller-manager signs CSRs
#                                 with it
#   pki/front-proxy-ca.crt, .key  the CA of the API server's client certificate towards
#                                 aggregated API servers (front-proxy-client)
#   pki/sa.key, sa.pub            the service-account token signing key pair
#   pki/NAME.crt, NAME.key        serving certificates (kube-apiserver, *-serving), the API
#                                 server's client certificate towards kubelets
#                                 (kube-apiserver-kubelet-client), and client certificates
#                                 (admin, kube-controller-manager, kube-scheduler, kube-proxy,
#                                 kubelet-NODE)
#   admin.kubeconfig              user admin, group system:masters
#   kube-controller-manager.kubeconfig, kube-scheduler.kubeconfig, kube-proxy.kubeconfig
#   NODE.kubeconfig               one per name in $NODES: user system:node:NODE, group system:nodes
#   NAME.log, NAME.pid            per component; etcd's data is in etcd-data/
#
# A node joins with its kubelet's --kubeconfig=DIR/NODE.kubeconfig (API server
# https://127.0.0.1:7443), the node name NODE (--hostname-override=NODE: the Node authorizer and
# the NodeRestriction admission let a kubelet touch only the Node its certificate names), and
# authentication.x509.clientCAFile DIR/pki/ca.crt in its configuration, which lets the API server
# in with its client certificate pki/kube-apiserver-kubelet-client.crt (for logs, exec, ...). The
# API server dials a kubelet at its Node's InternalIP (this machine's address, not 127.0.0.1) and
# the kubelet's port, and does not verify the kubelet's serving certificate.
#
# `up` on a DIR that a `down` left behind starts the same cluster again: the PKI and etcd's data
# are kept, and only missing files are made.
#
# Environment: NODES (default "node-a node-b"), the node names to make credentials for;
# WAIT_SECONDS (default 180), how long each component may take to become ready.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

VERSION=1.37.2
bin=$top/target/peers/kubernetes-$VERSION
NODES=${NODES:-node-a node-b}
WAIT_SECONDS=${WAIT_SECONDS:-180}

ETCD_CLIENT_PORT=2479
ETCD_PEER_PORT=2480
APISERVER_PORT=7443
CONTROLLER_MANAGER_PORT=11257
SCHEDULER_PORT=11259
SERVICE_CIDR=10.96.0.0/24
# The first address of SERVICE_CIDR: the API server gives it to the `kubernetes` Service.
KUBERNETES_SERVICE_IP=10.96.0.1
CLUSTER_CIDR=10.110.0.0/16
NODE_CIDR_MASK_SIZE=24

# Started by `up` in this order, stopped by `down` in the reverse one.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)

usage() {
  echo "usage: tools/control-plane.sh up DIR | down DIR | env DIR   (DIR an absolute path)" >&2
  exit 2
}

[ "$#" = 2 ] || usage
action=$1
dir=$2
case "$dir" in
  /*) ;;
  *) usage ;;
esac
dir=${dir%/}
pki=$dir/pki
server=https://127.0.0.1:$APISERVER_PORT

# The components this run of the script started, in order.
started=()

# On any failure: name the step, and after a failed `up` stop what this `up` started (and only
# that: not a control plane that was running already), so that nothing is left holding the ports.
# The logs stay in DIR.
on_exit() {
  local status=$? i
  [ "$status" -ne 0 ] || return 0
  echo "control-plane.sh: FAILED ($status) while: $step" >&2
  if [ "${#started[@]}" -gt 0 ]; then
    echo "control-plane.sh: stopping what was started; logs are in $dir" >&2
    for ((i = ${#started[@]} - 1; i >= 0; i--)); do
      stop "${started[i]}" || true
    done
  fi
}
step="starting"
trap on_exit EXIT

# Stops the script: the message, then the last lines of COMPONENT's log if one is named (of this
# run's part of it: from the line `start` wrote last).
fail() {
  local message=$1 component=${2:-} log from
  echo "control-plane.sh: $message" >&2
  log=$dir/$component.log
  if [ -n "$component" ] && [ -f "$log" ]; then
    from=$(grep -n '^==== .* control-plane.sh up$' "$log" | tail -n 1 | cut -d: -f1)
    echo "---- last 40 lines of $log ----" >&2
    tail -n +"${from:-1}" "$log" | tail -n 40 >&2
    echo "----" >&2
  fi
  exit 1
}

say() {
  echo "control-plane.sh: $*" >&2
}

# --- Processes ----------------------------------------------------------------------------------

# Prints the pid of COMPONENT if it runs, from its pid file. A pid is taken for COMPONENT only if
# that process runs COMPONENT's binary: the number may have been reused since, and a process that
# has exited but not been reaped (a zombie) has no command line.
running_pid() {
  local component=$1 pid argv0
  [ -f "$dir/$component.pid" ] || return 1
  pid=$(cat "$dir/$component.pid")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1) || return 1
  [ "$argv0" = "$bin/$component" ] || return 1
  echo "$pid"
}

# Starts COMPONENT's binary with ARGS in the background. setsid gives it a session of its own, so
# that neither the caller's Ctrl-C nor its terminal closing reaches it; it outlives this script.
start() {
  local component=$1
  shift
  echo "==== $(date -u +%FT%TZ) control-plane.sh up" >>"$dir/$component.log"
  setsid "$bin/$component" "$@" </dev/null >>"$dir/$component.log" 2>&1 &
  local pid=$! i
  echo "$pid" >"$dir/$component.pid"
  started+=("$component")
  # Until the child has exec'd the binary it still runs this script, and running_pid, which goes
  # by the command line, would take it for gone: wait for the exec (quick, but not instant on a
  # busy machine).
  for ((i = 0; i < 100; i++)); do
    running_pid "$component" >/dev/null && break
    sleep 0.1
  done
  running_pid "$component" >/dev/null ||
    fail "$component did not start: pid $pid is not running $bin/$component after 10s" "$component"
  say "started $component (pid $pid), log $dir/$component.log"
}

# Waits until CHECK (a command) succeeds, at most WAIT_SECONDS; fails with COMPONENT's log when it
# exits or the time is up.
wait_ready() {
  local component=$1 what=$2
  shift 2
  local deadline=$((SECONDS + WAIT_SECONDS))
  until "$@" >/dev/null 2>&1; do
    running_pid "$component" >/dev/null ||
      fail "$component exited while waiting for $what" "$component"
    [ "$SECONDS" -lt "$deadline" ] ||
      fail "$component: no $what after ${WAIT_SECONDS}s" "$component"
    sleep 1
  done
  say "$component: $what"
}

# Stops COMPONENT: SIGTERM, then SIGKILL if it still runs after 10 seconds. (The API server, for
# one, ignores SIGTERM while it waits for etcd at its start.)
stop() {
  local component=$1 pid i
  pid=$(running_pid "$component") || {
    rm -f "$dir/$component.pid"
    return 0
  }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    running_pid "$component" >/dev/null || break
    sleep 0.5
  done
  if running_pid "$component" >/dev/null; then
    say "$component (pid $pid) still runs 10s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      running_pid "$component" >/dev/null || break
      sleep 0.5
    done
    if running_pid "$component" >/dev/null; then
      say "$component (pid $pid) still runs 10s after SIGKILL"
      return 1
    fi
  fi
  rm -f "$dir/$component.pid"
  say "stopped $component (pid $pid)"
}

stop_all() {
  local i status=0
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop "${COMPONENTS[i]}" || status=1
  done
  return "$status"
}

# True if something accepts connections on 127.0.0.1:PORT (bash's /dev/tcp, no other tool).
port_in_use() {
  (: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# --- Checks before starting ---------------------------------------------------------------------

check_prerequisites() {
  step="checking the binaries and tools"
  local component tool port
  for component in "${COMPONENTS[@]}"; do
    [ -x "$bin/$component" ] || fail "no $bin/$component: run tools/build-cluster.sh first"
  done
  [ -x "$bin/kubectl" ] || fail "no $bin/kubectl: run tools/build-node-e2e.sh first (it builds kubectl)"
  for tool in openssl curl setsid base64; do
    command -v "$tool" >/dev/null || fail "no $tool on the PATH"
  done

  step="checking that the control plane in $dir is not running already"
  for component in "${COMPONENTS[@]}"; do
    if running_pid "$component" >/dev/null; then
      fail "$component already runs from $dir (pid $(running_pid "$component")): run down first"
    fi
  done

  step="checking that the ports are free"
  for port in "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" \
    "$CONTROLLER_MANAGER_PORT" "$SCHEDULER_PORT"; do
    if port_in_use "$port"; then
      fail "port 127.0.0.1:$port is taken (another control plane? see: ss -ltnp 'sport = :$port')"
    fi
  done
}

# --- PKI ----------------------------------------------------------------------------------------
# P-256 keys: quick to make, and every component accepts them (the service-account tokens are
# then signed ES256). Certificates are made only when missing, so a second `up` keeps them.

new_key() {
  (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null)
}

# NAME CN: pki/NAME.crt and .key, a self-signed CA.
make_ca() {
  local name=$1 cn=$2
  step="making the CA pki/$name.crt"
  [ -f "$pki/$name.crt" ] && return 0
  new_key "$pki/$name.key"
  openssl req -x509 -new -key "$pki/$name.key" -subj "/CN=$cn" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$pki/$name.crt"
}

# NAME SUBJECT USAGE [SAN [CA]]: pki/NAME.key and pki/NAME.crt, signed by pki/CA.crt (default: the
# cluster CA, ca), for USAGE serverAuth or clientAuth.
make_cert() {
  local name=$1 subject=$2 usage=$3 san=${4:-} ca=${5:-ca}
  step="making pki/$name.crt ($subject)"
  [ -f "$pki/$name.crt" ] && return 0
  new_key "$pki/$name.key"
  local extensions="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$usage"
  [ -z "$san" ] || extensions+="
subjectAltName=$san"
  openssl req -new -key "$pki/$name.key" -subj "$subject" |
    openssl x509 -req -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -days 365 \
      -set_serial "0x$(openssl rand -hex 16)" -extfile <(echo "$extensions") \
      -out "$pki/$name.crt" 2>/dev/null
}

make_service_account_keys() {
  step="making the service-account key pair (pki/sa.key, pki/sa.pub)"
  [ -f "$pki/sa.pub" ] && return 0
  new_key "$pki/sa.key"
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
}

# FILE CERT USER: a kubeconfig for the API server as USER, with the identity in pki/CERT.crt and
# .key, all embedded, so that the file can be handed to a node as it is.
make_kubeconfig() {
  local file=$1 cert=$2 user=$3
  step="writing $file"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cri-bridge-test
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$cert.crt")
    client-key-data: $(base64 -w0 "$pki/$cert.key")
contexts:
- name: $user
  context:
    cluster: cri-bridge-test
    user: $user
current-context: $user
EOF
  chmod 600 "$file"
}

make_pki() {
  mkdir -p "$pki"
  chmod 700 "$pki"
  make_ca ca cri-bridge-test-ca
  make_service_account_keys

  # The API server's serving certificate: for this machine, and for the names and address pods
  # would reach it by through the `kubernetes` Service.
  make_cert kube-apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # The controllers' serving certificates, so that their health checks can verify them.
  make_cert kube-controller-manager-serving "/CN=kube-controller-manager" serverAuth "IP:127.0.0.1,DNS:localhost"
  make_cert kube-scheduler-serving "/CN=kube-scheduler" serverAuth "IP:127.0.0.1,DNS:localhost"
  # The API server's identity towards kubelets (logs, exec, port-forward): system:masters, so a
  # kubelet's webhook authorization lets it do anything.
  make_cert kube-apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  # The API server's identity towards aggregated API servers (metrics-server, ...), from a CA of
  # its own: a client certificate from it may tell who the user is in request headers. Without
  # it the controllers log, again and again, that the request-header CA bundle is missing.
  make_ca front-proxy-ca cri-bridge-test-front-proxy-ca
  make_cert front-proxy-client "/CN=front-proxy-client" clientAuth "" front-proxy-ca

  # Client identities. Kubernetes' default RBAC policy already binds each of these user names.
  make_cert admin "/O=system:masters/CN=admin" clientAuth
  make_cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  make_cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
  make_cert kube-proxy "/CN=system:kube-proxy" clientAuth
  make_kubeconfig "$dir/admin.kubeconfig" admin admin
  make_kubeconfig "$dir/kube-controller-manager.kubeconfig" kube-controller-manager system:kube-controller-manager
  make_kubeconfig "$dir/kube-scheduler.kubeconfig" kube-scheduler system:kube-scheduler
  make_kubeconfig "$dir/kube-proxy.kubeconfig" kube-proxy system:kube-proxy

  # The Node authorizer and the NodeRestriction admission know a kubelet by this name and group.
  local node
  for node in $NODES; do
    make_cert "kubelet-$node" "/O=system:nodes/CN=system:node:$node" clientAuth
    make_kubeconfig "$dir/$node.kubeconfig" "kubelet-$node" "system:node:$node"
  done
}

# --- Components ---------------------------------------------------------------------------------

# etcd speaks plain HTTP: it listens on the loopback interface only, and only the API server talks
# to it.
start_etcd() {
  step="starting etcd"
  start etcd \
    --name=control-plane \
    --data-dir="$dir/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="control-plane=http://127.0.0.1:$ETCD_PEER_PORT"
  step="waiting for etcd"
  wait_ready etcd "healthy /health" etcd_healthy
}

etcd_healthy() {
  curl -fsS --max-time 5 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'
}

# The `kubernetes` Service: the API server makes it (ClusterIP 10.96.0.1, port 443)
# but, with --endpoint-reconciler-type=none, gives it no endpoints. Its endpoint would be the
# advertised address, and an Endpoints address may not be a loopback one (the default reconciler
# even refuses to start with one), while the API server listens on 127.0.0.1 only; an address
# of this machine's network would be one nothing listens on. So pods reach no API server through
# the Service (in-cluster clients, which dial KUBERNETES_SERVICE_HOST=10.96.0.1, fail);
# everything in this cluster that talks to it (kubelets, kube-proxy, controllers, tests) runs on
# this machine and uses https://127.0.0.1:7443.
#
# The API server reaches a kubelet (logs, exec, port-forward) at its Node's InternalIP first: a
# kubelet may not take a loopback node IP, and its Hostname address would be the node name (say
# node-a), which nothing resolves.
start_apiserver() {
  step="starting kube-apiserver"
  start kube-apiserver \
    --bind-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --tls-cert-file="$pki/kube-apiserver.crt" \
    --tls-private-key-file="$pki/kube-apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --kubelet-client-certificate="$pki/kube-apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/kube-apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" \
    --proxy-client-key-file="$pki/front-proxy-client.key" \
    --allow-privileged=true
  step="waiting for kube-apiserver"
  wait_ready kube-apiserver "ready /readyz" apiserver_ready
}

apiserver_ready() {
  curl -fsS --max-time 5 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "$server/readyz" | grep -qx ok
}

# All default controllers ('*': among them the disruption controller; the service-account token
# controller runs because a signing key is given), each with a service account of its own.
# --leader-elect=false: there is one instance, and a restart need not wait for an old lease.
start_controller_manager() {
  step="starting kube-controller-manager"
  start kube-controller-manager \
    --bind-address=127.0.0.1 \
    --secure-port="$CONTROLLER_MANAGER_PORT" \
    --tls-cert-file="$pki/kube-controller-manager-serving.crt" \
    --tls-private-key-file="$pki/kube-controller-manager-serving.key" \
    --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --leader-elect=false \
    --controllers='*' \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" \
    --cluster-signing-key-file="$pki/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=true \
    --cluster-cidr="$CLUSTER_CIDR" \
    --node-cidr-mask-size="$NODE_CIDR_MASK_SIZE"
}

# The scheduler takes its client settings from a configuration file (its --kubeconfig and
# --leader-elect flags are deprecated); serving is still set by flags.
start_scheduler() {
  step="writing $dir/kube-scheduler.yaml"
  cat >"$dir/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $dir/kube-scheduler.kubeconfig
leaderElection:
  leaderElect: false
EOF
  step="starting kube-scheduler"
  start kube-scheduler \
    --config="$dir/kube-scheduler.yaml" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --tls-cert-file="$pki/kube-scheduler-serving.crt" \
    --tls-private-key-file="$pki/kube-scheduler-serving.key" \
    --authentication-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-scheduler.kubeconfig"
}

# PORT: the controller's /healthz, over TLS verified against the CA.
controller_healthy() {
  curl -fsS --max-time 5 --cacert "$pki/ca.crt" "https://127.0.0.1:$1/healthz" | grep -qx ok
}

# The serviceaccount controller (in kube-controller-manager) makes it; pods need it.
default_service_account_exists() {
  "$bin/kubectl" --kubeconfig="$dir/admin.kubeconfig" --request-timeout=5s \
    get serviceaccount default --namespace=default
}

# --- Actions ------------------------------------------------------------------------------------

up() {
  check_prerequisites
  step="making $dir"
  mkdir -p "$dir"
  make_pki
  start_etcd
  start_apiserver
  start_controller_manager
  start_scheduler
  step="waiting for kube-controller-manager and kube-scheduler"
  wait_ready kube-controller-manager "healthy /healthz" controller_healthy "$CONTROLLER_MANAGER_PORT"
  wait_ready kube-scheduler "healthy /healthz" controller_healthy "$SCHEDULER_PORT"
  step="waiting for the default ServiceAccount in namespace default"
  wait_ready kube-controller-manager "ServiceAccount default/default" default_service_account_exists
  say "up; nodes join with $dir/NODE.kubeconfig for NODE in: $NODES"
  echo "$dir/admin.kubeconfig"
}

down() {
  step="stopping the control plane in $dir"
  if [ ! -d "$dir" ]; then
    say "no $dir: nothing to stop"
    return 0
  fi
  stop_all
}

env_exports() {
  step="printing the environment for $dir"
  [ -f "$dir/admin.kubeconfig" ] || say "warning: no $dir/admin.kubeconfig yet (run up first)"
  printf 'export KUBECONFIG=%q\n' "$dir/admin.kubeconfig"
  printf 'export KUBECTL=%q\n' "$bin/kubectl"
}

case "$action" in
  up) up ;;
  down) down ;;
  env) env_exports ;;
  *) usage ;;
esac
