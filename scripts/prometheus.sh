#!/usr/bin/env bash
# Print the path of a Prometheus server binary, building it once from the Go module proxy
# into the cache (${XDG_CACHE_HOME:-~/.cache}/gmpanalysis/prometheus/VERSION/prometheus;
# Debian 12's package is 2.42, older than the dashboards assume). The kube metrics test runs
# it against the node agent. The first build compiles Prometheus and its service-discovery
# dependencies: several minutes on 2 cores, then it is reused. Without the web UI's assets
# (a Node build) the server, its scraping and its HTTP API work as released; the UI pages
# do not. PROMETHEUS=/path/to/prometheus uses that binary instead (v2.x or v3.x).
#
#   prom=$(bash scripts/prometheus.sh) && "$prom" --version
set -euo pipefail
# the module's version v0.MINOR.PATCH is Prometheus 3.(MINOR-300).PATCH
PROM_MODULE_VERSION=${PROM_MODULE_VERSION:-v0.316.0}
say() { echo "prometheus.sh: $*" >&2; }
. "$(dirname "$0")/gotool.sh"

minor=${PROM_MODULE_VERSION#v0.}
release=3.$((${minor%%.*} - 300)).${minor#*.}
# "prometheus, version 3.16.0 (branch: ...": the version word of the first line
version_of() { "$1" --version 2>/dev/null | awk 'NR == 1 {print $3}'; }
# stamped as Prometheus's own build stamps it (its --version)
ldflags() {
  echo "-s -w -X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=release"
}
go_tool prometheus "$PROM_MODULE_VERSION" "$release" PROMETHEUS \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROM_MODULE_VERSION" "several minutes"
