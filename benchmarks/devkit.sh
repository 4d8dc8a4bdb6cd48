#!/usr/bin/env bash
# The many-core benchmarks on a lent machine that has Python 3.12 with numpy, pandas, numba,
# pyarrow and matplotlib but no network and no Go (16 cores here): everything else travels in
# .devkit/ (git-ignored, about 25 MB).
#
#   bash benchmarks/devkit.sh pack [SECONDS]   # here, with the network: fills .devkit/
#   bash benchmarks/devkit.sh run [OUT]        # there, from the checkout's root: the benchmarks
#
# pack: the Python wheels the machine lacks (Dask's distributed scheduler and what it needs,
# for CPython 3.12 on x86-64 Linux), the Go peer of the trace benchmark (gmp-tracepeer, built
# static) and a real trace of a busy HTTP server (make_big_trace.py, SECONDS of it, default 12:
# about 16 MB). run: installs the wheels under /tmp/site, then runs, each under its own time
# limit and in this order (what matters most first, since a lease can end mid-way), with its
# output written to OUT (default $OUT, else /tmp/devkit-out) as it goes:
#   machine.txt   the machine (CPUs, kernel, cgroup version, Python, numpy)
#   pools.txt     tests/test_pools.py: no native thread pool left spinning by a read
#   trace.txt     bench_trace.py --full-only --workers 16,8 against the Go peer
#   periods.txt   bench_periods.py (df_periods built cold)
#   fleet.txt     bench_fleet.py 1000 --workers 1,2,4,8,16
#   replay.txt    bench_replay.py --quick
# Not a test: a lent machine's numbers, for docs/benchmarks.md beside this machine's.
set -uo pipefail
cd "$(dirname "$0")/.."
KIT=.devkit
# the packages the lent image lacks (its list: numpy, pandas, numba, llvmlite, pyarrow,
# matplotlib, tqdm, psutil, cloudpickle, fsspec, toolz, pyyaml, click, jinja2, msgpack,
# sortedcontainers, urllib3, packaging, hypothesis, pytest are there)
WHEELS=(dask==2026.8.0 distributed==2026.8.0 partd==1.4.2 locket==1.0.0 tblib==3.2.2 tornado==6.6.1 zict==3.0.0)

pack() {
    local seconds=${1:-12}
    mkdir -p "$KIT/whl" "$KIT/bin"
    local py=.venv/bin/python
    [ -x "$py" ] || { echo "devkit: run bash scripts/setup.sh first" >&2; exit 1; }
    rm -f "$KIT"/whl/*.whl
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$KIT/whl" "${WHEELS[@]}" || exit 1
    "$py" - "$KIT/bin" <<'EOF' || exit 1
import shutil, sys
from gmpanalysis.lab import ensure_binaries
shutil.copy2(ensure_binaries()["gmp-tracepeer"], sys.argv[1])
EOF
    [ -s "$KIT/http-server.trace" ] || "$py" benchmarks/make_big_trace.py "$KIT/http-server.trace" "$seconds" || exit 1
    du -sh "$KIT"
    echo "devkit: packed; on the lent machine: bash benchmarks/devkit.sh run (carry .devkit)"
}

step() {  # NAME SECONDS COMMAND...: run it under its limit, its output to NAME.txt as it goes
    local name=$1 limit=$2
    shift 2
    echo "== $name ($*), at most ${limit}s"
    timeout "$limit" "$@" 2>&1 | tee "$OUTDIR/$name.txt"
    echo "== $name: rc ${PIPESTATUS[0]}"
}

run() {
    OUTDIR=${1:-${OUT:-/tmp/devkit-out}}
    mkdir -p "$OUTDIR"
    [ -d "$KIT/whl" ] || { echo "devkit: no $KIT here: pack it first and carry it" >&2; exit 1; }
    local py=${PYTHON:-python3}
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$KIT"/whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba-cache
    step machine 60 "$py" -c "import sys; sys.path.insert(0, 'benchmarks'); from machine import describe; print(describe())"
    step pools 60 "$py" -m pytest -q -p no:cacheprovider tests/test_pools.py
    # FLEET_N, FLEET_WORKERS, TRACE_WORKERS, ROUNDS: smaller runs (a rehearsal on a small machine)
    step trace 150 "$py" benchmarks/bench_trace.py --full-only --workers "${TRACE_WORKERS:-16,8}" --rounds "${ROUNDS:-3}" \
        --peer "$KIT/bin/gmp-tracepeer" "$KIT/http-server.trace"
    step periods 60 "$py" benchmarks/bench_periods.py
    step fleet 240 "$py" benchmarks/bench_fleet.py "${FLEET_N:-1000}" --workers "${FLEET_WORKERS:-1,2,4,8,16}"
    step replay 60 "$py" benchmarks/bench_replay.py --quick
}

case "${1:-}" in
    pack) shift; pack "$@" ;;
    run) shift; run "$@" ;;
    *) echo "usage: bash benchmarks/devkit.sh pack [SECONDS] | run [OUT]" >&2; exit 2 ;;
esac
