"""tests/test_daemon_cancel.py — stopping turns promptly (issue 14, "Cancel
and shutdown wait for the whole prompt", "A long prompt cannot be stopped from
outside"):

  - a cancel in the middle of a long append ends it at the next token
    boundary; the result says how much of the text the session holds
    (fed_bytes, tokens_in), and the session then equals one fed exactly that
    prefix (same stream length, transcript and continuation);
  - the same for a generate (done reason `cancelled`, fed_bytes);
  - `cancel` by session name from another connection stops the turn;
  - a client that sends a long text and disconnects leaves the compute
    thread idle at once (stats tokens_in stops growing);
  - SIGTERM and SIGINT under load (connections feeding long texts) exit
    within 2 s plus the final commit, and every session holds what its
    answer acknowledged after a restart.

Runs the daemon from $LIND_BUILD (default build) on the shipped model
(`bytes` tokenizer: a token is a byte).
"""
import re
import signal
import subprocess
import time

from daemon_harness import Server, Client, case, expect, text_of, finish, LINDCTL, SLOW

BIG = text_of(400_000)


def wait_fed(c, least, timeout=30):
    """Poll stats until `least` more tokens than at the call went through the model."""
    base = c.call("stats")["tokens_in"]
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        ev = c.call("stats")
        if ev.get("tokens_in", 0) >= base + least:
            return
        time.sleep(0.05)
    raise AssertionError("the prompt did not start feeding")


def same_as_prefix(c, a, fed, tag):
    """Session a (cut after `fed` bytes of BIG) equals a session fed exactly
    BIG[:fed]: stream length, transcript, and a greedy continuation."""
    b = "prefix-" + tag
    ev = c.call("append", session=b, text=BIG[:fed])
    expect(ev["event"] == "result" and ev["fed_bytes"] == fed and not ev["cancelled"], "prefix: %r" % ev)
    ia, ib = c.call("info", session=a), c.call("info", session=b)
    expect(ia["tokens"] == ib["tokens"] == fed + 1, "stream lengths %r %r (fed %d)" % (ia["tokens"], ib["tokens"], fed))
    expect(ia["transcript"] == ib["transcript"], "transcripts differ")
    outs = []
    for name in (a, b):
        toks = []
        ev = c.final(c.send("generate", session=name, text=b" and then", max_tokens=24, temperature=0), toks)
        expect(ev["event"] == "done" and ev["reason"] == "length", "generate on %s: %r" % (name, ev))
        outs.append(b"".join(toks))
    expect(outs[0] == outs[1], "continuations differ: %r vs %r" % tuple(outs))


@case
def cancel_mid_append_stops_at_token_boundary():
    s = Server("append", extra=["--prompt-chunk", "16"]).start()
    try:
        c = Client(s.sock)
        rid = c.send("append", session="a", text=BIG)
        wait_fed(c, 200)
        t0 = time.time()
        ev = c.call("cancel", target=rid)
        expect(ev["event"] == "result" and ev["cancelled"], "cancel: %r" % ev)
        ev = c.final(rid)
        took = time.time() - t0
        expect(ev["event"] == "result" and ev["cancelled"], "append result: %r" % ev)
        fed = ev["fed_bytes"]
        expect(0 < fed < len(BIG), "fed_bytes %d of %d" % (fed, len(BIG)))
        expect(ev["tokens_in"] == fed and ev["session_tokens"] == fed + 1, "counts: %r" % ev)
        expect(took < 2.0 * SLOW, "the append took %.2f s to stop" % took)
        same_as_prefix(c, "a", fed, "a")
        c.close()
    finally:
        s.stop()


@case
def cancel_mid_generate_prompt():
    s = Server("generate", extra=["--prompt-chunk", "16"]).start()
    try:
        c = Client(s.sock)
        ev = c.call("append", session="g", text=b"Once upon")   # a session with history
        rid = c.send("generate", session="g", text=BIG, max_tokens=10)
        wait_fed(c, 300)
        c.call("cancel", target=rid)
        toks = []
        ev = c.final(rid, toks)
        expect(ev["event"] == "done" and ev["reason"] == "cancelled" and ev["tokens_out"] == 0 and not toks,
               "done: %r" % ev)
        fed = ev["fed_bytes"]
        expect(0 < fed < len(BIG) and ev["tokens_in"] == fed, "fed: %r" % ev)
        expect(ev["session_tokens"] == 1 + 9 + fed, "session_tokens: %r" % ev)
        c.close()
    finally:
        s.stop()


@case
def cancel_by_session_name_from_another_connection():
    s = Server("byname").start()
    try:
        a, b = Client(s.sock), Client(s.sock)
        rid = a.send("append", session="long", text=BIG)
        wait_fed(b, 200)
        ev = b.call("cancel", session="long")
        expect(ev["event"] == "result" and ev["cancelled"] is True, "cancel by name: %r" % ev)
        ev = a.final(rid)
        expect(ev["event"] == "result" and ev["cancelled"] and ev["fed_bytes"] < len(BIG), "append: %r" % ev)
        ev = b.call("cancel", session="long")
        expect(ev["event"] == "result" and ev["cancelled"] is False, "nothing left to cancel: %r" % ev)
        ev = b.call("cancel", session="nobody")
        expect(ev["event"] == "result" and ev["cancelled"] is False, "unknown session: %r" % ev)
        ev = b.call("cancel", session="long", target=3)
        expect(ev["event"] == "error" and ev["code"] == "bad_request", "both fields: %r" % ev)
        ev = b.call("cancel")
        expect(ev["event"] == "error" and ev["code"] == "bad_request" and "target" in ev["message"],
               "no field: %r" % ev)
        a.close()
        b.close()
    finally:
        s.stop()


@case
def lindctl_cancel_by_name():
    s = Server("lindctl").start()
    try:
        a = Client(s.sock)
        rid = a.send("append", session="chat one", text=BIG)
        wait_fed(a, 200)
        r = subprocess.run([LINDCTL, "--socket", s.sock, "cancel", "chat one"], capture_output=True, timeout=30 * SLOW)
        expect(r.returncode == 0 and b"cancelled" in r.stdout, "lindctl cancel: %r" % (r,))
        ev = a.final(rid)
        expect(ev["event"] == "result" and ev["cancelled"], "append: %r" % ev)
        r = subprocess.run([LINDCTL, "--socket", s.sock, "cancel", "chat one"], capture_output=True, timeout=30 * SLOW)
        expect(r.returncode == 6 and b"no turn in flight" in r.stderr, "nothing to cancel: %r" % (r,))
        a.close()
    finally:
        s.stop()


@case
def lindctl_generate_ctrl_c_mid_prompt():
    s = Server("ctrlc").start()
    try:
        w = Client(s.sock)
        p = subprocess.Popen([LINDCTL, "--socket", s.sock, "generate", "--seed", "1", "long", "-"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(BIG)
        p.stdin.close()
        wait_fed(w, 200)
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30 * SLOW)
        err = p.stderr.read()
        took = time.time() - t0
        expect(p.returncode == 130, "exit %r: %r" % (p.returncode, err))
        m = re.search(rb"cancelled after (\d+) of %d bytes; the session holds them" % len(BIG), err)
        expect(b"cancelling" in err and m, "stderr: %r" % err)
        expect(took < 2.0 * SLOW, "Ctrl-C took %.2f s" % took)
        fed = int(m.group(1))
        info = w.call("info", session="long")
        expect(info["tokens"] == fed + 1, "the session holds %r tokens, lindctl said %d bytes" % (info["tokens"], fed))
        w.close()
    finally:
        s.stop()


@case
def disconnect_mid_prompt_stops_compute():
    s = Server("disconnect").start()
    try:
        c = Client(s.sock)
        for i in range(3):
            d = Client(s.sock)
            d.send("append", session="gone%d" % i, text=BIG)
            wait_fed(c, 100)
            d.close()
        # Feeding stops at the next token boundary after each close: wait (with a
        # deadline far below the time the three whole texts would take) until
        # tokens_in holds still for a second.
        deadline = time.time() + 20 * SLOW
        n1 = c.call("stats")["tokens_in"]
        while True:
            time.sleep(1.0)
            n2 = c.call("stats")["tokens_in"]
            if n2 == n1 or time.time() > deadline:
                break
            n1 = n2
        expect(n2 == n1, "the compute thread went on feeding for nobody: %d -> %d tokens" % (n1, n2))
        for i in range(3):   # each holds a prefix of what was sent, and is usable
            info = c.call("info", session="gone%d" % i)
            expect(info["event"] == "result" and 1 < info["tokens"] < len(BIG), "gone%d: %r" % (i, info))
        c.close()
    finally:
        s.stop()


def stop_under_load(sig, name):
    s = Server(name, extra=["--prompt-chunk", "16"]).start()
    clients, rids = [], []
    for i in range(6):
        c = Client(s.sock)
        rids.append(c.send("append", session="s%d" % i, text=BIG))
        clients.append(c)
    w = Client(s.sock)
    wait_fed(w, 1000)
    time.sleep(1.0)
    took = s.stop(sig)
    print("NOTE %s exit under load (6 x 400 KB appends): %.2f s" % (name, took), flush=True)
    expect(took < (2.0 + 1.0) * SLOW, "the server took %.2f s to exit" % took)
    acked = {}
    for i, c in enumerate(clients):
        ev = c.final(rids[i])
        expect(ev["event"] == "result" and ev["cancelled"] and ev["fed_bytes"] < len(BIG), "s%d: %r" % (i, ev))
        acked["s%d" % i] = ev["session_tokens"]
        c.close()
    s.start()
    c = Client(s.sock)
    for name_, n in acked.items():
        info = c.call("info", session=name_)
        expect(info["tokens"] == n, "%s holds %r tokens, its answer said %d" % (name_, info.get("tokens"), n))
    c.close()
    s.stop()


@case
def sigterm_under_load_exits_promptly():
    stop_under_load(signal.SIGTERM, "sigterm")


@case
def sigint_under_load_exits_promptly():
    stop_under_load(signal.SIGINT, "sigint")


finish()
