#!/usr/bin/env bash
# Set up, then run every check: lint, the collectors' Go tests, and pytest (which starts
# real cgroups, the demo app, the sampler and the load generator where root allows, a real
# local Kubernetes node, JupyterLab and Chromium). Each step says what it does; times are
# those of a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "test.sh: $*" >&2; }
bash scripts/setup.sh
export PATH="$PATH:/usr/local/go/bin"

# the report and the notebooks are checked in a real headless browser: Debian's Chromium
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing Debian's chromium for the browser tests (about a minute)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || say "could not install chromium; the browser tests will skip"
fi

# The VM lab tests (tests/test_vm_lab.py, marker vm) boot Debian's 6.1 and 6.12 kernels under
# qemu: Debian's qemu-system-x86 and busybox-static, and the kernel packages fetched once
# into ~/.cache/gmpanalysis/kernels. Where that cannot be done the vm tests skip, saying why.
if [[ "$*" != *"not lab"* ]] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  SECONDS=0
  # (grep reads all of apt-cache's output: with pipefail, grep -q closing the pipe early
  # would fail the test through apt-cache's SIGPIPE)
  if ! command -v qemu-system-x86_64 >/dev/null 2>&1 || ! command -v busybox >/dev/null 2>&1 \
    || ! command -v cpio >/dev/null 2>&1 \
    || ! apt-cache policy linux-image-6.12-amd64 2>/dev/null | grep Candidate >/dev/null; then
    say "installing Debian's qemu-system-x86 and busybox-static for the VM lab (about a minute, once)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 busybox-static cpio >/dev/null) \
      || say "could not install qemu; the vm tests will skip"
  fi
  if command -v qemu-system-x86_64 >/dev/null 2>&1; then
    say "Debian's 6.1 and 6.12 kernels for the VM lab (the first time fetches ~180 MB)"
    .venv/bin/python -m gmpanalysis.lab.kernels 6.1 6.12 || say "fetching the kernels failed; the vm tests will fail"
  fi
  say "VM lab prepared in ${SECONDS} s"
fi

say "ruff (lint and format)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
if command -v go >/dev/null 2>&1; then
  say "collectors: gofmt, go vet, go test -race (the first time compiles the race runtime: 1-2 min)"
  (
    cd collectors
    unformatted=$(gofmt -l .)
    if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
    # demoapp/ and variants/* are modules of their own: ./... stops at their go.mod
    mods=". demoapp variants/go124 variants/automaxprocs"
    for m in $mods; do (cd "$m" && go vet ./...); done
    # the race detector needs cgo, hence a C compiler (Go turns cgo off without one)
    if [ "$(go env CGO_ENABLED)" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null) \
        || echo "test.sh: could not install gcc for go test -race" >&2
    fi
    if [ "$(go env CGO_ENABLED)" = 1 ]; then
      for m in $mods; do (cd "$m" && go test -race ./...); done
    else
      echo "test.sh: no C compiler (cgo off): go test runs WITHOUT -race" >&2
      for m in $mods; do (cd "$m" && go test ./...); done
    fi
  )
  # the chart's Grafana dashboard against Grafana's dashboard schema (grafana-foundation-sdk):
  # a module of its own under tests/, so the collectors do not depend on it
  say "the Grafana dashboard against Grafana's published schema (tests/dashboard)"
  (
    cd tests/dashboard
    unformatted=$(gofmt -l .)
    if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
    go vet ./... && go test ./...
  )
fi
# The Helm chart (charts/gmpanalysis): helm is built once from the Go module proxy into the
# cache (scripts/helm.sh; Debian has no package); tests/test_chart.py renders it
if command -v go >/dev/null 2>&1; then
  say "helm lint of charts/gmpanalysis (the first run builds helm: 3-6 min)"
  helm=$(bash scripts/helm.sh)
  "$helm" lint --strict charts/gmpanalysis
fi
# The kubectl plugin's krew manifest (plugins/gmp.yaml): tests/test_kubectl_plugin.py installs it
# with the real krew, offline; krew is built once from the Go module proxy (scripts/krew.sh)
if command -v go >/dev/null 2>&1; then
  say "krew for the kubectl plugin's install test (the first run builds it: about 20 s)"
  bash scripts/krew.sh >/dev/null
fi
# The kube tests (tests/test_kube_e2e.py) start a real one-node Kubernetes. Where one can
# exist (root and the cgroup v1 cpu controller, the [kube] extra installed, kube tests not
# deselected) prepare it here, where its progress shows: Debian packages, and Kubernetes
# built once from source. If that fails, the run goes on and the kube tests FAIL with its
# error: on a machine that can run them, a skip would hide the missing step.
k8s_cache=${K8S_BIN:-$HOME/.cache/gmp-k8s/v1.34.4}
if [ "$(id -u)" = 0 ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] && [[ "$*" != *"not kube"* ]] \
  && .venv/bin/python -c "import kubernetes" 2>/dev/null; then
  say "preparing the local Kubernetes node for the kube tests (one-time ~10 min build, cached in $k8s_cache)"
  prepare_log=$(mktemp -t gmp-kube-prepare.XXXXXX)
  if K8S_BIN=$k8s_cache bash scripts/cluster/prepare.sh 2>&1 >/dev/null | tee "$prepare_log" >&2; then
    rm -f "$prepare_log"
  else
    say "preparing the local Kubernetes node failed (log: $prepare_log); the kube tests will fail with its error"
    export GMP_KUBE_PREPARE_FAILED=$prepare_log
  fi
  # tests/test_kube_metrics.py scrapes the agent with a real Prometheus, built once from the
  # Go module proxy (scripts/prometheus.sh; if this fails, that test fails with the error)
  say "Prometheus for the kube metrics test (the first run builds it: 3-6 min)"
  bash scripts/prometheus.sh >/dev/null || say "building Prometheus failed; tests/test_kube_metrics.py will fail"
fi
# the full run attacks the readers with the full mutant counts (the fast suite keeps a
# smaller set that still reaches every kind of mutation)
if [[ "$*" != *"not lab"* ]]; then export GMP_FULL_ATTACK=${GMP_FULL_ATTACK:-1}; fi
say "pytest (a warm run takes about 8 min; -n auto -m \"not lab and not kube\" is the fast suite, about a minute)"
exec .venv/bin/python -m pytest "$@"
