#!/usr/bin/env bash
# Set up, then run the main job: an HTML report of the shipped fixture runs (or of the
# bundle directories given as arguments), written to report.html, plus the summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/gmpanalysis summary "$@"
.venv/bin/gmpanalysis report "$@" -o report.html
echo "open report.html in a browser"
