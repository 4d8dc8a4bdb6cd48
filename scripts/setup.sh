#!/usr/bin/env bash
# Set up a checkout: a virtualenv in .venv with gmpanalysis (editable) and its dev tools,
# and the Go modules of the collectors. Idempotent; safe to run on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv >/dev/null 2>&1; then
    # Debian splits venv out of the interpreter package
    rm -rf .venv
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    else
      echo "setup: '$PY -m venv' failed; install python3-venv (Debian/Ubuntu) and re-run" >&2
      exit 1
    fi
    "$PY" -m venv .venv
  fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev,notebooks,kube${GMP_EXTRAS:+,$GMP_EXTRAS}]"

if command -v go >/dev/null 2>&1; then
  (cd collectors && go mod download)
else
  echo "setup: no Go toolchain (go on PATH or /usr/local/go): the lab and the collectors need Go >= 1.26 (collectors/go.mod);" \
       "analysis of existing bundles works without it" >&2
fi
