#!/bin/sh
# Run every test: the C programs build/tests/test_* and the scripts
# tests/test_*.sh / tests/test_*.py. Each test prints one line per case,
# "PASS name" or "FAIL name: why" (or "SKIP name: why"); a program that exits
# non-zero without printing a FAIL counts as one failure. Ends with
# "N passed, N failed".
# Each program runs under a time limit (LIND_TEST_TIMEOUT seconds, default
# 600; a hung program is killed and counted as one failure naming the limit
# and its last output line). A C test that crashes in a case reports that
# case as failed itself (tests/check.h).
#   usage: tests/run.sh [BUILD_DIR] [FILTER]
B=${1:-build}
FILTER=${2:-}
LIMIT=${LIND_TEST_TIMEOUT:-600}
export LIND_BUILD="$B"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0; fail=0; skip=0
run_one() {
  name=$1; shift
  case "$name" in *"$FILTER"*) ;; *) return ;; esac
  start=$(date +%s)
  timeout -k 10 "$LIMIT" "$@" >"$out/log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    last=$(grep -v '^ *$' "$out/log" | tail -n 1)
    echo "FAIL $name: timed out after ${LIMIT}s (last output: ${last:-none})" >>"$out/log"
  fi
  p=$(grep -c '^PASS ' "$out/log"); f=$(grep -c '^FAIL ' "$out/log"); s=$(grep -c '^SKIP ' "$out/log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc" >>"$out/log"; f=1
  fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  el=$(( $(date +%s) - start ))
  echo "== $name: $p passed, $f failed, $s skipped (${el}s)"
  if [ "$f" -ne 0 ]; then
    grep -v '^PASS ' "$out/log" | tail -n 40 | sed 's/^/   /'
  else
    grep -E '^(SKIP|NOTE) ' "$out/log" | sed 's/^/   /'
  fi
}
for t in "$B"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.o|*.d) continue ;; esac
  run_one "$(basename "$t")" "$t"
done
for t in tests/test_*.sh; do
  [ -f "$t" ] && run_one "$(basename "$t")" sh "$t"
done
for t in tests/test_*.py; do
  [ -f "$t" ] && run_one "$(basename "$t")" /usr/bin/python3 "$t"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
