#!/bin/sh
# tools/test_torch.sh BUILD — `make test-torch`: regenerate the agreement
# fixture from PyTorch (into a temporary directory, from the shipped model
# and the held-out text) and run lind's recurrent-vs-parallel check on it,
# plus the PyTorch-side tests. Prints a SKIP line when python3-torch is absent.
B=${1:-build}
PY=/usr/bin/python3
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "SKIP test-torch: python3-torch is not installed"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY tools/corpus.py "$tmp/corpus" >/dev/null || exit 1
$PY tools/fixture.py models/default "$tmp/corpus/heldout.txt" "$tmp/fixture" || exit 1
cmp -s "$tmp/fixture/default_sample.bin" tests/fixtures/default_sample.bin ||
  echo "NOTE the regenerated sample differs from the committed one"
LIND_FIXTURE_DIR="$tmp/fixture" "$B/tests/test_model_default" &&
  $PY tests/test_model_torch.py
