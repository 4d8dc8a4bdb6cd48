#!/usr/bin/env bash
# Build the archive plugins/gmp.yaml points krew at: kubectl-gmp.tar.gz holding the wrapper
# script kubectl-gmp, byte for byte reproducible (sorted, owner 0, mtime 0, gzip without a
# name or time), so its sha256 in gmp.yaml is checked by tests/test_kubectl_plugin.py.
# Prints the archive's path. Upload it as the release asset gmp.yaml's uri names, or install
# from the checkout: kubectl krew install --manifest=plugins/gmp.yaml --archive=OUTDIR/kubectl-gmp.tar.gz
#
#   bash plugins/build-krew-archive.sh [OUTDIR]    (default: dist)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-dist}
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$here/kubectl-gmp" "$stage/kubectl-gmp"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -C "$stage" -cf - kubectl-gmp \
  | gzip -9 -n > "$out/kubectl-gmp.tar.gz"
echo "$(cd "$out" && pwd)/kubectl-gmp.tar.gz"
