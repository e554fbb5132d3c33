#!/bin/sh
# Run every test: the C programs build/tests/test_* and the scripts
# tests/test_*.sh / tests/test_*.py. Each test prints one line per case,
# "PASS name" or "FAIL name: why" (or "SKIP name: why"); a program that exits
# non-zero without printing a FAIL counts as one failure. Ends with
# "N passed, N failed".
#
# Programs are independent (each makes its own temporary directories,
# sockets, HTTP ports (port 0) and PostgreSQL servers), so they run in
# parallel: LIND_TEST_JOBS at a time (default: the number of cores). Each
# program's lines are printed together when it ends, headed
# "== name: N passed, N failed, N skipped (Ns)". The longest programs of
# the last run in this build directory ($B/tests/run-times) start first.
#
# Each program runs under a time limit: LIND_TEST_TIMEOUT seconds (default
# 1200) times LIND_TEST_TIME_SCALE (default 1), the one multiplier every time
# bound of the tests scales with (docs/TESTING.md); a hung program is killed
# and counted as one failure naming the limit and its last output line. A C
# test that crashes in a case reports that case as failed itself
# (tests/check.h).
#   usage: tests/run.sh [BUILD_DIR] [FILTER...]
# With FILTERs, only the programs whose name contains one of them run.
B=${1:-build}
[ $# -gt 0 ] && shift
FILTERS="$*"
SCALE=${LIND_TEST_TIME_SCALE:-1}
LIMIT=$(awk -v t="${LIND_TEST_TIMEOUT:-1200}" -v s="$SCALE" \
  'BEGIN { if (s < 1) s = 1; printf "%d", t * s }')
JOBS=${LIND_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
export LIND_BUILD="$B"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
trap 'exit 130' INT TERM

selected() {
  [ -z "$FILTERS" ] && return 0
  for f in $FILTERS; do
    case "$1" in *"$f"*) return 0 ;; esac
  done
  return 1
}

# One program: its log, then its block printed whole (under a lock, so
# that blocks of programs ending together do not interleave) and its counts.
run_one() {
  name=$1; shift
  log="$out/$name.log"
  start=$(date +%s)
  timeout -k 10 "$LIMIT" "$@" >"$log" 2>&1 </dev/null
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    last=$(grep -v '^ *$' "$log" | tail -n 1)
    echo "FAIL $name: timed out after ${LIMIT}s (last output: ${last:-none})" >>"$log"
  fi
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc" >>"$log"; f=1
  fi
  el=$(( $(date +%s) - start ))
  {
    echo "== $name: $p passed, $f failed, $s skipped (${el}s)"
    if [ "$f" -ne 0 ]; then
      grep -v '^PASS ' "$log" | tail -n 40 | sed 's/^/   /'
    else
      grep -E '^(SKIP|NOTE) ' "$log" | sed 's/^/   /'
    fi
  } >"$out/$name.block"
  echo "$p $f $s $el $name" >"$out/$name.count"
  flock "$out/lock" cat "$out/$name.block"
}

# The programs, as "name command...": the longest of the last run first
# (unknown ones first of all: they may be long).
: >"$out/list"
for t in "$B"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.o|*.d) continue ;; esac
  echo "$(basename "$t") $t" >>"$out/list"
done
for t in tests/test_*.sh; do
  [ -f "$t" ] && echo "$(basename "$t") sh $t" >>"$out/list"
done
for t in tests/test_*.py; do
  [ -f "$t" ] && echo "$(basename "$t") /usr/bin/python3 $t" >>"$out/list"
done
times="$B/tests/run-times"
# A build directory's first run orders by tests/run-times (committed: the
# times of an ASan run, where the spread matters most), so that a fresh
# clone's long programs do not start last and run alone.
order_times="$times"
[ -f "$order_times" ] || order_times="$(dirname "$0")/run-times"
while read -r name cmd; do
  selected "$name" || continue
  el=$(awk -v n="$name" '$2 == n { print $1 }' "$order_times" 2>/dev/null | tail -n 1)
  echo "${el:-999999} $name $cmd"
done <"$out/list" | sort -k1,1nr -k2,2 >"$out/order"

# A slot per job: a line in a FIFO, taken before a program starts and
# given back when it ends.
mkfifo "$out/slots"
exec 3<>"$out/slots"
i=0
while [ "$i" -lt "$JOBS" ]; do echo >&3; i=$((i + 1)); done
while read -r _ name cmd; do
  read -r _ <&3
  # shellcheck disable=SC2086 # cmd is words: a program and its script
  ( run_one "$name" $cmd; echo >&3 ) &
done <"$out/order"
wait
exec 3>&-

pass=0; fail=0
for c in "$out"/*.count; do
  [ -f "$c" ] || continue
  read -r p f _ _ _ <"$c"
  pass=$((pass + p)); fail=$((fail + f))
done
# Remember each program's time (the whole runs only: a filtered run keeps
# the others' times).
if [ -d "$B/tests" ]; then
  { [ -f "$times" ] && cat "$times"
    cat "$out"/*.count 2>/dev/null | awk '{ print $4, $5 }'; } |
    awk '{ t[$2] = $1 } END { for (n in t) print t[n], n }' | sort -k2 >"$out/times" &&
    cp "$out/times" "$times" 2>/dev/null
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
