#!/usr/bin/env bash
# Set up, then run the main job: per-run totals of the shipped fixture bundles (or of the
# bundle directories given as arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/gmpanalysis summary "$@"
