#!/usr/bin/python3
"""tests/test_daemon_eos.py — a model's BOS and end-of-text conventions,
through `lind serve` (socket and HTTP), `lind generate` and `lindctl`.

The model is the RWKV-4 fixture in Hugging Face's layout
(tests/fixtures/rwkv4/a_f32/model, copied): its files say no BOS (ByteLevel
post_processor) and eos_token_id 0. Its greedy continuation of a prompt is
computed independently with `lind logits` (a fresh state, nothing prepended:
the HF convention), token by token, and its end token is then set, through a
generation_config.json, to the first greedy token from the third on not
seen before it, at position k. So greedy generation must:

  * send exactly the k tokens before it, then `done` with reason "stop" and
    stop_token = that id (the end token never sent as text), tokens_out
    k + 1, session_tokens = prompt + k + 1 (no BOS fed);
  * with ignore_eos (the request's field, or `lind serve --ignore-eos`
    unless the request says false) go on to max_tokens, the end token's text
    sent like any other;
  * with `lind serve --bos`, hold one token more (BOS fed first);
  * over HTTP, end with finish_reason "stop" and the same text, and go on
    with "ignore_eos": true;
  * the same from `lind generate` (and its --ignore-eos) and from
    `lindctl generate` (and its --ignore-eos)."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Offline, Server, run_tool, case, expect, finish, TMP, LIND, LINDCTL, ROOT, SLOW, http_port  # noqa: E402

SRC = os.path.join(ROOT, "tests", "fixtures", "rwkv4", "a_f32", "model")
MODEL = os.path.join(TMP, "model")
PROMPT = b"the quick brown fox"
N = 12


shutil.copytree(SRC, MODEL)
OFF = Offline(MODEL)
P = OFF.tokenize(PROMPT)
G = OFF.greedy(P, N)
K = next((k for k in range(2, N) if G[k] not in G[:k]), None)   # at least two tokens before it
if K is None:
    print("FAIL setup: the fixture's greedy continuation repeats one token: %r" % G)
    sys.exit(1)
EOS = G[K]
with open(os.path.join(MODEL, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": EOS}, f)
BEFORE = OFF.decode(G[:K])
print("NOTE prompt %d tokens, greedy %r, end token %d at %d" % (len(P), G, EOS, K))

S = Server("eos", model=MODEL, extra=["--http", "0"]).start()
SI = Server("eos-ignore", model=MODEL, extra=["--ignore-eos"]).start()
SB = Server("eos-bos", model=MODEL, extra=["--bos"]).start()
C, CI, CB = Client(S.sock), Client(SI.sock), Client(SB.sock)


def gen(c, session, **f):
    toks = []
    done = c.final(c.send("generate", session=session, text=PROMPT, max_tokens=N, temperature=0.0, **f), toks)
    return toks, done


@case
def eos_ends_the_turn():
    toks, done = gen(C, "a")
    expect(done["event"] == "done" and done["reason"] == "stop", "done %r" % done)
    expect(done.get("stop_token") == EOS and "stop" not in done, "stop_token %r" % done)
    expect(len(toks) == K and b"".join(toks) == BEFORE, "tokens %r, want the %d before the end token %r"
           % (toks, K, BEFORE))
    expect(done["tokens_out"] == K + 1, "tokens_out %d, want %d (the end token counted)" % (done["tokens_out"], K + 1))
    expect(done["session_tokens"] == len(P) + K + 1, "session_tokens %d, want %d: prompt, output, end token and "
           "no BOS" % (done["session_tokens"], len(P) + K + 1))


@case
def ignore_eos_request_goes_on():
    toks, done = gen(C, "b", ignore_eos=True)
    expect(done["reason"] == "length" and "stop_token" not in done and len(toks) == N, "done %r, %d tokens"
           % (done, len(toks)))
    expect(b"".join(toks) == OFF.decode(G), "tokens %r, want the greedy %r" % (b"".join(toks), OFF.decode(G)))
    expect(toks[K] == OFF.decode([EOS]), "token %d: %r, want the end token's text %r" % (K, toks[K], OFF.decode([EOS])))


@case
def ignore_eos_server_option():
    toks, done = gen(CI, "c")
    expect(done["reason"] == "length" and len(toks) == N, "--ignore-eos: done %r" % done)
    toks, done = gen(CI, "d", ignore_eos=False)
    expect(done["reason"] == "stop" and done.get("stop_token") == EOS and b"".join(toks) == BEFORE,
           "--ignore-eos with ignore_eos false: done %r, %r" % (done, toks))
    r = CI.call("generate", session="e", text=PROMPT, ignore_eos=1)
    expect(r["event"] == "error" and r["code"] == "bad_request" and "ignore_eos" in r["message"],
           "ignore_eos 1: %r" % r)


@case
def bos_option_feeds_bos():
    toks, done = gen(CB, "f", ignore_eos=True)
    expect(done["session_tokens"] == 1 + len(P) + N, "--bos: session_tokens %d, want %d (BOS fed first)"
           % (done["session_tokens"], 1 + len(P) + N))
    expect(b"".join(toks) != OFF.decode(G), "--bos gave the no-BOS continuation (the BOS was not fed?)")


@case
def http_finish_reason():
    port = http_port(S)

    def post(body):
        r = run_tool(["curl", "-s", "-S", "--max-time", str(60 * SLOW), "-H", "Content-Type: application/json",
                 "--data-binary", "@-", "http://127.0.0.1:%d/v1/completions" % port], input=json.dumps(body).encode())
        return json.loads(r.stdout)
    body = {"prompt": PROMPT.decode(), "max_tokens": N, "temperature": 0}
    j = post(body)
    ch = j["choices"][0]
    # JSON text: invalid UTF-8 in the tokens' bytes reads as U+FFFD
    expect(ch["finish_reason"] == "stop" and ch["text"] == BEFORE.decode("utf-8", "replace"), "HTTP: %r" % j)
    expect(j["usage"]["completion_tokens"] == K + 1, "usage %r" % j["usage"])
    j = post(dict(body, ignore_eos=True))
    ch = j["choices"][0]
    expect(ch["finish_reason"] == "length" and j["usage"]["completion_tokens"] == N, "HTTP ignore_eos: %r" % j)
    j = post(dict(body, ignore_eos="yes"))
    expect("error" in j and j["error"].get("param") == "ignore_eos", "ignore_eos \"yes\": %r" % j)


@case
def offline_generate():
    base = [LIND, "generate", "--model", MODEL, "--backend", "cpu", "--prompt", PROMPT.decode(), "-n", str(N),
            "--temperature", "0"]
    r = run_tool(base)
    expect(r.stdout == PROMPT + BEFORE + b"\n", "lind generate: %r" % r.stdout)
    expect(b"[stop: end token %d" % EOS in r.stderr, "no stop note: %r" % r.stderr)
    r = run_tool(base + ["--ignore-eos"])
    expect(r.stdout == PROMPT + OFF.decode(G) + b"\n", "lind generate --ignore-eos: %r" % r.stdout)
    r = run_tool(base + ["--bos", "--ignore-eos"])
    expect(r.stdout != PROMPT + OFF.decode(G) + b"\n", "lind generate --bos: the no-BOS text")


@case
def lindctl_generate():
    base = [LINDCTL, "generate", "--socket", S.sock, "-n", str(N), "-t", "0", "-v"]
    r = run_tool(base + ["g", PROMPT.decode()])
    expect(r.stdout.rstrip(b"\n") == BEFORE.rstrip(b"\n") and b"[stop:" in r.stderr,
           "lindctl: %r %r" % (r.stdout, r.stderr))
    r = run_tool(base + ["--ignore-eos", "h", PROMPT.decode()])
    expect(r.stdout.rstrip(b"\n") == OFF.decode(G).rstrip(b"\n") and b"[length:" in r.stderr,
           "lindctl --ignore-eos: %r %r" % (r.stdout, r.stderr))


for c in (C, CI, CB):
    c.close()
for s in (S, SI, SB):
    s.stop()
finish()
