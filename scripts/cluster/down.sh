#!/usr/bin/env bash
# Stop the node that scripts/cluster/up.sh BASE started and leave the machine as it was:
#   - the components, by the PIDs in BASE/pids (kubelet first, so it does not restart the
#     containers being stopped; etcd last), SIGTERM then SIGKILL after 10 s;
#   - the containers: killed and deleted through this node's containerd, then the
#     containerd-shim processes it started (they outlive containerd by design);
#   - every mount under BASE (container root filesystems, /dev/shm of sandboxes, the
#     kubelet's bind mounts), deepest first;
#   - the cgroups the kubelet made (kubepods under each v1 hierarchy), leaves first: a
#     cgroup can only be removed once it is empty;
#   - the three sysctls the kubelet rewrites, restored from BASE/sysctl-before.txt.
# usage: scripts/cluster/down.sh BASE     (safe to run twice, or after a failed up.sh)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$HERE/common.sh"
BASE=$(realpath -m "${1:?usage: down.sh BASE}")
[ -d "$BASE" ] || exit 0
cd "$BASE"
say "stopping the node under $BASE"
SOCK=$BASE/containerd/containerd.sock

# stop NAME: the process whose PID up.sh wrote to pids/NAME.pid
stop() {
  local f=pids/$1.pid pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for ((i = 0; i < 20; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop kubelet
stop sched
stop kcm
if [ -S "$SOCK" ] && ctr -a "$SOCK" version >/dev/null 2>&1; then
  ctrk() { ctr -a "$SOCK" -n k8s.io "$@"; }
  for t in $(ctrk tasks ls -q 2>/dev/null); do ctrk tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
  sleep 1
  for t in $(ctrk tasks ls -q 2>/dev/null); do ctrk tasks delete -f "$t" >/dev/null 2>&1 || true; done
  for c in $(ctrk containers ls -q 2>/dev/null); do ctrk containers rm "$c" >/dev/null 2>&1 || true; done
fi
stop containerd
# shims of THIS containerd: their command line names its socket, which lives under BASE
for pid in $(pgrep -f -- "containerd-shim-runc-v2 .*-address $SOCK" || true); do
  kill -9 "$pid" 2>/dev/null || true
done
stop apiserver
stop etcd

# mounts under BASE, deepest first; lazily, so a still-busy one detaches anyway
awk -v base="$BASE/" 'index($5, base) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
  umount -l "$m" 2>/dev/null || true
done
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
  if [ -d "$c" ]; then find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
done
if [ -f sysctl-before.txt ]; then
  while read -r key value; do
    echo "$value" >"/proc/sys/$key" || say "could not restore $key=$value"
  done <sysctl-before.txt
fi
# (find fails on a missing directory: count what there is, and no more)
left_pids=$({ find pids -name '*.pid' 2>/dev/null || true; } | wc -l)
left_mounts=$(awk -v base="$BASE/" 'index($5, base) == 1' /proc/self/mountinfo | wc -l)
left_cgroups=$({ find /sys/fs/cgroup/*/kubepods -type d 2>/dev/null || true; } | wc -l)
say "down: $left_pids PID files, $left_mounts mounts, $left_cgroups kubepods cgroups left"
