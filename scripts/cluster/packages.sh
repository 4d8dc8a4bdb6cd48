#!/usr/bin/env bash
# Install the Debian packages a local one-node Kubernetes needs, when missing:
#   etcd-server                 etcd, the API server's store (Debian 12: 3.4)
#   containerd                  the container runtime the kubelet drives over CRI (and ctr)
#   runc                        the OCI runtime containerd starts containers with
#   containernetworking-plugins the CNI "loopback" plugin: the node's only network plugin
#                               (pods use the host network), without which it is never Ready
#   openssl                     the cluster's CA and serving certificate
#   curl                        health checks of etcd and the API server
#   gcc, libc6-dev              the pause binary (a static C program, see pause.c)
# usage: scripts/cluster/packages.sh     (root; a no-op when everything is there)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$HERE/common.sh"

missing=()
need() { # need PACKAGE PATH-OR-COMMAND
  if [ "${2#/}" != "$2" ]; then
    [ -e "$2" ] || missing+=("$1")
  else
    command -v "$2" >/dev/null 2>&1 || missing+=("$1")
  fi
}
need etcd-server etcd
need containerd containerd
need containerd ctr
need runc runc
need containernetworking-plugins /usr/lib/cni/loopback
need openssl openssl
need curl curl
need gcc gcc
# the static C library (libc.a), which no command stands for
dpkg-query -W -f='${Status}' libc6-dev 2>/dev/null | grep -q "ok installed" || missing+=(libc6-dev)
# (dedup: containerd is named twice when both of its commands are missing)
read -r -a missing <<<"$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"
if [ ${#missing[@]} = 0 ]; then
  say "Debian packages for the local node: all present"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "ERROR: missing ${missing[*]}: install them as root with apt-get (Debian 12)"
  exit 1
fi
say "installing Debian packages for the local node: ${missing[*]} (about a minute)"
say "apt-get update"
heartbeat "apt-get update" apt-get update -qq
say "apt-get install ${missing[*]}"
# the containerd package's own service stays unused: the node runs containerd with its
# own socket and state under the cluster's base directory (up.sh)
export DEBIAN_FRONTEND=noninteractive
heartbeat "apt-get install" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
say "installed ${missing[*]} in $(($(date +%s) - _T0)) s"
