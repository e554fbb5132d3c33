#!/usr/bin/python3
"""tests/test_daemon_kinds.py — every shipped model, served by the daemon.

For each directory models/*/ holding a config.json (found, not listed: a new
trained kind is tested by being committed), `lind serve --model DIR` must:

  * resume after a restart byte-identically: N tokens generated in one
    session without interruption equal the same N split into two turns with
    a daemon restart between them (SIGTERM for one model in two, SIGKILL for
    the other, alternating), the second turn continuing from the stored state;
  * reproduce a fixed seed: the same prompt and seed in a fresh session give
    the same bytes again;
  * for a model with a maximum length by construction (a linformer's
    max_len, a cosformer's horizon in "horizon" mode): stop a turn at that
    length with `done` reason "max_length" (everything before kept), and
    after a restart end a further turn at once the same way.

Prints one line per model and check."""
import glob
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_harness as dh  # noqa: E402

PROMPT = b"In the beginning"
SEED = 1234
N1, N2 = 30, 40          # tokens before and after the restart
SAMPLING = dict(temperature=0.9, top_k=40, top_p=0.95)


def model_dirs():
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(dh.ROOT, "models", "*", "config.json")))


def max_length(cfg):
    """Tokens a session may hold (BOS included), 0 when unbounded: the
    smallest max_len/horizon of the layers that have one (keys in the layer's
    object or at the top level, as the loader reads them)."""
    layers = cfg.get("layers") or [{"mixer": m} for m in cfg.get("mixers", [])]
    lim = 0
    for ly in layers:
        def key(k, default=None):
            return ly.get(k, cfg.get(k, default))
        n = 0
        if ly.get("mixer") == "linformer":
            n = key("max_len")
        elif ly.get("mixer") == "cosformer" and key("cos_mode", "horizon") == "horizon":
            n = key("horizon")
        if n and (not lim or n < lim):
            lim = n
    return lim


def generate(srv, session, n, **kw):
    c = dh.Client(srv.sock)
    toks = []
    done = c.final(c.send("generate", session=session, max_tokens=n, **kw), toks)
    c.close()
    dh.expect(done.get("event") == "done", "%s: %r" % (session, done))
    return b"".join(toks), done


def check_model(i, path):
    name = os.path.basename(path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    lim = max_length(cfg)
    kill = i % 2 == 1
    srv = dh.Server("kind-" + name, model=path).start()
    try:
        whole, dw = generate(srv, "whole", N1 + N2, text=PROMPT, seed=SEED, **SAMPLING)
        dh.expect(len(whole) > 0 and dw["reason"] == "length" and dw["tokens_out"] == N1 + N2, dw)
        first, d1 = generate(srv, "split", N1, text=PROMPT, seed=SEED, **SAMPLING)
        dh.expect(d1["tokens_out"] == N1, d1)
        if kill:
            _kill(srv)
        else:
            srv.stop()
        srv.start()
        second, d2 = generate(srv, "split", N2, **SAMPLING)
        dh.expect(d2["session_tokens"] == 1 + len(PROMPT) + N1 + N2, d2)
        dh.expect(first + second == whole, "%s: split across a %s restart differs: %r + %r vs %r"
                  % (name, "SIGKILL" if kill else "SIGTERM", first, second, whole))
        again, _ = generate(srv, "again", N1 + N2, text=PROMPT, seed=SEED, **SAMPLING)
        dh.expect(again == whole, "%s: the same seed gave %r, then %r" % (name, whole, again))
        print("PASS %s_resume_after_%s_restart" % (name, "sigkill" if kill else "sigterm"), flush=True)
        if lim:
            check_max_length(srv, name, lim)
    finally:
        if srv.proc:
            srv.stop()


def _kill(srv):
    """SIGKILL: the stored state is whatever the last turn committed."""
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=60 * dh.SLOW)
    srv.proc = None


def check_max_length(srv, name, lim):
    """The session "split" holds 1 + prompt + N1 + N2 tokens; ask for more
    than fit: the turn stops at exactly lim tokens with reason max_length."""
    held = 1 + len(PROMPT) + N1 + N2
    dh.expect(held < lim, "%s: max length %d leaves no room for the check" % (name, lim))
    out, d = generate(srv, "split", lim, **SAMPLING)
    # lim tokens fed, and the last generated one pending (counted, never fed):
    # lim − held + 1 new tokens out
    dh.expect(d["reason"] == "max_length" and d["session_tokens"] == lim + 1, d)
    dh.expect(d["tokens_out"] == lim - held + 1 and len(out) > 0, d)
    srv.stop()
    srv.start()
    out2, d2 = generate(srv, "split", 5, **SAMPLING)
    dh.expect(d2["reason"] == "max_length" and d2["tokens_out"] == 0 and out2 == b"", d2)
    # another session of the same model is unaffected
    fresh, d3 = generate(srv, "fresh", 5, text=PROMPT, seed=SEED, **SAMPLING)
    dh.expect(d3["reason"] == "length" and len(fresh) > 0, d3)
    print("PASS %s_max_length_%d" % (name, lim), flush=True)


def main():
    dirs = model_dirs()
    if not os.path.exists(dh.LIND):
        print("SKIP daemon_kinds: %s not built" % dh.LIND)
        return
    dh.expect(len(dirs) > 0, "no models/*/config.json")
    for i, path in enumerate(dirs):
        try:
            check_model(i, path)
        except Exception as e:  # one line per model, the others still run
            dh.failures += 1
            print("FAIL %s: %s" % (os.path.basename(path), repr(e)[:800]), flush=True)
    dh.finish()


if __name__ == "__main__":
    main()
