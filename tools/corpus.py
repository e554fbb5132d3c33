#!/usr/bin/python3
"""tools/corpus.py — extract the King James Bible (Debian's bible-kjv) and
split it reproducibly into training and held-out text.

The text is exactly what `bible -f Gen1:1-Rev22:21` prints. The last 5% of it
in book order (cut at the first line start at or after 95% of the bytes) is
held out and never trained on.

    usage: tools/corpus.py OUTDIR        writes OUTDIR/kjv.txt, train.txt, heldout.txt
"""
import hashlib
import os
import subprocess
import sys

HELDOUT_FRACTION = 0.05


def extract():
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         stdout=subprocess.PIPE).stdout
    if len(out) < 4_000_000:
        raise SystemExit("corpus: bible printed only %d bytes (is bible-kjv installed?)" % len(out))
    if b"\0" in out:
        raise SystemExit("corpus: text contains NUL, which is the BOS token")
    return out


def split(text):
    cut = int(len(text) * (1.0 - HELDOUT_FRACTION))
    nl = text.index(b"\n", cut - 1)  # keep whole lines on each side
    return text[:nl + 1], text[nl + 1:]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    text = extract()
    train, heldout = split(text)
    for name, data in (("kjv.txt", text), ("train.txt", train), ("heldout.txt", heldout)):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    print("corpus: %d bytes (sha256 %s): train %d, held-out %d (starts %r)"
          % (len(text), hashlib.sha256(text).hexdigest()[:16], len(train), len(heldout),
             heldout[:24].decode()))


if __name__ == "__main__":
    main()
