#!/bin/sh
# tools/mixers_table.sh — the trained side-by-side table of mixer kinds
# (docs/MIXERS.md, bench/results/mixers.md), reproduced from scratch.
#
#   tools/mixers_table.sh train [ROW...]    train models/<row>/ (default: every row)
#   tools/mixers_table.sh measure [ROW...]  quality (bits/byte) + speed, then the table
#   tools/mixers_table.sh quality|prefix|speed [ROW...]   one part of measure
#   tools/mixers_table.sh cost              window / linformer cost as w or N grows (random weights)
#   tools/mixers_table.sh all               everything above, in order
# Results: bench/results/mixers.md (the table), mixers.json (figures),
# mixers_raw.txt (every command, its output, time and load average).
#
# Every row is trained under ONE budget: the same width, depth, FFN, data
# (KJV, data/kjv from tools/corpus.py), window order (seed 1234), batch,
# context, steps and learning-rate schedule (by steps, never by elapsed time),
# on one torch thread. Only the mixer and its own keys differ.
set -eu
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
LIND=${LIND:-build/lind}
CTX=128
BUDGET="--d-model 128 --n-layers 4 --n-heads 4 --d-ff 512 --ctx $CTX --batch 16 --steps 800 \
 --warmup 80 --lr 3e-3 --min-lr 1e-4 --seed 1234 --threads 1 --time-budget 0 \
 --eval-every 100 --eval-windows 8 --final-windows 64 --half"
ALL="linear aft delta window aft_local aft_conv performer cosformer retnet linformer window_linear"

# row -> mixers per layer and the kind's own config keys
row_mixers() {
    case $1 in
    window_linear) echo window,linear,window,linear ;;
    *) echo "$1,$1,$1,$1" ;;
    esac
}
row_keys() {
    case $1 in
    window|window_linear) echo '{"window": 32, "global": 4, "position": "alibi"}' ;;
    aft_local) echo '{"window": 32}' ;;
    aft_conv) echo '{"kernel_size": 32}' ;;
    performer) echo '{"n_features": 64}' ;;
    cosformer) echo "{\"horizon\": $CTX, \"cos_mode\": \"periodic\"}" ;;
    linformer) echo "{\"proj_len\": 32, \"max_len\": $CTX}" ;;
    *) echo '{}' ;;
    esac
}

train() {
    [ -f data/kjv/heldout.txt ] || $PY tools/corpus.py data/kjv
    for r in "$@"; do
        echo "== train $r $(date -u +%H:%M:%S)"
        OMP_NUM_THREADS=1 nice -n 5 $PY tools/train.py --data data/kjv --out models/$r $BUDGET \
            --mixers "$(row_mixers $r)" --kind-config "$(row_keys $r)" >models/$r.train.out 2>&1 || {
            cat models/$r.train.out; exit 1; }
        mv models/$r.train.out models/$r/train.out
        tail -1 models/$r/train.out
    done
}

cmd=${1:-}
[ -x "$LIND" ] || make -j2 >/dev/null
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- $ALL
case $cmd in
train) train "$@" ;;
quality) $PY tools/mixers_measure.py quality "$@" ;;
prefix) $PY tools/mixers_measure.py prefix "$@" ;;
speed) $PY tools/mixers_measure.py speed "$@" ;;
measure) $PY tools/mixers_measure.py quality "$@" && $PY tools/mixers_measure.py prefix "$@" &&
         $PY tools/mixers_measure.py speed "$@" &&
         $PY tools/mixers_measure.py table ;;
cost) $PY tools/mixers_measure.py cost && $PY tools/mixers_measure.py table ;;
all) train "$@" && $0 measure "$@" && $0 cost ;;
*) echo "usage: tools/mixers_table.sh train|measure|quality|prefix|speed|cost|all [ROW...]" >&2; exit 2 ;;
esac
