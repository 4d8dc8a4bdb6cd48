#!/usr/bin/env bash
# Build the four Kubernetes server binaries a one-node cluster needs (kube-apiserver,
# kubelet, kube-controller-manager, kube-scheduler) from the k8s.io/kubernetes Go module,
# fetched through the Go module proxy: no git clone, no Docker, no release download.
#
# usage: scripts/cluster/build-k8s.sh [OUTDIR]
#   OUTDIR defaults to $K8S_BIN, else ~/.cache/gmp-k8s/v$K8S_VERSION (K8S_VERSION=1.34.4).
#   K8S_BUILD_JOBS: parallel compile jobs (default: the number of CPUs).
# A no-op when OUTDIR already holds the four binaries. Cold on 2 cores: ~10 min (module
# download ~1 min, then kube-apiserver is the longest link); with warm Go caches ~1 min.
#
# Why v1.34: the v1.35 kubelet refuses to start on cgroup v1, which is what the CFS
# experiments here run on. Progress goes to stderr; the last line says where the binaries are.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$HERE/common.sh"
OUT=${1:-$K8S_BIN}
V=$K8S_VERSION
MINOR=$(echo "$V" | cut -d. -f2)

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if k8s_built "$OUT"; then
  say "Kubernetes v$V already built, cached in $OUT"
  exit 0
fi
command -v go >/dev/null || { say "ERROR: Go is needed (looked in PATH and /usr/local/go/bin)"; exit 1; }
# two builds into the same cache (two test runs) would race on the outputs: take turns
exec 9>"$OUT/.build.lock"
flock 9
if k8s_built "$OUT"; then
  say "Kubernetes v$V was built meanwhile, cached in $OUT"
  exit 0
fi

say "building Kubernetes v$V ($K8S_CMDS) with $(go version | awk '{print $3}') into $OUT"
say "one-time step: ~10 min on 2 cores when the Go caches are cold, ~1 min when warm"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"

# k8s.io/kubernetes' go.mod points every k8s.io/* staging module at ./staging/src/...,
# which the published module zip does not contain; each staging module is published on
# its own as v0.<minor>.<patch>, so a wrapper module replaces them with those tags.
say "fetching the k8s.io/kubernetes v$V module description"
go mod download -json "k8s.io/kubernetes@v$V" >/dev/null
MOD=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$V.mod
{
  echo "module gmpk8sbuild"
  echo "go 1.24.0"
  echo "require k8s.io/kubernetes v$V"
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$MOD" | awk -v v="v0.${V#1.}" '$2 == "=>" {print "\t" $1 " => " $1 " " v}'
  echo ")"
} >go.mod

# resolve the dependency graph and download every module the four commands import
# (a few hundred MB the first time; `go get` would list each module, too many lines)
for c in $K8S_CMDS; do
  say "resolving and downloading the modules of $c"
  heartbeat "downloading modules for $c" go get "k8s.io/kubernetes/cmd/$c@v$V" 2>"$W/get.log" \
    || { cat "$W/get.log" >&2; say "ERROR: go get k8s.io/kubernetes/cmd/$c@v$V failed"; exit 1; }
done

# the version the binaries report (kubectl version, the node's kubeletVersion): the
# module build has no git tree, so stamp it the way the release build does
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
done
i=0
for c in $K8S_CMDS; do
  i=$((i + 1))
  t=$(date +%s)
  note=""
  [ "$i" = 1 ] && note="; it compiles most of the packages the others share"
  say "compiling $c ($i/4$note)"
  # providerless: without the in-tree cloud providers (smaller, faster to build).
  # Written under a temporary name: an interrupted build never leaves a binary that
  # k8s_built would take for a finished one.
  heartbeat "compiling $c" go build -p "${K8S_BUILD_JOBS:-$(nproc)}" -trimpath -tags providerless \
    -ldflags "$LD" -o "$OUT/.$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv -f "$OUT/.$c.tmp" "$OUT/$c"
  say "built $c in $(($(date +%s) - t)) s ($(du -m "$OUT/$c" | cut -f1) MB)"
done
say "Kubernetes v$V built in $(($(date +%s) - _T0)) s, cached in $OUT"
