#!/usr/bin/env bash
# The case published write-ups call dramatic, as far as 2 CPUs allow: a 250m limit, 100
# clients in a closed loop, an allocation-heavy handler (4 MiB of garbage per request, a
# 64 MiB live pointer-rich heap), GOMAXPROCS 1 / 2 / 4 / 8, each with an execution trace
# of most of the run. Two handlers: "heavy" (10 ms of CPU work per request) and "light"
# (1 ms: the garbage and the GC dominate). Without the per-request CPU header: a handler
# holding its OS thread would turn every preemption and stop-the-world into a thread
# hand-off, with 100 of them in flight.
#
#   bash benchmarks/make-dramatic.sh [OUT_DIR]
#
# Bundles go to OUT_DIR (default benchmarks/data/dramatic, not committed): 8 runs, about
# 3 minutes. Root, cgroup quotas: run it on a quiet machine. Then
#   .venv/bin/python benchmarks/gc_in_quota.py OUT_DIR/*
# says where the quota went, per period, GC against the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/data/dramatic}
gmp=.venv/bin/gmpanalysis
mkdir -p "$out"
for h in heavy light; do
  ms=10
  [ "$h" = light ] && ms=1
  for g in 1 2 4 8; do
    name="$h-250m-gmp$g"
    [ -e "$out/$name/meta.json" ] && continue  # done before: resumes
    rm -rf "$out/$name"
    echo "== $name"
    "$gmp" lab run --name "$name" --workload alloc --work-ms "$ms" --alloc-kb 4096 --live-mb 64 \
      --cpu-limit 250m --gomaxprocs "$g" --mode closed --concurrency 100 --duration 10 \
      --trace-start 1 --trace-seconds 8 --no-cpu-header -o "$out/$name" > "$out/$name.log" 2>&1 || echo "   failed: see $out/$name.log"
  done
done
