#!/bin/sh
# bench/contention.sh — the daemon's throughput with and without a competing
# CPU load, for 1 and 2 compute threads, and for a second lind build beside
# this one (before/after a change, measured in the same run).
#
#   sh bench/contention.sh [BUILD] [OTHER_BUILD] > bench/results/contention.md
#
# Each round runs every (load, variant) pair once, variants in a rotated
# order so drifts of the shared machine hit them all: a fresh `lind serve
# --backend cpu` on the shipped model, then `lindctl stress --sessions 8
# --tokens 1000` (the issue's measurement), and the same variant in process,
# `lind bench-step --max-batch 8 --seconds 0.5` (tokens/s of the batch-1 and
# batch-8 steps: no daemon, no client). "hog" is one busy shell loop per
# online CPU running while the daemon serves; "quiet" is without it (other
# people's work on the machine is not ours to stop: the load average at the
# start of each round is printed). The table gives the median and the range
# of tokens/s over the rounds. Threads are set with LIND_CPU_THREADS, which
# every build reads (newer ones also take --threads).
#   ROUNDS (default 7), SESSIONS (8), TOKENS (1000), MODEL (models/default)
B=${1:-build}
O=${2:-}
ROUNDS=${ROUNDS:-7}
SESSIONS=${SESSIONS:-8}
TOKENS=${TOKENS:-1000}
MODEL=${MODEL:-models/default}
CORES=$(nproc)
tmp=$(mktemp -d /tmp/lind-contention-XXXXXX)
hogs=
daemon=
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  for h in $hogs; do kill "$h" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hog_start() {
  hogs=
  i=0
  while [ $i -lt "$CORES" ]; do
    sh -c 'while :; do :; done' &
    hogs="$hogs $!"
    i=$((i + 1))
  done
}
hog_stop() {
  for h in $hogs; do kill "$h" 2>/dev/null; wait "$h" 2>/dev/null; done
  hogs=
}

# one_run BUILDDIR THREADS -> tokens/s on stdout (or "fail")
one_run() {
  rm -f "$tmp/s" "$tmp/db" "$tmp/db-wal" "$tmp/db-shm"
  LIND_CPU_THREADS=$2 "$1/lind" serve --model "$MODEL" --backend cpu --socket "$tmp/s" --db "$tmp/db" \
    >"$tmp/log" 2>&1 &
  daemon=$!
  n=0
  while [ ! -S "$tmp/s" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
  "$1/lindctl" stress --socket "$tmp/s" --sessions "$SESSIONS" --tokens "$TOKENS" --json >"$tmp/out" 2>"$tmp/err"
  kill "$daemon" 2>/dev/null
  wait "$daemon" 2>/dev/null
  daemon=
  /usr/bin/python3 -c 'import json,sys
try: print("%.0f" % json.load(open(sys.argv[1]))["tokens_per_s"])
except Exception: print("fail")' "$tmp/out"
}

# step_run BUILDDIR THREADS -> "b1 b8" tokens/s of bench-step's batch 1 and 8 rows
step_run() {
  LIND_CPU_THREADS=$2 "$1/lind" bench-step --model "$MODEL" --backend cpu --max-batch 8 --seconds 0.5 2>/dev/null |
    awk '$1 == 1 && NF >= 4 && !a { a = $4 } $1 == 8 && NF >= 4 && !b { b = $4 } END { print (a ? a : "fail"), (b ? b : "fail") }'
}

variants="$B:1 $B:2"
[ -n "$O" ] && variants="$O:1 $O:2 $variants"
nv=$(echo $variants | wc -w)
echo "# Throughput under a competing CPU load"
echo
echo "\`sh bench/contention.sh $B${O:+ $O}\`, $(date -u '+%Y-%m-%d %H:%M UTC'), $CORES CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')),"
echo "$ROUNDS rounds; each cell a fresh daemon and \`lindctl stress --sessions $SESSIONS --tokens $TOKENS\`; tokens/s."
echo "hog = one busy loop per CPU ($CORES) beside the daemon."
echo
echo "Per round: load/build/threads=daemon tokens/s (in-process batch-1, batch-8 tokens/s)."
echo
echo "| round | load avg at start | order | results |"
echo "|---:|---:|---|---|"
r=1
while [ $r -le "$ROUNDS" ]; do
  la=$(cut -d' ' -f1 /proc/loadavg)
  # rotate the variants by the round number
  k=$(( (r - 1) % nv ))
  order=$(echo $variants | tr ' ' '\n' | awk -v k=$k -v n=$nv '{a[NR-1]=$0} END{for(i=0;i<n;i++) print a[(i+k)%n]}' | tr '\n' ' ')
  line=
  for load in quiet hog; do
    [ $load = hog ] && hog_start
    for v in $order; do
      bd=${v%:*}; th=${v##*:}
      t=$(one_run "$bd" "$th")
      echo "daemon $load $bd $th $t" >>"$tmp/all"
      set -- $(step_run "$bd" "$th")
      echo "step_b1 $load $bd $th $1" >>"$tmp/all"
      echo "step_b8 $load $bd $th $2" >>"$tmp/all"
      line="$line $load/$bd/t$th=$t ($1, $2)"
    done
    [ $load = hog ] && hog_stop
  done
  echo "| $r | $la | $order |$line |"
  r=$((r + 1))
done
echo
echo "| measurement | load | build | threads | median tokens/s | range | runs |"
echo "|---|---|---|---:|---:|---|---:|"
/usr/bin/python3 - "$tmp/all" <<'EOF'
import sys, statistics
rows = {}
names = {"daemon": "daemon, stress", "step_b1": "in process, batch 1", "step_b8": "in process, batch 8"}
for ln in open(sys.argv[1]):
    m, load, b, th, t = ln.split()
    v = rows.setdefault((m, load, b, th), [])
    if t != "fail":
        v.append(float(t))
order = {"daemon": 0, "step_b1": 1, "step_b8": 2}
for (m, load, b, th), v in sorted(rows.items(), key=lambda kv: (order[kv[0][0]], kv[0][1] != "quiet", kv[0][2], kv[0][3])):
    if v:
        print("| %s | %s | %s | %s | %.0f | %.0f–%.0f | %d |" % (names[m], load, b, th, statistics.median(v), min(v), max(v), len(v)))
    else:
        print("| %s | %s | %s | %s | failed | | 0 |" % (names[m], load, b, th))
EOF
