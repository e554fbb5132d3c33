#!/usr/bin/python3
"""tests/test_daemon_mamba2.py — a Hugging Face Mamba-2 checkpoint served by
`lind serve`.

The model is the committed fixture tests/fixtures/mamba2/b_bf16/model
(copied): 3 layers, 6 heads in 3 groups, bf16, an untied head, a clamping
time_step_limit, config.json with Python json's layout. Its greedy
continuation of a prompt is computed independently with `lind logits` (a
fresh state, nothing prepended: HF's convention), then through the daemon:

  * one greedy turn sends exactly those tokens' text, session_tokens =
    prompt + output (no BOS);
  * two turns on one session (the state carried between calls, the second
    with no new text) send the same text as one;
  * a session stopped after its first turn, the server restarted (SIGTERM,
    and SIGKILL), goes on from the stored state exactly as the
    uninterrupted one (the state blob round trip of the conv ring, its
    int32 index and S);
  * `info` on the session reports the model's state size as the stored
    session's."""
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Offline, Server, run_tool, case, expect, finish, TMP, LIND, ROOT  # noqa: E402

SRC = os.path.join(ROOT, "tests", "fixtures", "mamba2", "b_bf16", "model")
MODEL = os.path.join(TMP, "model")
PROMPT = b"the state space of the river"
N, N1 = 14, 5


shutil.copytree(SRC, MODEL)
OFF = Offline(MODEL)
P = OFF.tokenize(PROMPT)
G = OFF.greedy(P, N)
WANT = OFF.decode(G)
print("NOTE prompt %d tokens, greedy %r" % (len(P), G))
S = Server("mamba2", model=MODEL).start()


def gen(c, session, n, text=None):
    toks = []
    f = dict(session=session, max_tokens=n, temperature=0.0, ignore_eos=True)
    if text is not None:
        f["text"] = text
    done = c.final(c.send("generate", **f), toks)
    return toks, done


@case
def served_greedy_matches_logits():
    c = Client(S.sock)
    toks, done = gen(c, "one", N, PROMPT)
    c.close()
    expect(done["event"] == "done" and done["reason"] == "length", "done %r" % done)
    expect(b"".join(toks) == WANT, "served %r, want lind logits' greedy %r" % (b"".join(toks), WANT))
    expect(done["session_tokens"] == len(P) + N, "session_tokens %d, want %d (no BOS)"
           % (done["session_tokens"], len(P) + N))


@case
def two_turns_equal_one():
    c = Client(S.sock)
    a, d1 = gen(c, "two", N1, PROMPT)
    b, d2 = gen(c, "two", N - N1)
    c.close()
    expect(d1["event"] == "done" and d2["event"] == "done", "%r %r" % (d1, d2))
    expect(b"".join(a + b) == WANT, "two turns %r, want %r" % (b"".join(a + b), WANT))


def restart(sig, name):
    global S
    c = Client(S.sock)
    a, d1 = gen(c, name, N1, PROMPT)
    c.close()
    expect(d1["event"] == "done", d1)
    S.stop(sig)   # raises unless a SIGTERM stop exits 0
    S.start()
    c = Client(S.sock)
    info = c.call("info", session=name)
    b, d2 = gen(c, name, N - N1)
    c.close()
    expect(info.get("resident") is False, "after the restart the session is stored only: %r" % info)
    expect(d2["event"] == "done" and d2["session_tokens"] == len(P) + N, d2)
    expect(b"".join(a + b) == WANT, "restarted %r, want %r" % (b"".join(a + b), WANT))


@case
def restart_graceful_equals_uninterrupted():
    restart(signal.SIGTERM, "term")


@case
def restart_sigkill_equals_uninterrupted():
    restart(signal.SIGKILL, "kill")


@case
def info_state_bytes():
    out = run_tool([LIND, "info", "--model", MODEL]).stdout.decode()
    # 3 layers × (S 6·8·8 + ring (48 + 2·3·8)·2 + index) × 4 bytes
    want = 3 * (6 * 8 * 8 + (48 + 48) * 2 + 1) * 4
    expect(str(want) in out and "mamba2" in out and "hf-mamba2" in out and "norm:         rms" in out and
           "head:         head.weight" in out, "lind info: %s" % out)


S.stop()
finish()
