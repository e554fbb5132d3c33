#!/bin/sh
# tests/test_bench_smoke.sh — the decode benchmark at tiny sizes: it runs,
# its softmax baseline agrees with a reference, every position gets a row,
# memory per session is what the model's shape says (constant for the
# recurrent state, K and V of every layer per cached token for softmax), a
# cache over the memory limit is reported as out of memory rather than run,
# bench/run.sh's decode section writes its markdown, plot and index, and its
# batch section one roofline row per batch.
# Times are printed by the benchmark but not asserted: speed is shown by
# `make bench`, never by a timed test.
B=${LIND_BUILD:-build}
bin="$B/bench/decode_bench"
tmp=$(mktemp -d /tmp/lind-bench-smoke-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

if [ ! -x "$bin" ]; then
  fail decode_bench_built "$bin missing (make test-build builds bench/*_bench.c)"
  exit 1
fi

# A model directory that exists only as a name: the benchmark falls back to
# random weights in the default configuration and says so.
"$bin" --model "$tmp/none" --positions 64,128,256 --window 8 --prefix 128 --data "$tmp/d.dat" \
  >"$tmp/out.md" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ]; then pass decode_bench_runs; else fail decode_bench_runs "exit $rc: $(tail -n 3 "$tmp/err")"; fi

if grep -q 'Softmax baseline self-check.*(ok)' "$tmp/out.md"; then pass softmax_baseline_selfcheck
else fail softmax_baseline_selfcheck "no '(ok)' self-check line"; fi

if grep -q '^Model: random weights' "$tmp/out.md" && grep -q '^Command: `' "$tmp/out.md" &&
   grep -q '^Machine: ' "$tmp/out.md"; then pass decode_bench_says_model_command_machine
else fail decode_bench_says_model_command_machine "missing Model/Command/Machine line"; fi

# Rows: N rec_us sm_us rec_bytes sm_bytes, every time a positive number.
rows=$(awk '!/^#/ && $2 > 0 && $3 > 0 { n++ } END { print n + 0 }' "$tmp/d.dat")
if [ "$rows" = 3 ]; then pass decode_bench_row_per_position
else fail decode_bench_row_per_position "$rows rows with positive times, want 3"; cat "$tmp/d.dat"; fi

# Memory: the shape from the Model line.
shape=$(sed -n 's/^Model: .*d_model \([0-9]*\), \([0-9]*\) layers.*, \([0-9]*\) heads x \([0-9]*\),.*/\1 \2 \3 \4/p' "$tmp/out.md")
set -- $shape
if [ $# -ne 4 ]; then
  fail decode_bench_memory "cannot read the model shape from: $(grep '^Model:' "$tmp/out.md")"
else
  d=$1 L=$2 H=$3 dh=$4
  bad=$(awk -v d="$d" -v L="$L" -v H="$H" -v dh="$dh" '
    !/^#/ { if (rec == "") rec = $4; if ($4 != rec) print "recurrent bytes change with N: " rec " then " $4
            want = 2 * L * H * dh * 4 * $1 + L * d * 4
            if ($5 != want) print "softmax bytes at N=" $1 ": " $5 ", want " want }' "$tmp/d.dat")
  if [ -z "$bad" ]; then pass decode_bench_memory; else fail decode_bench_memory "$bad"; fi
fi

# Over the limit: reported, not run; the recurrent side says where it stopped.
"$bin" --model "$tmp/none" --positions 64,100000 --window 4 --prefix 64 --advance-max 100 \
  --mem-limit-gib 0.001 >"$tmp/oom.md" 2>"$tmp/err"
rc=$?
row=$(grep '^| 100000 |' "$tmp/oom.md")
case "$rc:$row" in
  0:*"out of memory: the KV cache needs"*"not run (stepping capped at 100)"*|0:*"not run (stepping capped at 100)"*"out of memory: the KV cache needs"*)
    pass decode_bench_reports_oom_and_cap ;;
  *) fail decode_bench_reports_oom_and_cap "exit $rc, row: $row" ;;
esac

"$bin" --positions 10,abc >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ] && grep -q 'positions' "$tmp/err"; then pass decode_bench_bad_positions_refused
else fail decode_bench_bad_positions_refused "exit $rc: $(cat "$tmp/err")"; fi

# run.sh's decode section, quick.
BENCH_QUICK=1 BENCH_OUT="$tmp/results" MODEL="$tmp/none" sh bench/run.sh "$B" decode >"$tmp/run.log" 2>&1
rc=$?
missing=
for f in decode.md decode.dat README.md; do [ -s "$tmp/results/$f" ] || missing="$missing $f"; done
if command -v gnuplot >/dev/null 2>&1; then
  for f in decode.png decode_stream.png; do [ -s "$tmp/results/$f" ] || missing="$missing $f"; done
fi
if [ $rc -eq 0 ] && [ -z "$missing" ] && grep -q 'decode.md' "$tmp/results/README.md"; then pass run_sh_decode_quick
else fail run_sh_decode_quick "exit $rc, missing:$missing; $(tail -n 5 "$tmp/run.log")"; fi

# run.sh's batch section, quick: one roofline row per batch bench-step
# printed (1, 2, 4, 8, 16 in order), none from its per-CPU-second table.
BENCH_QUICK=1 BENCH_OUT="$tmp/results" MODEL="$tmp/none" sh bench/run.sh "$B" batch >"$tmp/run_batch.log" 2>&1
rc=$?
rows=$(sed -n '/^### Roofline/,$p' "$tmp/results/batch.md" 2>/dev/null | awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { gsub(/ /, "", $2); printf "%s,", $2 }')
dat=$(awk '{ printf "%s,", $1 }' "$tmp/results/batch.dat" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$rows" = "1,2,4,8,16," ] && [ "$dat" = "1,2,4,8,16," ]; then pass run_sh_batch_roofline_rows
else fail run_sh_batch_roofline_rows "exit $rc, roofline rows '$rows', batch.dat rows '$dat'; $(tail -n 3 "$tmp/run_batch.log")"; fi
