# shellcheck shell=bash
# Helpers sourced by the scripts in scripts/cluster (not run on its own).
# Every message goes to stderr with the script's name and the seconds since it started, so
# a long one-time step (Debian packages, the Kubernetes build) shows where it is.

K8S_VERSION=${K8S_VERSION:-1.34.4}
# the cache of built Kubernetes binaries: one directory per version holding exactly
# kube-apiserver, kubelet, kube-controller-manager and kube-scheduler
K8S_BIN=${K8S_BIN:-$HOME/.cache/gmp-k8s/v$K8S_VERSION}
K8S_CMDS="kube-apiserver kubelet kube-controller-manager kube-scheduler"
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

_T0=$(date +%s)
_NAME=$(basename "$0" .sh)
say() { echo "cluster/$_NAME [$(($(date +%s) - _T0)) s]: $*" >&2; }

# k8s_built DIR: true when DIR holds the four binaries (the only test of a warm cache)
k8s_built() {
  local c
  for c in $K8S_CMDS; do [ -x "$1/$c" ] || return 1; done
}

# heartbeat LABEL CMD...: run CMD, printing "LABEL: still running, N s" every
# ${HEARTBEAT_S:-30} s so a silent minutes-long step (go build, apt-get) is not mistaken
# for a hang. Returns CMD's exit status.
heartbeat() {
  local label=$1 start pid rc=0 n=0
  shift
  start=$(date +%s)
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if [ $((n % ${HEARTBEAT_S:-30})) = 0 ] && kill -0 "$pid" 2>/dev/null; then
      say "$label: still running, $(($(date +%s) - start)) s"
    fi
  done
  wait "$pid" || rc=$?
  return "$rc"
}
