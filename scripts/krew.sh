#!/usr/bin/env bash
# Print the path of a krew binary (the kubectl plugin manager), building it once from the Go
# module proxy into the cache (${XDG_CACHE_HOME:-~/.cache}/gmpanalysis/krew/VERSION/krew).
# tests/test_kubectl_plugin.py installs plugins/gmp.yaml with it, offline. The first build
# compiles krew and its dependencies: about 20 s on 2 cores, then it is reused.
# KREW=/path/to/krew uses that binary instead (krew v0.4: --manifest and --archive).
#
#   krew=$(bash scripts/krew.sh) && KREW_ROOT=$(mktemp -d) "$krew" install \
#     --manifest=plugins/gmp.yaml --archive="$(bash plugins/build-krew-archive.sh)"
set -euo pipefail
KREW_VERSION=${KREW_VERSION:-v0.4.3}
say() { echo "krew.sh: $*" >&2; }

# krew's GitTag line of `krew version`. Every krew command first creates its directories
# under KREW_ROOT (default ~/.krew): a throwaway one, and no upgrade check (a GitHub request)
tag() {
  local root rc=0 out
  root=$(mktemp -d)
  out=$(KREW_ROOT=$root KREW_NO_UPGRADE_CHECK=1 "$1" version 2>/dev/null </dev/null) || rc=$?
  rm -rf "$root"
  [ "$rc" = 0 ] || return "$rc"
  awk '$1 == "GitTag" {print $2}' <<<"$out"
}

if [ -n "${KREW:-}" ]; then
  tag "$KREW" >/dev/null || { say "KREW=$KREW does not run"; exit 1; }
  echo "$KREW"
  exit 0
fi
dir=${XDG_CACHE_HOME:-$HOME/.cache}/gmpanalysis/krew/$KREW_VERSION
bin=$dir/krew
if [ -x "$bin" ] && [ "$(tag "$bin" 2>/dev/null)" = "$KREW_VERSION" ]; then
  echo "$bin"
  exit 0
fi
export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null 2>&1; then
  say "no Go toolchain (go on PATH or /usr/local/go): krew is built from the Go module proxy"
  exit 1
fi
say "building krew $KREW_VERSION from the Go module proxy into $dir (once; about 20 s on 2 cores)"
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# a static binary stamped with its release tag as krew's hack/make-binaries.sh stamps it
# (internal/version.gitTag; gitCommit stays "unknown": the module proxy has no commit).
# GOFLAGS from the environment would apply to krew's module.
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
ld="-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$KREW_VERSION"
GOBIN=$tmp go install -trimpath -ldflags "$ld" "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION" >&2
mv "$tmp/krew" "$bin"
[ "$(tag "$bin")" = "$KREW_VERSION" ] || { say "$bin does not report GitTag $KREW_VERSION"; exit 1; }
say "krew $KREW_VERSION built"
echo "$bin"
