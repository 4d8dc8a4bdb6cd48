#!/usr/bin/env bash
# Set up a checkout: a virtualenv in .venv with gmpanalysis (editable) and its dev tools,
# and the Go modules of the collectors. Idempotent; safe to run on a fresh machine. Says what
# it does: a fresh machine downloads ~200 MB of Python wheels (1-3 min), later runs take
# seconds (the install is skipped while pyproject.toml is unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
PY=${PYTHON:-python3}
SECONDS=0
say() { echo "setup: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
  say "creating the virtualenv .venv"
  if ! "$PY" -m venv .venv >/dev/null 2>&1; then
    # Debian splits venv out of the interpreter package
    rm -rf .venv
    if [ "$(id -u)" = 0 ]; then
      say "installing python3-venv (Debian splits venv out of the interpreter)"
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    else
      echo "setup: '$PY -m venv' failed; install python3-venv (Debian/Ubuntu) and re-run" >&2
      exit 1
    fi
    "$PY" -m venv .venv
  fi
fi
extras="dev,notebooks,kube,fast,fleet,docs${GMP_EXTRAS:+,$GMP_EXTRAS}"
# the install is redone only when what it depends on changes: the project's metadata, the
# extras asked for, the interpreter
stamp=".venv/.gmp-setup-$(cat pyproject.toml <(echo "$extras") <(.venv/bin/python -V) | sha256sum | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  say "installing gmpanalysis[$extras] into .venv (editable; the first time downloads numpy, pandas," \
      "matplotlib, jupyterlab and the test tools: 1-3 min)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --progress-bar off -e ".[$extras]"
  rm -f .venv/.gmp-setup-*
  touch "$stamp"
fi

if command -v go >/dev/null 2>&1; then
  say "fetching the collectors' Go modules (cached in $(go env GOMODCACHE))"
  (cd collectors && go mod download)
else
  echo "setup: no Go toolchain (go on PATH or /usr/local/go): the lab and the collectors need Go >= 1.26 (collectors/go.mod);" \
       "analysis of existing bundles works without it" >&2
fi
say "ready in ${SECONDS} s"
