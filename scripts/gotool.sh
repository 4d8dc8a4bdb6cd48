# Sourced by helm.sh, krew.sh and prometheus.sh: a Go tool built once from the Go module
# proxy into ${XDG_CACHE_HOME:-~/.cache}/gmpanalysis/NAME/VERSION/NAME and reused while it
# reports its version. The caller defines two functions: `version_of BIN` (the version BIN
# reports; fails where it does not run) and `ldflags` (the build's -ldflags, stamped as the
# tool's own release build stamps it; go is on PATH when it is called).
#
#   go_tool NAME VERSION WANT OVERRIDE PACKAGE@VERSION HOW_LONG
# prints the binary's path: $OVERRIDE's (the variable's name) where that is set and runs,
# else the cached build whose version_of is WANT, else a new build (HOW_LONG: in words).
go_tool() {
  local name=$1 version=$2 want=$3 override=$4 pkg=$5 how_long=$6
  local given=${!override:-}
  if [ -n "$given" ]; then
    version_of "$given" >/dev/null || { say "$override=$given does not run"; exit 1; }
    echo "$given"
    return
  fi
  local dir=${XDG_CACHE_HOME:-$HOME/.cache}/gmpanalysis/$name/$version
  local bin=$dir/$name
  if [ -x "$bin" ] && [ "$(version_of "$bin" 2>/dev/null)" = "$want" ]; then
    echo "$bin"
    return
  fi
  export PATH="$PATH:/usr/local/go/bin"
  if ! command -v go >/dev/null 2>&1; then
    say "no Go toolchain (go on PATH or /usr/local/go): $name is built from the Go module proxy"
    exit 1
  fi
  say "building $name $want from the Go module proxy into $dir (once; $how_long)"
  mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # a static binary; GOFLAGS from the environment would apply to the tool's module
  export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
  local ld
  ld=$(ldflags)
  GOBIN=$tmp go install -trimpath -ldflags "$ld" "$pkg" >&2
  mv "$tmp/$name" "$bin"
  [ "$(version_of "$bin")" = "$want" ] || { say "$bin does not report version $want"; exit 1; }
  say "$name $want built"
  echo "$bin"
}
