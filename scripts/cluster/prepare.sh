#!/usr/bin/env bash
# One-time preparation of this machine for a local one-node Kubernetes (what the kube tests
# and scripts/inpod_lateness.py start): the Debian packages (packages.sh), then Kubernetes
# v1.34.4 built from source into the cache (build-k8s.sh). Cold: about a minute of
# packages and ~10 min of build on 2 cores; afterwards a check of a few seconds.
# usage: scripts/cluster/prepare.sh     (root; env K8S_BIN as in build-k8s.sh)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$HERE/common.sh"
bash "$HERE/packages.sh"
bash "$HERE/build-k8s.sh" "$K8S_BIN"
say "the local Kubernetes node is ready to start (scripts/cluster/up.sh BASE); binaries cached in $K8S_BIN"
