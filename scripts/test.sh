#!/usr/bin/env bash
# Set up, then run every check: lint, the collectors' Go tests, and pytest (which starts
# real cgroups, the demo app, the sampler and the load generator where root allows).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PATH:/usr/local/go/bin"

# the report is checked in a real headless browser: Debian's Chromium
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "test.sh: could not install chromium; the browser test will skip" >&2
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
if command -v go >/dev/null 2>&1; then
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
fi
exec .venv/bin/python -m pytest "$@"
