#!/usr/bin/env bash
# Start a real one-node Kubernetes on this machine: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd + runc and the kubelet, every one
# listening on 127.0.0.1 only, the kubelet on cgroup v1 with the cgroupfs driver, so pods
# get real CFS quotas from limits.cpu under /sys/fs/cgroup/cpu/kubepods.
#
# usage: scripts/cluster/up.sh BASE [BINDIR]
#   BASE    a directory for everything the node writes (state, logs, PIDs, certificates);
#           the client credentials end up in BASE/admin.kubeconfig
#   BINDIR  the four Kubernetes binaries (default $K8S_BIN, ~/.cache/gmp-k8s/v1.34.4);
#           built first by build-k8s.sh when absent (~10 min once)
# env: APISERVER_PORT=16443 ETCD_PORT=12379 (+1, +2) KCM_PORT=10257 SCHED_PORT=10259
#      KUBELET_PORT=10250 KUBELET_HEALTHZ_PORT=10248 NODE_NAME=$(hostname) PYTHON=python3
# Always tear down with scripts/cluster/down.sh BASE, also after a failed start. ~15-25 s
# to a Ready node when built. Needs root and the cgroup v1 cpu controller.
#
# What the node cannot do (see docs/kubernetes.md): no pod network (the only CNI plugin is loopback, so
# pods use hostNetwork), no registry (images are imported with mkimage.py + ctr), no
# in-cluster API access from pods (the service IP range is not routed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$HERE/common.sh"
BASE=$(realpath -m "${1:?usage: up.sh BASE [BINDIR]}")
BIN=${2:-$K8S_BIN}
PY=${PYTHON:-python3}
APORT=${APISERVER_PORT:-16443}
EPORT=${ETCD_PORT:-12379}
KUBELET_PORT=${KUBELET_PORT:-10250}

[ "$(id -u)" = 0 ] || { say "ERROR: the kubelet and containerd need root"; exit 1; }
[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || {
  say "ERROR: no cgroup v1 cpu controller at /sys/fs/cgroup/cpu (this node runs the kubelet on cgroup v1)"
  exit 1
}
bash "$HERE/packages.sh"
bash "$HERE/build-k8s.sh" "$BIN"
BIN=$(realpath "$BIN")
# a port already taken means another node (or anything else) is up: refuse, do not share
for p in "$APORT" "$EPORT" "$((EPORT + 1))" "$KUBELET_PORT" "${KCM_PORT:-10257}" "${SCHED_PORT:-10259}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    say "ERROR: 127.0.0.1:$p is in use (another local node? stop it with scripts/cluster/down.sh ITS_BASE)"
    exit 1
  fi
done

mkdir -p "$BASE"/{pki,pids,logs,etcd,kubelet,pod-logs,cni,containerd,images,manifests}
cd "$BASE"
say "starting a one-node Kubernetes v$K8S_VERSION under $BASE"

# start NAME CMD...: in the background, output to logs/NAME.log, PID to pids/NAME.pid
# (down.sh stops exactly these PIDs)
start() {
  local name=$1
  shift
  nohup "$@" >"logs/$name.log" 2>&1 &
  echo $! >"pids/$name.pid"
}
# wait_until WHAT LOG CMD...: retry CMD for up to $WAIT_S s (default 120); on timeout show
# the end of the component's log, which says why
wait_until() {
  local what=$1 log=$2 i
  shift 2
  for ((i = 0; i < ${WAIT_S:-120}; i++)); do
    if "$@" >/dev/null 2>&1; then
      say "$what: ok"
      return 0
    fi
    sleep 1
  done
  say "ERROR: timed out waiting for $what; the end of $BASE/logs/$log.log:"
  tail -n 20 "logs/$log.log" >&2 || true
  return 1
}

# --- certificates: a CA, the API server's serving certificate (valid for 127.0.0.1), and
# the key that signs ServiceAccount tokens. Clients authenticate with static tokens.
if [ ! -f pki/ca.crt ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=gmp-local-ca \
    -keyout pki/ca.key -out pki/ca.crt 2>/dev/null
  printf '%s\n' '[req]' 'distinguished_name=dn' '[dn]' '[san]' \
    'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc' >pki/openssl.cnf
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout pki/apiserver.key -out pki/apiserver.csr 2>/dev/null
  openssl x509 -req -days 30 -in pki/apiserver.csr -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial \
    -extfile pki/openssl.cnf -extensions san -out pki/apiserver.crt 2>/dev/null
  openssl genrsa -out pki/sa.key 2048 2>/dev/null
  openssl rsa -in pki/sa.key -pubout -out pki/sa.pub 2>/dev/null
fi
NODE=${NODE_NAME:-$(hostname)}
# The API server reaches the kubelet (exec, port-forward, logs) at the node's Hostname
# address: that name must resolve to loopback, or that traffic would leave the machine.
node_ip=$(getent ahostsv4 "$NODE" | awk 'NR == 1 {print $1}')
case "$node_ip" in
  127.*) ;;
  *) say "WARNING: node name $NODE resolves to '${node_ip:-nothing}', not 127.x: exec and port-forward may fail; set NODE_NAME=localhost" ;;
esac
# who is who: the admin is in system:masters; the kubelet's user name must be
# system:node:<node> for the Node authorizer to let it manage its own node and pods
cat >pki/tokens.csv <<EOF_TOKENS
admin-token,admin,admin,"system:masters"
kubelet-token,system:node:$NODE,system:node:$NODE,"system:nodes"
kcm-token,system:kube-controller-manager,system:kube-controller-manager
sched-token,system:kube-scheduler,system:kube-scheduler
EOF_TOKENS
ca_data=$(base64 -w0 pki/ca.crt)
for who in admin kubelet kcm sched; do
  cat >"$who.kubeconfig" <<EOF_KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$APORT", certificate-authority-data: $ca_data}}]
users: [{name: $who, user: {token: $who-token}}]
contexts: [{name: local, context: {cluster: local, user: $who}}]
current-context: local
EOF_KC
done

# --- etcd: client, peer and metrics ports on loopback
say "etcd on 127.0.0.1:$EPORT"
start etcd etcd --name local --data-dir "$BASE/etcd" \
  --listen-client-urls "http://127.0.0.1:$EPORT" --advertise-client-urls "http://127.0.0.1:$EPORT" \
  --listen-peer-urls "http://127.0.0.1:$((EPORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
  --initial-cluster "local=http://127.0.0.1:$((EPORT + 1))" --listen-metrics-urls "http://127.0.0.1:$((EPORT + 2))"
wait_until etcd etcd curl -sf "http://127.0.0.1:$EPORT/health"

# --- kube-apiserver. --endpoint-reconciler-type=none: the "kubernetes" Service gets no
# endpoints (pods cannot reach it anyway); --kubelet-preferred-address-types=Hostname: reach
# the kubelet by the node name, which resolves to loopback (checked above).
say "kube-apiserver on 127.0.0.1:$APORT"
start apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$EPORT" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APORT" \
  --tls-cert-file=pki/apiserver.crt --tls-private-key-file=pki/apiserver.key --client-ca-file=pki/ca.crt \
  --token-auth-file=pki/tokens.csv --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file=pki/sa.pub --service-account-signing-key-file=pki/sa.key \
  --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true --endpoint-reconciler-type=none \
  --kubelet-preferred-address-types=Hostname --cert-dir="$BASE/pki/apiserver-auto" --profiling=false --v=1
wait_until kube-apiserver apiserver curl -sfk -H "Authorization: Bearer admin-token" "https://127.0.0.1:$APORT/readyz"

# --- controller-manager (creates the default ServiceAccount, lifts the node's
# not-ready taint, garbage-collects, runs Deployments and DaemonSets) and scheduler. The
# controllers that need a cloud or a pod network are off.
say "kube-controller-manager and kube-scheduler"
start kcm "$BIN/kube-controller-manager" --kubeconfig=kcm.kubeconfig --bind-address=127.0.0.1 \
  --secure-port="${KCM_PORT:-10257}" --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file=pki/sa.key --root-ca-file=pki/ca.crt \
  --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' --v=1
start sched "$BIN/kube-scheduler" --kubeconfig=sched.kubeconfig --authentication-kubeconfig=sched.kubeconfig \
  --authorization-kubeconfig=sched.kubeconfig --bind-address=127.0.0.1 --secure-port="${SCHED_PORT:-10259}" \
  --leader-elect=false --v=1

# --- containerd with its own socket, root and state under BASE (the Debian service, if any,
# is left alone). The kubelet reports the node NotReady until a CNI config exists: a
# loopback-only one is enough for hostNetwork pods.
say "containerd (socket $BASE/containerd/containerd.sock)"
echo '{"cniVersion": "0.4.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}' >cni/10-loopback.conflist
cat >containerd.toml <<EOF_CTD
version = 2
root = "$BASE/containerd/root"
state = "$BASE/containerd/state"
[grpc]
  address = "$BASE/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  # the sandbox image is built here and imported below: never pulled
  sandbox_image = "registry.k8s.io/pause:3.10"
  # root on this kind of VM lacks CAP_SYS_RESOURCE, so runc cannot LOWER a process's
  # oom_score_adj (the kubelet asks -998 for the sandbox): keep it at least the parent's
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # cgroupfs, as the kubelet's cgroupDriver: both must agree on the cgroup paths
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$BASE/cni"
EOF_CTD
start containerd containerd -c containerd.toml
SOCK=$BASE/containerd/containerd.sock
wait_until containerd containerd ctr -a "$SOCK" version
# the pause image: a static binary, one file, imported into the CRI's namespace (k8s.io)
[ -x images/pause ] || gcc -Os -static -o images/pause "$HERE/pause.c"
"$PY" "$HERE/mkimage.py" images/pause.tar registry.k8s.io/pause:3.10 /pause images/pause:/pause >/dev/null
ctr -a "$SOCK" -n k8s.io images import images/pause.tar >/dev/null

# --- kubelet. At start it sets vm.overcommit_memory=1, kernel.panic=10 and
# kernel.panic_on_oops=1 (its "protect kernel defaults" tuning): remember the values so
# down.sh can put them back.
for k in vm/overcommit_memory kernel/panic kernel/panic_on_oops; do
  echo "$k $(cat "/proc/sys/$k")"
done >sysctl-before.txt
# failCgroupV1: false - v1.34 still runs on cgroup v1 when told to (v1.35 refuses).
# Eviction and image GC off: a test node must not evict the pods under test when the disk
# fills up, nor delete the imported images (they cannot be pulled back).
cat >kubelet-config.yaml <<EOF_KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT:-10248}
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$SOCK
failSwapOn: false
podLogsDirectory: $BASE/pod-logs
resolvConf: ""
maxPods: 30
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
localStorageCapacityIsolation: false
# static pods (a test writes one): the kubelet runs them under a UID of its own
staticPodPath: $BASE/manifests
EOF_KL
say "kubelet (node $NODE, cgroupfs on cgroup v1)"
start kubelet "$BIN/kubelet" --config=kubelet-config.yaml --kubeconfig=kubelet.kubeconfig \
  --root-dir="$BASE/kubelet" --cert-dir="$BASE/kubelet/pki" --hostname-override="$NODE" --v=1

api_get() { curl -sfk -H "Authorization: Bearer admin-token" "https://127.0.0.1:$APORT$1"; }
# Ready, and the controller-manager has removed the not-ready taint (until then the
# scheduler places nothing there)
node_ready() {
  api_get "/api/v1/nodes/$NODE" | "$PY" -c '
import json, sys
n = json.load(sys.stdin)
ready = [c["status"] for c in n["status"].get("conditions", []) if c["type"] == "Ready"]
sys.exit(0 if ready == ["True"] and not n["spec"].get("taints") else 1)'
}
wait_until "node $NODE Ready and untainted" kubelet node_ready
# pods cannot be created in a namespace before its default ServiceAccount exists
wait_until "the default ServiceAccount" kcm api_get /api/v1/namespaces/default/serviceaccounts/default
say "cluster up in $(($(date +%s) - _T0)) s: KUBECONFIG=$BASE/admin.kubeconfig node=$NODE containerd=$SOCK"
