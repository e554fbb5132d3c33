#!/bin/sh
# bench/peers/run.sh — `make bench-peers`: lind and rwkv.cpp in the same run.
#
#   usage: bench/peers/run.sh PEERS_BENCH_BINARY
#   environment:
#     PEERS_QUICK=1   a short check of the machinery (small rounds), written to
#                     bench/results/peers-quick.log instead of peers.md
#     PEERS_SHAPES    shapes to measure (default rwkv4-169m,rwkv7-0.1b,mamba2-130m;
#                     mamba2-130m is lind alone; also rwkv7-1.5b: about 3 GB of
#                     bf16 weights, 6 GB per FP32 copy, so with
#                     PEERS_ARGS="--pairs bf16,q8" on a 24 GB machine)
#     PEERS_SRC       rwkv.cpp's folder (default build-peers/src/rwkv.cpp)
#     PEERS_MODELS    where the random weights go (default build-peers/models)
#     PEERS_ARGS      more options for peers_bench (--retries N --load-limit CORES
#                     --rounds N --threads N)
#
# Nothing is downloaded here: rwkv.cpp must already be built by
# bench/peers/get_rwkv_cpp.sh (docs/BENCHMARKS.md says how to obtain it).
set -eu
bin=${1:?usage: bench/peers/run.sh PEERS_BENCH_BINARY}
src=${PEERS_SRC:-build-peers/src/rwkv.cpp}
models=${PEERS_MODELS:-build-peers/models}
shapes=${PEERS_SHAPES:-rwkv4-169m,rwkv7-0.1b,mamba2-130m}
lib=$src/build/librwkv.so
if [ ! -f "$lib" ]; then
  cat >&2 <<MSG
bench-peers: no rwkv.cpp at $src (no $lib).
  make bench-peers fetches nothing. Obtain and build rwkv.cpp at the pinned
  commits once, from GitHub or from local clones/mirrors:
    sh bench/peers/get_rwkv_cpp.sh
    sh bench/peers/get_rwkv_cpp.sh /path/to/rwkv.cpp.git /path/to/ggml.git
  (docs/BENCHMARKS.md, "lind against rwkv.cpp")
MSG
  exit 1
fi
py=/usr/bin/python3
[ -x "$py" ] || py=python3
for s in $(echo "$shapes" | tr ',' ' '); do
  if [ ! -f "$models/$s/shape.json" ]; then   # written last
    echo "bench-peers: writing random weights for $s in $models/$s" >&2
    "$py" bench/peers/make_weights.py "$models/$s" "$s"
  fi
done
quick=""
out=bench/results/peers.md
if [ -n "${PEERS_QUICK:-}" ] && [ "${PEERS_QUICK}" != 0 ]; then
  quick=--quick
  out=bench/results/peers-quick.log
fi
mkdir -p bench/results
# The result replaces $out only when the run ends well; until then it grows
# in a temporary file (its path printed).
tmp=$(mktemp /tmp/lind-bench-peers-XXXXXX)
echo "bench-peers: running; the output so far is in $tmp" >&2
# shellcheck disable=SC2086
"$bin" $quick --models "$models" --shapes "$shapes" --rwkv-lib "$lib" ${PEERS_ARGS:-} > "$tmp"
mv "$tmp" "$out"
cat "$out"
echo "bench-peers: written to $out" >&2
