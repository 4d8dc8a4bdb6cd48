#!/usr/bin/env bash
# Print the path of a helm binary, building it once from the Go module proxy into the cache
# (${XDG_CACHE_HOME:-~/.cache}/gmpanalysis/helm/VERSION/helm; Debian 12 has no helm package).
# The first build compiles helm and its dependencies: 3-6 min on 2 cores, then it is reused.
# HELM=/path/to/helm uses that binary instead (it must be helm v3).
#
#   helm=$(bash scripts/helm.sh) && "$helm" lint charts/gmpanalysis
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.22.0}
say() { echo "helm.sh: $*" >&2; }
. "$(dirname "$0")/gotool.sh"

version_of() { "$1" version --short; }
# stamped as helm's own Makefile stamps it: its version, and the Kubernetes version of its
# client modules (what `helm template` and `helm lint` assume of a cluster; unstamped 1.20)
ldflags() {
  local gomod k8s_minor ld pkg
  gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  k8s_minor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
  [ -n "$k8s_minor" ] || { say "no k8s.io/client-go in $gomod"; exit 1; }
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ld="$ld -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
  done
  echo "$ld"
}
go_tool helm "$HELM_VERSION" "$HELM_VERSION" HELM "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "3-6 min on 2 cores"
