#!/bin/sh
# Run every benchmark program BUILD/bench/* and keep its markdown output in
# bench/results/NAME.md (stdout; stderr goes to bench/results/NAME.log).
# Benchmarks are not tests: they print numbers and never pass or fail.
#   usage: bench/run.sh [BUILD_DIR] [FILTER] [-- ARGS passed to each program]
B=${1:-build}
FILTER=${2:-}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
out=bench/results
mkdir -p "$out"
status=0
for p in "$B"/bench/*; do
  [ -x "$p" ] && [ -f "$p" ] || continue
  name=$(basename "$p")
  case "$name" in *.o|*.d) continue ;; esac
  case "$name" in *"$FILTER"*) ;; *) continue ;; esac
  echo "== $name"
  if nice "$p" "$@" >"$out/$name.md" 2>"$out/$name.log"; then
    cat "$out/$name.md"
  else
    echo "$name failed (status $?); see $out/$name.log"
    status=1
  fi
done
exit $status
