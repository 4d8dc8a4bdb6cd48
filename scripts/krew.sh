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
. "$(dirname "$0")/gotool.sh"

# krew's GitTag line of `krew version`. Every krew command first creates its directories
# under KREW_ROOT (default ~/.krew): a throwaway one, and no upgrade check (a GitHub request)
version_of() {
  local root rc=0 out
  root=$(mktemp -d)
  out=$(KREW_ROOT=$root KREW_NO_UPGRADE_CHECK=1 "$1" version 2>/dev/null </dev/null) || rc=$?
  rm -rf "$root"
  [ "$rc" = 0 ] || return "$rc"
  awk '$1 == "GitTag" {print $2}' <<<"$out"
}
# stamped with its release tag as krew's hack/make-binaries.sh stamps it (gitCommit stays
# "unknown": the module proxy has no commit)
ldflags() { echo "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$KREW_VERSION"; }
go_tool krew "$KREW_VERSION" "$KREW_VERSION" KREW "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION" "about 20 s on 2 cores"
