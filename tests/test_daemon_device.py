"""tests/test_daemon_device.py — `lind serve` when the numbers or the device
go wrong (issue 14, "Hardening the daemon"):

  - a session whose turn makes a key overflow to +inf (a model whose
    weights do that for one byte) gets `bad_state` at that step, naming the
    non-finite value, with no token streamed after it; the session stays at
    its last committed turn (the next turn continues from it, exactly as a
    fresh session fed the same committed text does), and a session stepped
    in the same batch is unaffected;
  - a lost device (the CUDA backend's code on the host harness with a
    simulated sticky error, LIND_HARNESS_FAULT): the turn in flight and every
    later request of the compute thread get `unavailable` naming the CUDA
    error, the daemon logs it once, and the store-only requests (list,
    export, stats) still work.

Runs the daemon from $LIND_BUILD (default build) on the shipped model.
"""
import json
import os
import shutil
import struct
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, case, expect, finish, MODEL, TMP, SLOW  # noqa: E402


failures = 0


def case(fn):
    global failures
    try:
        fn()
        print("PASS", fn.__name__, flush=True)
    except Exception as e:
        failures += 1
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print("FAIL %s: %s (line %d)" % (fn.__name__, repr(e)[:600], tb.lineno), flush=True)
    return fn


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


SPIKE = ord("~")


def overflow_model():
    """models/default with one change: byte '~' is a one-hot embedding, and
    the first AFT layer's key for channel 0 reads that one coordinate with a
    weight of 3e37. LayerNorm puts a one-hot coordinate at about
    sqrt(d) = 13.8, so '~' makes that key overflow to +inf while every other
    byte (coordinates of a few units) keeps it finite."""
    d = os.path.join(TMP, "overflow-model")
    shutil.copytree(MODEL, d)
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    n = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + n])
    base = 8 + n
    cfg = json.load(open(os.path.join(d, "config.json")))
    layer = cfg["mixers"].index("aft")

    def tensor(name):
        t = hdr[name]
        a, b = t["data_offsets"]
        return np.frombuffer(blob, dtype=np.float32, count=(b - a) // 4, offset=base + a).reshape(t["shape"]).copy()

    def put(name, arr):
        a, _ = hdr[name]["data_offsets"]
        blob[base + a:base + a + arr.nbytes] = arr.astype(np.float32).tobytes()

    E = tensor("embed.weight")
    E[SPIKE] = 0
    E[SPIKE, 0] = 50
    put("embed.weight", E)
    pre = "layers.%d." % layer
    for name, val in (("ln1.weight", 1.0), ("ln1.bias", 0.0), ("mixer.mu_k", 1.0)):
        v = tensor(pre + name)
        v[0] = val
        put(pre + name, v)
    wk = tensor(pre + "mixer.wk")
    wk[0] = 0
    wk[0, 0] = 3e37
    put(pre + "mixer.wk", wk)
    with open(path, "wb") as f:
        f.write(blob)
    return d


def tokens(c, rid):
    """(events before the final one, the final one) of request rid."""
    got, held = [], []
    while True:
        ev = c.event()
        if ev is None:
            raise EOFError("closed while waiting for %d" % rid)
        if ev["id"] != rid:
            held.append(ev)
            continue
        if ev["event"] in ("result", "done", "error"):
            c.pending = held + c.pending
            return got, ev
        got.append(ev)


@case
def overflowing_key_fails_that_turn_only():
    srv = Server("overflow", model=overflow_model()).start()
    try:
        c = Client(srv.sock)
        ev = c.call("generate", session="a", text="hello there", max_tokens=0)
        expect(ev["event"] == "done", "a's first turn: %r" % ev)
        committed = ev["session_tokens"]
        # the bad turn and a good session in flight together
        rb = c.send("generate", session="b", text="a good session", max_tokens=8, temperature=0)
        ra = c.send("generate", session="a", text=" a~b", max_tokens=8, temperature=0)
        evs_a, fa = tokens(c, ra)
        evs_b, fb = tokens(c, rb)
        expect(fa["event"] == "error" and fa["code"] == "bad_state", "the overflowing turn ended with %r" % fa)
        expect("non-finite" in fa["message"] and "last committed turn" in fa["message"],
               "its message: %r" % fa["message"])
        expect(not [e for e in evs_a if e["event"] == "token"], "tokens streamed after the overflow: %r" % evs_a)
        expect(fb["event"] == "done" and fb["tokens_out"] == 8, "the session beside it: %r" % fb)
        # a resumes from its commit: it continues exactly as a fresh session
        # fed the committed text does (greedy sampling)
        def turn(sess, text):
            evs, fin = tokens(c, c.send("generate", session=sess, text=text, max_tokens=6, temperature=0))
            expect(fin["event"] == "done", "%s: %r" % (sess, fin))
            return [{k: v for k, v in e.items() if k != "id"} for e in evs if e["event"] == "token"], fin
        out_a, fin = turn("a", " again")
        expect(fin["session_tokens"] == committed + len(" again") + 6,
               "a after the failure: %r (committed %d)" % (fin, committed))
        ev = c.call("generate", session="c", text="hello there", max_tokens=0)
        expect(ev["event"] == "done", "fresh session: %r" % ev)
        out_c, _ = turn("c", " again")
        expect(len(out_a) == 6 and out_a == out_c, "a after the failure %r vs a fresh session %r" % (out_a, out_c))
        c.close()
    finally:
        srv.stop()


@case
def lost_device_answers_unavailable():
    srv = Server("lost", backend="harness", env={"LIND_HARNESS_FAULT": "40"}).start(timeout=120)
    try:
        c = Client(srv.sock)
        ev = c.call("generate", session="x", text="hello", max_tokens=200, temperature=0)
        expect(ev["event"] == "error" and ev["code"] == "unavailable", "the turn in flight: %r" % ev)
        expect("cudaErrorIllegalAddress" in ev["message"], "its message: %r" % ev["message"])
        for op, f in (("generate", {"session": "y", "text": "hi"}), ("append", {"session": "x", "text": "hi"}),
                      ("info", {"session": "x"}), ("fork", {"session": "x", "to": "z"})):
            ev = c.call(op, **f)
            expect(ev["event"] == "error" and ev["code"] == "unavailable", "%s after the loss: %r" % (op, ev))
            expect("cudaErrorIllegalAddress" in ev["message"] and "restart" in ev["message"],
                   "%s: message %r" % (op, ev["message"]))
        # the store still answers what needs no device: committed sessions can be saved elsewhere
        ev = c.call("list")
        expect(ev["event"] == "result", "list after the loss: %r" % ev)
        c.close()
        # The failure is logged by the compute thread: wait for the line.
        deadline = time.time() + 30 * SLOW
        while "the compute device failed" not in srv.log() and time.time() < deadline:
            time.sleep(0.05)
        log = srv.log()
        expect(log.count("the compute device failed") == 1 and "cudaErrorIllegalAddress" in log,
               "the daemon's log: %r" % log)
    finally:
        srv.stop()


finish()
