#!/usr/bin/env bash
# The what-if validation sweep: every configuration under one seeded arrival schedule.
#
#   bash benchmarks/make-sweep.sh [OUT_DIR] [REPEATS]
#
# Workloads cpu (30 ms of CPU per request) and alloc (the same plus 2 MiB of garbage and a
# 4 MiB live heap), CPU limits 0.3 / 0.5 / 1 / 1.5, GOMAXPROCS 1 / 2 / 4, REPEATS runs each
# (default 3), all with Poisson arrivals at 10 req/s for 8 s from seed 7 (the same requests
# at the same times in every run) and no execution trace (the replay needs the counters and
# the requests; a trace would add its own CPU). Bundles go to OUT_DIR (default
# benchmarks/data/sweep, not committed): 72 runs, about 12 minutes. Root, cgroup quotas:
# run it on a quiet machine. benchmarks/validate_whatif.py reads them. Extra `lab run`
# options come from SWEEP_ARGS (e.g. SWEEP_ARGS=--no-cpu-header: the handlers do not hold
# their threads, so requests.csv has no cpu_ns).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/data/sweep}
repeats=${2:-3}
gmp=.venv/bin/gmpanalysis
mkdir -p "$out"
for r in $(seq 1 "$repeats"); do
  for w in cpu alloc; do
    for lim in 0.3 0.5 1 1.5; do
      for g in 1 2 4; do
        name="$w-${lim}cpu-gmp$g-r$r"
        [ -e "$out/$name/meta.json" ] && continue  # done before: the sweep resumes
        rm -rf "$out/$name"
        extra=()
        if [ "$w" = alloc ]; then extra=(--alloc-kb 2048 --live-mb 4); fi
        echo "== $name"
        "$gmp" lab run --name "$name" --workload "$w" --work-ms 30 "${extra[@]}" \
          --cpu-limit "$lim" --gomaxprocs "$g" --rate 10 --seed 7 --duration 8 \
          --trace-seconds 0 ${SWEEP_ARGS:-} -o "$out/$name" > "$out/$name.log" 2>&1 || echo "   failed: see $out/$name.log"
      done
    done
  done
done
