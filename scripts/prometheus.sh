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

if [ -n "${PROMETHEUS:-}" ]; then
  "$PROMETHEUS" --version >/dev/null 2>&1 || { say "PROMETHEUS=$PROMETHEUS does not run"; exit 1; }
  echo "$PROMETHEUS"
  exit 0
fi
minor=${PROM_MODULE_VERSION#v0.}
release=3.$((${minor%%.*} - 300)).${minor#*.}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/gmpanalysis/prometheus/$PROM_MODULE_VERSION
bin=$dir/prometheus
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "version $release"; then
  echo "$bin"
  exit 0
fi
export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null 2>&1; then
  say "no Go toolchain (go on PATH or /usr/local/go): Prometheus is built from the Go module proxy"
  exit 1
fi
say "building Prometheus $release ($PROM_MODULE_VERSION) from the Go module proxy into $dir (once; several minutes)"
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# a static binary stamped as Prometheus's own build stamps it (its --version); GOFLAGS
# from the environment would apply to Prometheus's module
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
ld="-s -w -X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=release"
GOBIN=$tmp go install -trimpath -ldflags "$ld" "github.com/prometheus/prometheus/cmd/prometheus@$PROM_MODULE_VERSION" >&2
mv "$tmp/prometheus" "$bin"
"$bin" --version >&2
echo "$bin"
