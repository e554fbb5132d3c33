#!/bin/sh
# bench/peers/get_rwkv_cpp.sh — obtain and build rwkv.cpp for `make bench-peers`.
#
# `make bench-peers` never downloads anything: it measures the rwkv.cpp built
# here, in the ignored folder build-peers/src/rwkv.cpp (its library in
# build-peers/src/rwkv.cpp/build/librwkv.so). This script is the one step that
# reads a network or a mirror; run it once:
#
#   sh bench/peers/get_rwkv_cpp.sh                      # from GitHub
#   sh bench/peers/get_rwkv_cpp.sh RWKV_REPO GGML_REPO  # from local clones/mirrors
#
# RWKV_REPO / GGML_REPO (or the environment variables of the same names) are
# anything `git clone` accepts: a URL or a path to a clone or a bare mirror.
# The defaults are https://github.com/RWKV/rwkv.cpp and its ggml submodule's
# https://github.com/ggerganov/ggml. The commits are pinned (below): the
# figures of bench/results/peers.md are for exactly these sources. Building
# needs cmake and a C++ compiler (`make deps` installs cmake).
set -eu
RWKV_COMMIT=4358e709ab2ba64e0e94f159db5e118cbb77714e
GGML_COMMIT=c8bd0fee71dc8328d93be301bbee06bc10d30429
RWKV_REPO=${1:-${RWKV_REPO:-https://github.com/RWKV/rwkv.cpp}}
GGML_REPO=${2:-${GGML_REPO:-https://github.com/ggerganov/ggml}}
DEST=${PEERS_SRC:-build-peers/src/rwkv.cpp}
JOBS=${JOBS:-2}

command -v git >/dev/null || { echo "get_rwkv_cpp: git is needed" >&2; exit 1; }
command -v cmake >/dev/null || { echo "get_rwkv_cpp: cmake is needed (make deps installs it)" >&2; exit 1; }

if [ ! -d "$DEST/.git" ]; then
  mkdir -p "$(dirname "$DEST")"
  git clone --no-checkout "$RWKV_REPO" "$DEST"
fi
git -C "$DEST" -c advice.detachedHead=false checkout -q "$RWKV_COMMIT"
# ggml: the submodule at the commit rwkv.cpp pins, from GGML_REPO
if [ ! -d "$DEST/ggml/.git" ] && [ ! -f "$DEST/ggml/.git" ]; then
  rm -rf "$DEST/ggml"
  git clone --no-checkout "$GGML_REPO" "$DEST/ggml"
fi
pinned=$(git -C "$DEST" ls-tree HEAD ggml | awk '{print $3}')
[ "$pinned" = "$GGML_COMMIT" ] || { echo "get_rwkv_cpp: rwkv.cpp pins ggml $pinned, expected $GGML_COMMIT" >&2; exit 1; }
git -C "$DEST/ggml" -c advice.detachedHead=false checkout -q "$GGML_COMMIT"

# A shared library (librwkv.so, with ggml linked in) that the bench dlopens;
# the CPU build only, tuned to this CPU (-march=native for rwkv.cpp and ggml:
# its AVX-512 / VNNI / BF16 paths where the CPU has them), so that it is
# measured at its best.
cmake -S "$DEST" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release -DRWKV_BUILD_SHARED_LIBRARY=ON \
      -DRWKV_NATIVE=ON -DGGML_NATIVE=ON -DRWKV_STANDALONE=ON >/dev/null   # STANDALONE: without its tests and extras
echo "get_rwkv_cpp: building (log: $DEST/build/build.log)"
if ! cmake --build "$DEST/build" -j "$JOBS" --target rwkv >"$DEST/build/build.log" 2>&1; then
  tail -n 30 "$DEST/build/build.log" >&2
  echo "get_rwkv_cpp: the build failed (log: $DEST/build/build.log)" >&2
  exit 1
fi
lib=$(find "$DEST/build" -name 'librwkv.so' | head -n 1)
[ -n "$lib" ] || { echo "get_rwkv_cpp: no librwkv.so was built" >&2; exit 1; }
echo "get_rwkv_cpp: built $lib (rwkv.cpp $RWKV_COMMIT, ggml $GGML_COMMIT)"
