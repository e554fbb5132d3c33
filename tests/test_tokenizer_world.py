"""tests/test_tokenizer_world.py — the "world" tokenizer on the genuine RWKV
World vocabulary, the file every RWKV-5/6/7 World and G1 model ships with:
rwkv_vocab_v20230424.txt (65,529 tokens, md5 dd1946a6...; public in RWKV's
rwkv.cpp repository, python/rwkv_cpp/rwkv_vocab_v20230424.txt, and BlinkDL's
ChatRWKV), committed gzipped as
tests/fixtures/tokenizer/rwkv_vocab_v20230424.txt.gz.

The reference is independent of lind's C code: the file is read with Python's
ast.literal_eval (each line is "ID LITERAL LENGTH", the literal a str or bytes
repr), and text is encoded by a plain greedy longest-match over a dict trie —
the rule of RWKV's own tokenizer. Compared id for id (`lind tokenize`): the
multilingual sample, adversarial texts (long runs the vocabulary has tokens
for: 128 spaces, 80 dashes, newlines, digits), invalid UTF-8, and the King
James Bible's first 400 KB when Debian's bible-kjv is installed; each also
streamed in 7-byte pieces, and decoded back to its bytes. The vocabulary's own
facts are checked too: ids 1..65529, no id 0 (end of text), every byte a token.

Environment: LIND_BUILD (build directory, default build).
"""
import ast
import gzip
import hashlib
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from world_greedy import greedy_encoder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIND = os.path.join(ROOT, os.environ.get("LIND_BUILD", "build"), "lind")
VOCAB = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "rwkv_vocab_v20230424.txt.gz")
VOCAB_MD5 = "dd1946a66e1721abeac49f9c75a1e844"
SAMPLE = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "multilingual.txt")
failed = 0


def say(kind, name, why=""):
    global failed
    if kind == "FAIL":
        failed += 1
    print(f"{kind} {name}" + (f": {why}" if why else ""), flush=True)


def read_vocab(raw):
    toks = {}
    for line in raw.decode("utf-8").splitlines():
        i, rest = line.split(" ", 1)
        lit, n = rest.rsplit(" ", 1)
        v = ast.literal_eval(lit)
        b = v.encode("utf-8") if isinstance(v, str) else v
        if len(b) != int(n):
            raise ValueError(f"id {i}: length {n} but {len(b)} bytes")
        toks[int(i)] = b
    return toks


def lind(*args, data=None):
    r = subprocess.run([LIND, "tokenize", *args], input=data, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode(errors="replace").strip())
    return r.stdout


def first_diff(a, b):
    a, b = a.split(), b.split()
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"at id {k}: lind {x}, reference {y}"
    return f"lengths {len(a)} and {len(b)}"


def texts():
    out = []
    with open(SAMPLE, "rb") as f:
        out.append(("multilingual", f.read()))
    out.append(("adversarial", b" " * 300 + b"x" + b"-" * 170 + b"\n" * 40 + b"\r\n\t " * 9 + b"0123456789" * 30 +
                b"\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb" * 5 + b"User: hi\n\nAssistant: <think>\n</think>"))
    rnd = random.Random(7)
    frags = [b"\xff", b"\xfe", b"\xc0\x80", b"\xe4\xb8", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80",
             "é".encode(), "中文".encode(), b"abc ", b"\x00", b"\x7f"]
    out.append(("invalid_utf8", b"".join(rnd.choice(frags) for _ in range(3000))))
    try:
        kjv = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, timeout=300).stdout
    except (OSError, subprocess.TimeoutExpired):
        kjv = b""
    if len(kjv) > 1000000:
        out.append(("kjv_400k", kjv[:400000]))
    return out


def main():
    with open(VOCAB, "rb") as f:
        raw = gzip.decompress(f.read())
    md5 = hashlib.md5(raw).hexdigest()
    if md5 != VOCAB_MD5:
        say("FAIL", "genuine_file", f"md5 {md5}, want {VOCAB_MD5}")
        return 1
    toks = read_vocab(raw)
    ids = sorted(toks)
    missing_bytes = [c for c in range(256) if bytes([c]) not in toks.values()]
    if ids[0] != 1 or ids[-1] != 65529 or len(ids) != 65529 or missing_bytes:
        say("FAIL", "genuine_file", f"ids {ids[0]}..{ids[-1]} ({len(ids)}), bytes without a token {missing_bytes[:5]}")
        return 1
    say("PASS", "genuine_file")
    enc = greedy_encoder(toks)
    with tempfile.TemporaryDirectory() as tmp:
        vp = os.path.join(tmp, "rwkv_vocab_v20230424.txt")
        with open(vp, "wb") as f:
            f.write(raw)
        spec = "world:" + vp
        total = 0
        for name, data in texts():
            want = " ".join(map(str, enc(data)))
            tp = os.path.join(tmp, name)
            with open(tp, "wb") as f:
                f.write(data)
            try:
                got = lind("--tokenizer", spec, tp).decode().strip()
                streamed = lind("--tokenizer", spec, "--chunk", "7", tp).decode().strip()
                back = lind("--tokenizer", spec, "--decode", data=got.encode())
            except Exception as e:  # noqa: BLE001
                say("FAIL", "ids_" + name, str(e))
                continue
            if got != want:
                say("FAIL", "ids_" + name, first_diff(got, want))
            elif streamed != got:
                say("FAIL", "ids_" + name, "streamed in 7-byte pieces: " + first_diff(streamed, got))
            elif back != data:
                say("FAIL", "ids_" + name, f"decode gives {len(back)} bytes, not the {len(data)} encoded")
            else:
                total += len(want.split())
                say("PASS", "ids_" + name)
                print(f"NOTE ids_{name}: {len(data)} bytes, {len(want.split())} ids identical "
                      "(whole, streamed, decoded back)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
