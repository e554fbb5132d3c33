#!/bin/sh
# bench/run.sh — every benchmark of `make bench`, in one run on one machine.
# Results go to bench/results/: one markdown file per section (each opens
# with the command that produced it and the machine it ran on), PNG plots
# drawn by gnuplot, and README.md (the index, with the machine and the total
# time). Benchmarks are not tests: they print numbers and never pass or fail;
# the script fails only when a program fails.
#
#   usage: bench/run.sh [BUILD_DIR] [FILTER] [-- ARGS for the other programs]
#     FILTER   run only the sections whose name contains it: decode, batch,
#              store, leases, or the name of another BUILD/bench/*_bench (daemon_bench)
#   environment:
#     BENCH_QUICK=1  small sizes: a smoke run of about a minute
#     MODEL=DIR      the model (default models/default; when it has no
#                    model.safetensors, random weights in its configuration)
#     BENCH_OUT=DIR  where results go (default bench/results)
#
# Sections, in this order:
#   decode  per-token decode time and memory per session against position,
#           recurrent vs softmax attention with a KV cache (decode_bench)
#   batch   throughput against batch size 1..256 beside the SGEMM rate and
#           memory bandwidth of the same run (`lind bench-step`), roofline
#   store   save/load per session, grouped commits, resume vs re-feed at
#           1k, 10k, 100k tokens (store_bench)
#   then every other BUILD/bench/*_bench program, output in NAME.md:
#   daemon_bench, end to end through `lind serve` with 1..256 sessions
#   (tokens/s, latency percentiles, ratio to the in-process rate, RSS over a
#   10^6-token stream), reads MODEL and BENCH_QUICK from the environment.
#   scale_bench, several nodes on one store: versioned, lease-fenced saves
#   and lease + load resumes on PostgreSQL vs SQLite, PostgreSQL saves/s
#   from 1/2/4 connections, tokens/s of 1 node vs 3 nodes on one database
#   (starts its own PostgreSQL like the tests; rows left out without one).
#   leases  scale_bench --leases: lease renewal commits/s, renewals/s and
#           lapses holding 1,000 and 10,000 leases of 2 s and 10 s, one
#           commit per lease against batched (PostgreSQL; 20 s a row)
#   contention  the daemon and the in-process step with 1 and 2 threads, with
#           and without a busy loop per CPU beside them (bench/contention.sh;
#           give it a second build to compare two versions in one run)
set -u
B=${1:-build}
FILTER=${2:-}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
out=${BENCH_OUT:-bench/results}
quick=${BENCH_QUICK:-}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/lind-bench-XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
status=0
start=$(date +%s)

want() { case "$1" in *"$FILTER"*) return 0 ;; esac; return 1; }
have_gnuplot() { command -v gnuplot >/dev/null 2>&1; }

# ---- the machine and the model ----------------------------------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
cores=$(nproc)
mem=$(free -g | awk '/^Mem:/ { print $2 " GiB total, " $7 " GiB available" }')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes in the tree)"
MODEL=${MODEL:-models/default}
if [ -f "$MODEL/model.safetensors" ]; then
  model_note="$MODEL (trained weights)"
else
  m="$tmp/random-weights-default-config"
  "$B/bench/decode_bench" --write-model "$m" || { echo "cannot write the fallback model"; exit 1; }
  model_note="random weights in tools/train.py's default configuration, written to $m ($MODEL has no model.safetensors)"
  MODEL=$m
fi
export MODEL
machine_line="Machine: $cpu, $cores cores, $mem, $(uname -sr); load average $(cut -d' ' -f1-3 /proc/loadavg) at start; $(date -u '+%Y-%m-%d %H:%M UTC'); lind commit $commit"
echo "$machine_line"
echo "Model: $model_note"

# Markdown preamble of a section written by this script.
preamble() {
  printf '## %s\n\n%s\n\nModel: %s\n\n' "$1" "$machine_line" "$model_note"
}

# ---- decode: recurrent vs softmax against position ---------------------------
if want decode; then
  echo "== decode"
  if [ -n "$quick" ]; then args="--quick"; else args=""; fi
  # shellcheck disable=SC2086
  if nice "$B/bench/decode_bench" --model "$MODEL" $args --data "$out/decode.dat" \
       --stream "$out/decode_stream.dat" >"$out/decode.md" 2>"$out/decode.log"; then
    cat "$out/decode.md"
    if have_gnuplot; then
      gnuplot <<EOF || status=1
set terminal pngcairo size 1200,500 font ',10'
set output '$out/decode.png'
set datafile missing 'nan'
set multiplot layout 1,2 title 'Decode at batch 1: lind recurrent state vs softmax attention with a KV cache ($cpu, $cores cores)'
set logscale xy
set grid
set key top left
set xlabel 'position N (tokens already in the session)'
set ylabel 'time per token (us)'
plot '$out/decode.dat' using 1:6 with linespoints lw 2 title 'recurrent (lind), interleaved', \
     '$out/decode.dat' using 1:2 with points pt 6 title 'recurrent (lind), stream order', \
     '$out/decode.dat' using 1:3 with linespoints lw 2 title 'softmax + KV cache (baseline)'
set ylabel 'memory per session (bytes)'
plot '$out/decode.dat' using 1:4 with linespoints lw 2 title 'recurrent state', \
     '$out/decode.dat' using 1:5 with linespoints lw 2 title 'softmax KV cache'
unset multiplot
set output '$out/decode_stream.png'
set terminal pngcairo size 900,450 font ',10'
unset logscale y
set yrange [0:*]
set title 'lind recurrent decode: per-token time along one stream (doubling windows)'
set xlabel 'position in the stream (tokens)'
set ylabel 'time per token (us)'
plot '$out/decode_stream.dat' using (sqrt(\$1*\$2)):3 with linespoints lw 2 title 'median', \
     '$out/decode_stream.dat' using (sqrt(\$1*\$2)):4 with linespoints title 'mean'
EOF
    fi
  else
    echo "decode_bench failed; see $out/decode.log"
    status=1
  fi
fi

# ---- batch: throughput against batch size, with the roofline ------------------
if want batch; then
  echo "== batch"
  if [ -n "$quick" ]; then maxb=16 secs=0.1; else maxb=256 secs=1; fi
  cmd="$B/lind bench-step --model $MODEL --max-batch $maxb --seconds $secs"
  if nice $cmd >"$out/batch.txt" 2>"$out/batch.log"; then
    # Roofline per batch: the step reads every weight once (fp32) and does
    # the matrix FLOPs bench-step counts; the bound is the smaller of
    # SGEMM-rate / FLOPs-per-token and B · bandwidth / weight-bytes.
    caches=$(lscpu | awk -F: '/^L[23] cache/ { gsub(/^ +/, "", $2); printf "%s%s %s", sep, $1, $2; sep = ", " }')
    awk -v dat="$out/batch.dat" -v caches="$caches" '
      /parameters/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^parameters/) params = $i }
      /matrix FLOPs per token:/ { for (i = 1; i <= NF; i++) if ($i == "token:") fpt = $(i+1) * 1e6 }
      /^SGEMM/ { for (i = 1; i <= NF; i++) { if ($i == "GFLOP/s") peak = $(i-1); if ($i == "GB/s") bw = $(i-1) } }
      # Header: "step ms" is one column of the rows below it. Only the first
      # table has tokens/s; the per-CPU-second table after it does not.
      /^per CPU-second/ { tcol = 0; done = 1 }
      $1 == "batch" && !done { j = 0; for (i = 1; i <= NF; i++) { if ($i == "ms" && $(i-1) == "step") continue; j++; if ($i == "tokens/s") tcol = j } next }
      tcol && $1 ~ /^[0-9]+$/ { b[++n] = $1; t[n] = $(tcol) }
      END {
        if (!params || !fpt || !peak || !bw || !n) { print "could not read bench-step output" > "/dev/stderr"; exit 1 }
        wbytes = params * 4
        printf "Step FLOPs per token %.3f M; weights %.2f MB (fp32, read once per step); SGEMM %.1f GFLOP/s; memory bandwidth %.1f GB/s (memcpy, read+write). This CPU caches: %s. Weights that fit in cache are read faster than the memcpy bandwidth, so at small batches the measured rate can pass the memory roof.\n\n", fpt / 1e6, wbytes / 1e6, peak, bw, caches
        print "| batch | tokens/s | compute bound (SGEMM / FLOPs) | memory bound (B x bandwidth / weight bytes) | roofline tokens/s | measured / roofline |"
        print "|---|---|---|---|---|---|"
        for (i = 1; i <= n; i++) {
          cb = peak * 1e9 / fpt; mb = b[i] * bw * 1e9 / wbytes; r = cb < mb ? cb : mb
          printf "| %d | %.0f | %.0f | %.0f | %.0f | %.0f%% |\n", b[i], t[i], cb, mb, r, 100 * t[i] / r
          printf "%d %.1f %.1f %.1f\n", b[i], t[i], cb, mb > dat
        }
      }' "$out/batch.txt" >"$tmp/roofline.md" || status=1
    {
      preamble "Throughput against batch size"
      printf 'Command: `%s`\n\n```\n' "$cmd"
      cat "$out/batch.txt"
      printf '```\n\n### Roofline\n\n'
      cat "$tmp/roofline.md"
    } >"$out/batch.md"
    cat "$out/batch.md"
    if have_gnuplot && [ -s "$out/batch.dat" ]; then
      gnuplot <<EOF || status=1
set terminal pngcairo size 900,550 font ',10'
set output '$out/batch.png'
set title 'lind decode throughput against batch size ($cpu, $cores cores)'
set logscale xy
set grid
set key bottom right
set xlabel 'sessions stepped together (batch)'
set ylabel 'tokens/s (all sessions)'
plot '$out/batch.dat' using 1:2 with linespoints lw 2 title 'measured (lind bench-step)', \
     '$out/batch.dat' using 1:3 with lines dt 2 title 'compute roof: SGEMM rate / FLOPs per token', \
     '$out/batch.dat' using 1:4 with lines dt 3 title 'memory roof: B x bandwidth / weight bytes'
EOF
    fi
  else
    echo "bench-step failed; see $out/batch.log"
    status=1
  fi
fi

# ---- store: persistence ------------------------------------------------------------
if want store; then
  echo "== store"
  if [ -n "$quick" ]; then args="--quick --history 1000"; else args="--history 1000,10000,100000"; fi
  # shellcheck disable=SC2086
  if nice "$B/bench/store_bench" --model "$MODEL" $args >"$out/store_bench.md" 2>"$out/store_bench.log"; then
    cat "$out/store_bench.md"
  else
    echo "store_bench failed; see $out/store_bench.log"
    status=1
  fi
fi

# ---- every other benchmark program ----------------------------------------------------
for p in "$B"/bench/*_bench; do
  [ -x "$p" ] && [ -f "$p" ] || continue
  name=$(basename "$p")
  case "$name" in decode_bench|store_bench|kernel_ab_bench) continue ;; esac   # kernel_ab: two builds (bench/kernel_ab.sh)
  want "$name" || continue
  echo "== $name"
  if nice "$p" "$@" >"$out/$name.md" 2>"$out/$name.log"; then
    cat "$out/$name.md"
  else
    echo "$name failed (status $?); see $out/$name.log"
    status=1
  fi
done

# ---- leases: renewal commits/s and lapses, one commit per lease vs batched -----
if want leases && [ -x "$B/bench/scale_bench" ]; then
  echo "== leases"
  secs=20; [ -n "$quick" ] && secs=5
  if nice "$B/bench/scale_bench" --leases --lease-secs $secs >"$out/scale_leases.md" 2>"$out/scale_leases.log"; then
    cat "$out/scale_leases.md"
  else
    echo "scale_bench --leases failed (status $?); see $out/scale_leases.log"
    status=1
  fi
fi

# ---- contention: 1 and 2 threads beside a busy loop per CPU (bench/contention.sh) ---
if want contention; then
  echo "== contention"
  rounds=3; tokens=1000
  [ -n "$quick" ] && { rounds=1; tokens=100; }
  if ROUNDS=$rounds TOKENS=$tokens MODEL=$MODEL sh bench/contention.sh "$B" >"$out/contention.md" 2>"$out/contention.log"; then
    tail -n 14 "$out/contention.md"
  else
    echo "contention failed (status $?); see $out/contention.log"
    status=1
  fi
fi

# ---- the index ---------------------------------------------------------------------
elapsed=$(( $(date +%s) - start ))
{
  echo "# lind benchmark results"
  echo
  echo "Produced by \`make bench\` (\`sh bench/run.sh $B${FILTER:+ $FILTER}\`${quick:+ with BENCH_QUICK=$quick}) in $elapsed s."
  echo
  echo "$machine_line"
  echo
  echo "Model: $model_note"
  echo
  for f in "$out"/*.md; do
    f=$(basename "$f")
    [ "$f" = README.md ] || echo "- [$f]($f)"
  done
  echo
  for f in "$out"/*.png; do
    [ -f "$f" ] && echo "![$(basename "$f")]($(basename "$f"))"
  done
} >"$out/README.md"
echo "bench/run.sh: done in $elapsed s, results in $out (status $status)"
exit $status
