#!/usr/bin/env bash
# Set up, then run the main job: the summary table and an HTML report of the example runs
# (or of the bundle directories given as arguments), written to report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "run: the summary of ${*:-the example runs} (one column per run)" >&2
.venv/bin/gmpanalysis summary "$@"
echo "run: writing report.html" >&2
.venv/bin/gmpanalysis report "$@" -o report.html
echo "open report.html in a browser"
