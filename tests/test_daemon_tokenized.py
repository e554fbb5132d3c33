#!/usr/bin/python3
"""tests/test_daemon_tokenized.py — `lind serve` with a tokenized model, end to end.

A small random RWKV-4 model in the Hugging Face layout (config.json with
model_type "rwkv", model.safetensors with HF's tensor names) and a byte-level
BPE tokenizer.json (id 0 <|endoftext|>, the 256 bytes in GPT-2's
byte<->unicode spelling, then merges learned here from this file's own
text, so real English words become multi-byte tokens) are written here with
numpy, served by the real daemon ($LIND_BUILD/lind), and driven over the
protocol of docs/PROTOCOL.md. The cases are what a user of such a model relies
on:
  - a text split at random byte positions (inside words, inside UTF-8
    characters) into append turns, with daemon restarts (graceful and SIGKILL)
    between some of them, then one generate, gives exactly the tokens of one
    generate with the whole text: same output bytes, same token counts;
  - token events carry each token's bytes (several per token), and joined
    they are the text `lind generate` prints offline for the same request;
  - stop strings are found across token boundaries and inside one token;
  - a session resumed after a restart continues byte-identically;
  - batched prefill (prompts fed in chunks, mixed with other sessions'
    decode rows in one model_forward) gives the results of the same requests
    run one at a time, whatever --prompt-chunk;
  - a cancel that cuts a long append still feeds the tail an earlier append
    held back (it was acknowledged) and reports what the session holds.
Prints one line per case: PASS name / FAIL name: why.
"""
import collections
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_harness as dh  # noqa: E402
from daemon_harness import Client, Server, case, expect, LIND, SANITIZED, SLOW, TMP  # noqa: E402


# ---- the tokenizer -------------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's ByteLevel map: printable bytes stand for themselves, the others
    are shifted to U+0100 and up, in byte order."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


# Training-time pieces: roughly GPT-2's pre-tokenizer (a word with its leading
# space, digits, punctuation runs, whitespace). Only the merges come from it.
PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def learn_merges(text, n_merges):
    """Plain BPE training over the byte-level pieces of text: the most
    frequent adjacent pair (ties: the first seen) becomes the next merge."""
    b2u = bytes_to_unicode()
    words = collections.Counter(PIECE.findall(text))
    seqs = {w: [b2u[b] for b in w.encode()] for w in words}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), c = max(pairs.items(), key=lambda kv: kv[1])
        if c < 2:
            break
        merges.append((a, b))
        for w in seqs:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def tokenizer_json(merges):
    b2u = bytes_to_unicode()
    vocab = {"<|endoftext|>": 0}
    for b in range(256):
        vocab[b2u[b]] = 1 + b
    kept = []
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            kept.append((a, b))
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": bl, "post_processor": dict(bl), "decoder": dict(bl),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": ["%s %s" % m for m in kept]},
    }, len(vocab)


# ---- the model (HF RWKV-4 layout) -------------------------------------------------

def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_model(path, merges_text, seed=5, H=48, L=2, n_merges=300, pad=3):
    os.makedirs(path, exist_ok=True)
    tj, tv = tokenizer_json(learn_merges(merges_text, n_merges))
    V = tv + pad   # padded like HF checkpoints: ids past the tokenizer's have no text
    A, I = H, 4 * H
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return rng.standard_normal(shape) * std

    def ln(p):
        return [(p + ".weight", 1.0 + normal(H, 0.1)), (p + ".bias", normal(H, 0.05))]

    t = [("rwkv.embeddings.weight", normal((V, H), 1.0))]
    for i in range(L):
        p = "rwkv.blocks.%d." % i
        if i == 0:
            t += ln(p + "pre_ln")
        t += ln(p + "ln1") + ln(p + "ln2")
        a, f = p + "attention.", p + "feed_forward."
        t += [(a + "time_decay", rng.uniform(-6.0, 1.5, A)), (a + "time_first", rng.uniform(-1.5, 1.5, A)),
              (a + "time_mix_key", rng.uniform(0, 1, (1, 1, H))),
              (a + "time_mix_value", rng.uniform(0, 1, (1, 1, H))),
              (a + "time_mix_receptance", rng.uniform(0, 1, (1, 1, H))),
              (a + "key.weight", normal((A, H), 1.5 / np.sqrt(H))),
              (a + "value.weight", normal((A, H), 1.0 / np.sqrt(H))),
              (a + "receptance.weight", normal((A, H), 1.0 / np.sqrt(H))),
              (a + "output.weight", normal((H, A), 0.8 / np.sqrt(A))),
              (f + "time_mix_key", rng.uniform(0, 1, (1, 1, H))),
              (f + "time_mix_receptance", rng.uniform(0, 1, (1, 1, H))),
              (f + "key.weight", normal((I, H), 1.0 / np.sqrt(H))),
              (f + "receptance.weight", normal((H, H), 1.0 / np.sqrt(H))),
              (f + "value.weight", normal((H, I), 1.0 / np.sqrt(I)))]
    t += ln("rwkv.ln_out") + [("head.weight", normal((V, H), 3.0 / np.sqrt(H)))]
    cfg = {"architectures": ["RwkvForCausalLM"], "model_type": "rwkv", "vocab_size": V, "hidden_size": H,
           "num_hidden_layers": L, "attention_hidden_size": A, "intermediate_size": I,
           "layer_norm_epsilon": 1e-5, "rescale_every": 6, "bos_token_id": 0, "eos_token_id": 0,
           "tie_word_embeddings": False, "context_length": 1024}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    write_safetensors(os.path.join(path, "model.safetensors"), t)
    return V, tv


# ---- a client ------------------------------------------------------------------

def connect(srv):
    """A daemon_harness Client of srv whose reads may wait 120 s (times SLOW)."""
    return Client(srv.sock, timeout=120)


def wait(c, rid):
    """Request rid's token events (a list of bytes, one per token) and its final event."""
    toks = []
    return toks, c.final(rid, toks)


def call(c, op, **fields):
    return wait(c, c.send(op, **fields))


# ---- setup -------------------------------------------------------------------------

# The merges are learned from this file's own text (English comments and
# code): the model changes only when this test does (it used README.md,
# whose every edit moved where greedy decoding met the end token).
with open(os.path.abspath(__file__), encoding="utf-8") as f:
    CORPUS = f.read()
MODEL = os.path.join(TMP, "model")
VOCAB, TOK_VOCAB = write_model(MODEL, CORPUS)

# The text of the split cases: English prose (merged into long tokens), a
# few multi-byte UTF-8 characters, digits, punctuation and odd spacing.
TEXT = ("The recurrent state of a session is a constant size whatever the length of the stream, "
        "so the daemon keeps thousands of them resident and saves each one after every turn. "
        "Café, naïve, Ωmega — “quoted” 12345 tokens;  two  spaces\tand a tab.\n"
        "A second paragraph: the model reads the whole text, then it generates.").encode()
# No seed: a fresh session's sampler starts from seed 0 either way, and a
# seed would clear the repetition window (docs/PROTOCOL.md), which holds the
# prompt's token ids (over 255 here) and is saved with the state.
GEN = dict(max_tokens=40, temperature=0.9, top_k=VOCAB, top_p=0.95, repetition_penalty=1.3,
           repetition_window=200)

srv = Server("a", ["--max-tokens", "100000"], model=MODEL).start()


@case
def hello_reports_tokenizer():
    c = connect(srv)
    _, r = call(c, "hello")
    m = r["model"]
    expect(m["vocab"] == VOCAB and m["tokenizer"] == "bpe" and m["weights"] == "f32", m)
    c.close()
    # --dtype bf16 keeps the matrix weights in bf16: another fingerprint (a
    # state is tied to the precision that made it), and still a working model
    half = Server("bf16", ["--dtype", "bf16"], model=MODEL).start()
    c = connect(half)
    _, h = call(c, "hello")
    toks, done = call(c, "generate", session="h", text=TEXT, max_tokens=10, temperature=0)
    c.close()
    half.stop()
    expect(h["model"]["weights"] == "bf16" and h["model"]["fingerprint"] != m["fingerprint"], h["model"])
    expect(done["event"] == "done" and done["tokens_out"] == 10 == len(toks), done)


def tokenize(text):
    """The token ids of text by `lind tokenize` with the model's tokenizer.json."""
    path = os.path.join(TMP, "tokenize.txt")
    with open(path, "wb") as f:
        f.write(text)
    p = subprocess.run([LIND, "tokenize", "--tokenizer", "bpe:" + os.path.join(MODEL, "tokenizer.json"), path],
                       capture_output=True, timeout=60 * SLOW)
    expect(p.returncode == 0, p.stderr)
    return [int(x) for x in p.stdout.split()]


def whole(c, name, text=TEXT, **gen):
    toks, done = call(c, "generate", session=name, text=text, **(gen or GEN))
    expect(done["event"] == "done", done)
    return toks, done


@case
def tokens_are_multi_byte_and_join_to_the_offline_text():
    c = connect(srv)
    # past the end token: 60 tokens whatever the random model does
    toks, done = whole(c, "mb", max_tokens=60, temperature=0, ignore_eos=True)
    expect(done["tokens_out"] == len(toks) == 60, (done, len(toks)))
    expect(max(len(t) for t in toks) >= 2, "every token was one byte: %r" % toks[:20])
    # tokens_in counts the text's tokens (fewer than its bytes)
    expect(done["tokens_in"] == len(tokenize(TEXT)) < len(TEXT) * 0.8, (done["tokens_in"], len(TEXT)))
    p = subprocess.run([LIND, "generate", "--model", MODEL, "--backend", "cpu", "--prompt", TEXT.decode(),
                        "-n", "60", "--temperature", "0", "--ignore-eos"], capture_output=True, timeout=120 * SLOW)
    expect(p.returncode == 0, p.stderr)
    expect(p.stdout == TEXT + b"".join(toks) + b"\n", "offline %r vs daemon %r" % (p.stdout[len(TEXT):],
                                                                                 b"".join(toks)))
    _, info = call(c, "info", session="mb")
    out = [e["text"] for e in info["transcript"] if e["role"] == "out"]
    expect(out == [b"".join(toks)], (out, b"".join(toks)))
    c.close()


@case
def offline_score_is_bits_per_byte_over_tokens():
    # lind score on an HF RWKV-4 model: no BOS (its tokenizer.json adds
    # nothing), so the text's first token is fed unscored and its bits/byte
    # is the other tokens' total -log2 p over their bytes. Recomputed here
    # from `lind logits`.
    ids = tokenize(TEXT)
    tpath, lpath, xpath = (os.path.join(TMP, n) for n in ("score.i32", "score.f32", "score.txt"))
    np.array(ids, dtype="<i4").tofile(tpath)
    with open(xpath, "wb") as f:
        f.write(TEXT)
    p = subprocess.run([LIND, "logits", "--model", MODEL, "--backend", "cpu", "--tokens", tpath, "--out", lpath],
                       capture_output=True, timeout=120 * SLOW)
    expect(p.returncode == 0, p.stderr)
    lg = np.fromfile(lpath, dtype="<f4").astype(np.float64).reshape(len(ids), VOCAB)
    mx = lg.max(1, keepdims=True)
    logp = lg - mx - np.log(np.exp(lg - mx).sum(1, keepdims=True))
    bits = -logp[np.arange(len(ids) - 1), ids[1:]].sum() / np.log(2)
    ipath = os.path.join(TMP, "first.txt")
    with open(ipath, "w") as f:
        f.write(str(ids[0]))
    p = subprocess.run([LIND, "tokenize", "--tokenizer", "bpe:" + os.path.join(MODEL, "tokenizer.json"), "--decode",
                        ipath], capture_output=True, timeout=60)
    first = len(p.stdout)
    p = subprocess.run([LIND, "score", "--model", MODEL, "--backend", "cpu", xpath], capture_output=True,
                       timeout=120 * SLOW, text=True)
    expect(p.returncode == 0, p.stderr)
    got = dict(line.split(": ", 1) for line in p.stdout.splitlines())
    expect(got["tokens"].startswith("%d (bpe" % len(ids)), got)
    expect(got["unscored"].startswith("1 tokens, %d bytes" % first), got)
    bpb, want = float(got["bits_per_byte"]), bits / (len(TEXT) - first)
    expect(abs(bpb - want) < 1e-5 * bpb, "score %.6f vs %.6f from logits" % (bpb, want))


def split_run(name, cuts, restarts):
    """Append TEXT in pieces cut at `cuts`, restarting the server (by the
    signal in restarts[i]) after piece i when given, then generate."""
    c = connect(srv)
    pieces = [TEXT[a:b] for a, b in zip([0] + cuts, cuts + [len(TEXT)])]
    tokens_in = 0
    for i, p in enumerate(pieces):
        _, r = call(c, "append", session=name, text=p)
        expect(r["event"] == "result", r)
        if i in restarts:
            c.close()
            srv.stop(restarts[i])
            srv.start()
            c = connect(srv)
    toks, done = call(c, "generate", session=name, text=b"", **GEN)
    c.close()
    return toks, done


@case
def split_appends_with_restarts_equal_one_generate():
    c = connect(srv)
    ref, rdone = whole(c, "whole")
    c.close()
    rnd = random.Random(7)
    for trial in range(4 if not SANITIZED else 2):
        k = rnd.randint(1, 12)
        cuts = sorted(rnd.sample(range(1, len(TEXT)), k))
        # cut inside a multi-byte character at least once
        if trial == 0:
            cuts = sorted(set(cuts + [TEXT.index("é".encode()) + 1, TEXT.index("Ω".encode()) + 1]))
        restarts = {}   # trial 0 without restarts: the tail kept in memory
        for i in rnd.sample(range(len(cuts) + 1), min(2, len(cuts) + 1)) if trial else []:
            restarts[i] = signal.SIGKILL if rnd.random() < 0.5 else signal.SIGTERM
        toks, done = split_run("split-%d" % trial, cuts, restarts)
        expect(b"".join(toks) == b"".join(ref), "trial %d cuts %r restarts %r: %r vs %r" % (
            trial, cuts, restarts, b"".join(toks), b"".join(ref)))
        expect([len(t) for t in toks] == [len(t) for t in ref], "token boundaries differ")
        expect(done["session_tokens"] == rdone["session_tokens"], (done, rdone))


@case
def appends_hold_back_an_undecided_tail():
    # After "The daemon reads" the word may go on ("readside"): the append
    # feeds "The daemon" and keeps " reads" back, so the session holds the
    # tokens of "The daemon" (the last of them pending; no BOS: an HF RWKV-4
    # model feeds the text alone).
    c = connect(srv)
    _, r1 = call(c, "append", session="tail", text=b"The daemon reads")
    expect(r1["session_tokens"] == len(tokenize(b"The daemon")), (r1, tokenize(b"The daemon")))
    _, r2 = call(c, "append", session="tail", text=b"ide")
    toks, d = call(c, "generate", session="tail", text=b" the text", max_tokens=5, temperature=0)
    whole_text = b"The daemon readside the text"
    wt, w = call(c, "generate", session="tail-whole", text=whole_text, max_tokens=5, temperature=0)
    expect(toks == wt and d["session_tokens"] == w["session_tokens"], (r2, d, w))
    expect(w["tokens_in"] == len(tokenize(whole_text)) and w["session_tokens"] == w["tokens_in"] + 5, w)
    c.close()


@case
def cancel_mid_text_keeps_the_acknowledged_tail():
    # The tail " reads" an append held back was acknowledged: a cancel of the
    # next (long) append, arriving before any of it is fed, still feeds it.
    # The session then holds the first tokens_in tokens of " reads" + text
    # (fed_bytes of the text), nothing after.
    c = connect(srv)
    _, r1 = call(c, "append", session="cut", text=b"The daemon reads")
    reads = len(tokenize(b" reads and"))
    rid = c.send("append", session="cut", text=b" and " + TEXT * 3000)
    c.send("cancel", target=rid)
    _, r2 = wait(c, rid)
    expect(r2["event"] == "result" and r2["cancelled"], r2)
    expect(r2["tokens_in"] >= reads - 1 and r2["session_tokens"] == r1["session_tokens"] + r2["tokens_in"],
           (r1, r2, reads))
    expect(r2["fed_bytes"] < len(TEXT), r2)
    # The session's tokens are those of the acknowledged bytes: where the cut
    # is at a word boundary (the usual case: the cancel came with the append),
    # feeding the same bytes to a fresh session gives the same stream length.
    full = b"The daemon reads" + b" and " + TEXT * 3000
    cut = len(b"The daemon reads") + r2["fed_bytes"]
    if full[cut:cut + 1] in (b" ", b"\n"):
        _, w = call(c, "generate", session="cut-whole", text=full[:cut], max_tokens=0)
        _, d = call(c, "generate", session="cut", max_tokens=0)
        expect(d["session_tokens"] == w["session_tokens"], (d, w, full[cut - 20:cut]))
    c.close()


@case
def stop_strings_across_and_inside_tokens():
    c = connect(srv)
    ref, _ = whole(c, "stop-ref", max_tokens=80, temperature=0)
    out = b"".join(ref)
    ends = np.cumsum([len(t) for t in ref])
    # a stop string across the boundary of two tokens: the last byte of one
    # token and the first of the next, at its first occurrence
    found = 0
    for i in range(1, len(ref)):
        if not ref[i - 1] or not ref[i]:
            continue
        s = ref[i - 1][-1:] + ref[i][:2]
        first = out.find(s)
        if not first < ends[i - 1] < first + len(s):
            continue   # its first occurrence does not span this boundary
        n_tok = int(np.searchsorted(ends, first + len(s) - 1, side="right")) + 1
        toks, done = call(c, "generate", session="stop-a-%d" % i, text=TEXT, max_tokens=80, temperature=0,
                            stop=[s])
        expect(done["reason"] == "stop" and done["stop"] == s, done)
        expect(toks == ref[:n_tok], "stop %r: %d tokens, want %d" % (s, len(toks), n_tok))
        found += 1
        if found == 2:
            break
    expect(found, "no token boundary to test in %r" % ref)
    # a stop string strictly inside one multi-byte token ends the turn after that token
    inside = 0
    for i, t in enumerate(ref):
        if len(t) >= 3 and out.find(t[1:-1]) == ends[i] - len(t) + 1:
            toks, done = call(c, "generate", session="stop-in", text=TEXT, max_tokens=80, temperature=0,
                                stop=[t[1:-1]])
            expect(done["reason"] == "stop" and toks == ref[:i + 1], (done, toks, ref[:i + 1]))
            inside = 1
            break
    expect(inside, "no token of 3+ bytes whose middle first occurs inside it: %r" % ref)
    c.close()


@case
def resume_after_restart_is_byte_identical():
    c = connect(srv)
    a1, _ = call(c, "generate", session="res-a", text=TEXT, max_tokens=30, temperature=0.8, seed=3)
    b1, _ = call(c, "generate", session="res-b", text=TEXT, max_tokens=30, temperature=0.8, seed=3)
    b2, bd = call(c, "generate", session="res-b", text=b" and more", max_tokens=30, temperature=0.8)
    c.close()
    srv.stop(signal.SIGKILL)
    srv.start()
    c = connect(srv)
    a2, ad = call(c, "generate", session="res-a", text=b" and more", max_tokens=30, temperature=0.8)
    expect(a1 == b1 and a2 == b2, "%r vs %r" % (b"".join(a2), b"".join(b2)))
    expect(ad["session_tokens"] == bd["session_tokens"], (ad, bd))
    c.close()


def requests(n_long, n_short):
    """Long prompts (generating a little) and short prompts generating much."""
    rnd = random.Random(5)
    words = CORPUS.split()
    reqs = []
    for i in range(n_long):
        start = rnd.randrange(len(words) - 400)
        txt = " ".join(words[start:start + rnd.randint(150, 400)]).encode()
        reqs.append(("long-%d" % i, dict(text=txt, max_tokens=8, temperature=0.7, seed=i)))
    for i in range(n_short):
        reqs.append(("short-%d" % i, dict(text=b"Hello there", max_tokens=120, temperature=0.7, seed=100 + i)))
    return reqs


@case
def batched_prefill_mixed_with_decode_equals_one_at_a_time():
    reqs = requests(4, 4) if not SANITIZED else requests(2, 2)
    results = {}
    # alone: one request at a time, token by token prompts (--prompt-chunk 1)
    one = Server("one", ["--prompt-chunk", "1"], model=MODEL).start()
    c = connect(one)
    for name, r in reqs:
        results[name] = call(c, "generate", session=name, **r)[0]
    c.close()
    one.stop()
    for chunk in ("7", "64"):
        many = Server("many-" + chunk, ["--prompt-chunk", chunk], model=MODEL).start()
        got = {}
        # every request pipelined on one connection, the short ones first, so
        # their decoding overlaps the long prompts however fast a step is
        cl = connect(many)
        ids = [(name, cl.send("generate", session=name, **r)) for name, r in reqs[::-1]]
        for name, rid in ids:
            got[name] = wait(cl, rid)[0]
        cl.close()
        _, st = call(connect(many), "stats")
        many.stop()
        for name, _ in reqs:
            expect(got.get(name) == results[name], "--prompt-chunk %s: %s differs: %r vs %r" % (
                chunk, name, b"".join(got.get(name) or []), b"".join(results[name])))
        # the sessions really shared steps (prefill beside decode)
        expect(any(k != "1" for k in st["batch_hist"]), st["batch_hist"])


try:
    srv.stop()   # raises unless the exit status is 0
    print("PASS final_shutdown")
except Exception as e:
    print("FAIL final_shutdown: %r" % e)
    dh.failures += 1
if dh.failures:
    print("server log tail:\n" + srv.log())
    sys.exit(1)
shutil.rmtree(TMP, ignore_errors=True)
sys.exit(0)
