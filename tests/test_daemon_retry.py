"""tests/test_daemon_retry.py — exactly-once turns on one `lind serve` with
SQLite (docs/PROTOCOL.md, "Retries"; the PostgreSQL side, with two nodes,
is test_daemon_scale's retry case):

- a generate or append retried with its request_id after its answer
  arrived gets the same answer again (the same token events, then `done`
  with the same fields and `replayed: true`), and the session does not
  move on;
- SIGKILL after the commit, before the client read the answer (it is
  watched from another connection: the session's token count moved on),
  then a restart: the retry gets the committed answer, the turn applied
  once;
- SIGKILL in the middle of a turn (after its first token streamed): the
  turn is lost as a whole, so the retry runs it (once) and a second retry
  replays that;
- a client that disconnects mid-turn: the turn is cancelled and committed
  as far as it went; the retry gets that (reason `cancelled`);
- a request_id reused with other parameters is refused (`bad_request`
  naming it) and nothing runs; bad request ids are refused;
- if_tokens: a count other than the session's is `conflict` naming the
  current one, nothing runs; 0 for a session that does not exist yet;
- the store keeps the results of a session's last 32 turns, no more;
- lindctl generate, whose daemon is SIGKILLed mid-turn and restarted,
  reconnects and sends the turn again with its request id: its output
  and the session equal one uninterrupted run."""
import os
import signal
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, case, expect, finish, wait_working, SANITIZED, SLOW, LINDCTL  # noqa: E402

KEEP = 32   # STORE_TURNS_KEEP (state/store.h)


def turn(c, op, session, text, rid=None, **f):
    """(final event, the token events' bytes) of one generate/append."""
    f = dict(f, session=session, text=text)
    if rid is not None:
        f["request_id"] = rid
    toks = []
    ev = c.final(c.send(op, **f), toks)
    return ev, toks


def same_answer(a, b):
    keys = ("event", "reason", "tokens_in", "tokens_out", "session_tokens", "fed_bytes", "stop",
            "stop_token", "cancelled")
    for k in keys:
        expect(a.get(k) == b.get(k), "field %s: %r first, %r on the retry" % (k, a.get(k), b.get(k)))


def tokens_of(sock, session):
    c = Client(sock)
    try:
        ev = c.call("info", session=session)
        return ev["tokens"] if ev["event"] == "result" else None
    finally:
        c.close()


def committed_tokens(sock, session):
    """The session's token count once no turn is in flight on it (a turn
    is `busy` from its arrival until its commit), else None."""
    c = Client(sock)
    try:
        ev = c.call("info", session=session)
        return ev["tokens"] if ev["event"] == "result" and not ev["busy"] else None
    finally:
        c.close()


def turns_rows(db, session):
    con = sqlite3.connect(db, timeout=30 * SLOW)
    try:
        return con.execute("SELECT count(*) FROM turns WHERE name = ?", (session,)).fetchone()[0]
    finally:
        con.close()


GEN = dict(max_tokens=24, seed=7, temperature=0.9)


@case
def retry_after_done_replays():
    srv = Server("retry-done").start()
    try:
        c = Client(srv.sock)
        first, t1 = turn(c, "generate", "a", b"once upon a time ", "gen-1", **GEN)
        expect(first["event"] == "done" and "replayed" not in first, "first answer: %r" % first)
        again, t2 = turn(c, "generate", "a", b"once upon a time ", "gen-1", **GEN)
        expect(again.get("replayed") is True, "the retry is the recorded answer: %r" % again)
        same_answer(first, again)
        expect(t1 == t2, "the same token events: %r vs %r" % (t1, t2))
        expect(tokens_of(srv.sock, "a") == first["session_tokens"], "the session did not move on")
        # from another connection too, and an append
        c2 = Client(srv.sock)
        a1, _ = turn(c2, "append", "a", b"and then ", "app-1")
        a2, _ = turn(c2, "append", "a", b"and then ", "app-1")
        expect(a1["event"] == "result" and a2.get("replayed") is True, "append replayed: %r %r" % (a1, a2))
        same_answer(a1, a2)
        g3, _ = turn(c, "generate", "a", b"once upon a time ", "gen-1", **GEN)
        expect(g3.get("replayed") is True and g3["session_tokens"] == first["session_tokens"],
               "an older id still replays its own answer: %r" % g3)
        expect(tokens_of(srv.sock, "a") == a1["session_tokens"], "applied once each")
        expect("outcome=replayed" in srv.log(), "the request log says replayed: %r" % srv.log()[-600:])
        c.close()
        c2.close()
    finally:
        srv.stop()


@case
def sigkill_after_commit_then_retry():
    srv = Server("retry-kill-commit").start()
    try:
        c = Client(srv.sock)
        ev, _ = turn(c, "generate", "k", b"the story ", None, max_tokens=4, seed=1)
        before = ev["session_tokens"]
        c.send("generate", session="k", text=b"goes on ", request_id="kc-1", **GEN)
        # Committed: the session's stored count moved on (watched from
        # another connection); this client never reads its answer.
        wait_working(lambda: committed_tokens(srv.sock, "k") not in (None, before), srv.sock,
                     "the turn never committed")
        committed = tokens_of(srv.sock, "k")
        srv.stop(signal.SIGKILL)
        c.close()
        srv.start()
        c = Client(srv.sock)
        again, toks = turn(c, "generate", "k", b"goes on ", "kc-1", **GEN)
        expect(again.get("replayed") is True, "the committed answer: %r" % again)
        expect(again["session_tokens"] == committed, "the answer the commit recorded")
        expect(tokens_of(srv.sock, "k") == committed, "applied exactly once")
        # the replay equals what a fresh run of the same turn produces
        ref, rtoks = turn(c, "generate", "k-ref", b"the story ", None, max_tokens=4, seed=1)
        ref, rtoks = turn(c, "generate", "k-ref", b"goes on ", None, **GEN)
        same_answer(dict(ref, replayed=None), dict(again, replayed=None))
        expect(rtoks == toks, "the replayed tokens are the turn's")
        c.close()
    finally:
        srv.stop()


@case
def sigkill_mid_turn_then_retry():
    srv = Server("retry-kill-mid").start()
    try:
        c = Client(srv.sock)
        ev, _ = turn(c, "generate", "m", b"a long one ", None, max_tokens=2, seed=3)
        before = ev["session_tokens"]
        big = dict(GEN, max_tokens=60000)
        c.send("generate", session="m", text=b"keep going ", request_id="mid-1", **big)
        first = c.event()
        expect(first and first["event"] == "token", "a token streamed: %r" % first)
        srv.stop(signal.SIGKILL)
        c.close()
        srv.start()
        expect(tokens_of(srv.sock, "m") == before, "the unfinished turn was lost as a whole")
        c = Client(srv.sock)
        small = dict(GEN, max_tokens=30)   # the retry may ask for less: it is a new run...
        ev, _ = turn(c, "generate", "m", b"keep going ", "mid-1", **small)
        expect(ev["event"] == "done" and "replayed" not in ev, "the retry ran: %r" % ev)
        expect(tokens_of(srv.sock, "m") == ev["session_tokens"], "once")
        ev2, _ = turn(c, "generate", "m", b"keep going ", "mid-1", **small)
        expect(ev2.get("replayed") is True, "...and is recorded from then on: %r" % ev2)
        same_answer(ev, ev2)
        c.close()
    finally:
        srv.stop()


@case
def disconnect_mid_turn_then_retry():
    srv = Server("retry-disconnect").start()
    try:
        c = Client(srv.sock)
        big = dict(GEN, max_tokens=60000)
        c.send("generate", session="d", text=b"talk ", request_id="dc-1", **big)
        expect(c.event()["event"] == "token", "a token streamed")
        c.close()   # the turn is cancelled at the next token and committed
        wait_working(lambda: committed_tokens(srv.sock, "d") not in (None, 0), srv.sock, "no commit")
        c = Client(srv.sock)
        ev, toks = turn(c, "generate", "d", b"talk ", "dc-1", **big)
        expect(ev.get("replayed") is True and ev["reason"] == "cancelled", "the cancelled turn: %r" % ev)
        expect(len(toks) == ev["tokens_out"], "its tokens")
        expect(tokens_of(srv.sock, "d") == ev["session_tokens"], "applied once")
        c.close()
    finally:
        srv.stop()


@case
def reused_id_with_other_parameters_refused():
    srv = Server("retry-reuse").start()
    try:
        c = Client(srv.sock)
        ev, _ = turn(c, "generate", "r", b"first ", "same", **GEN)
        n = ev["session_tokens"]
        for op, text, f in (("generate", b"second ", GEN), ("generate", b"first ", dict(GEN, seed=8)),
                            ("append", b"first ", {})):
            bad, toks = turn(c, op, "r", text, "same", **f)
            expect(bad["event"] == "error" and bad["code"] == "bad_request" and "request_id 'same'" in
                   bad["message"], "refused, naming the id: %r" % bad)
            expect(not toks, "nothing ran")
        expect(tokens_of(srv.sock, "r") == n, "the session did not move")
        for rid in ("", "x" * 65, "a\nb"):
            bad, _ = turn(c, "generate", "r", b"x", rid, max_tokens=1)
            expect(bad["event"] == "error" and bad["code"] == "bad_request" and "request_id" in bad["message"],
                   "bad request id %r: %r" % (rid, bad))
        ok, _ = turn(c, "append", "r", b"y", "x" * 64)
        expect(ok["event"] == "result", "64 bytes is fine: %r" % ok)
        c.close()
    finally:
        srv.stop()


@case
def if_tokens_precondition():
    srv = Server("retry-if").start()
    try:
        c = Client(srv.sock)
        bad, _ = turn(c, "append", "p", b"hello", if_tokens=5)
        expect(bad["event"] == "error" and bad["code"] == "conflict" and "has 0 tokens" in bad["message"],
               "a new session has 0: %r" % bad)
        ok, _ = turn(c, "append", "p", b"hello", if_tokens=0)
        expect(ok["event"] == "result", "%r" % ok)
        n = ok["session_tokens"]
        bad, toks = turn(c, "generate", "p", b" world", if_tokens=n - 1, max_tokens=5)
        expect(bad["event"] == "error" and bad["code"] == "conflict" and ("has %d tokens" % n) in bad["message"],
               "names the current count: %r" % bad)
        expect(not toks and tokens_of(srv.sock, "p") == n, "nothing ran")
        ok, _ = turn(c, "generate", "p", b" world", if_tokens=n, max_tokens=5)
        expect(ok["event"] == "done", "%r" % ok)
        # a retry of a committed turn replays even though the count moved on
        r1, _ = turn(c, "append", "p", b"!", "p-1", if_tokens=ok["session_tokens"])
        r2, _ = turn(c, "append", "p", b"!", "p-1", if_tokens=ok["session_tokens"])
        expect(r2.get("replayed") is True, "replayed before the precondition: %r" % r2)
        c.close()
    finally:
        srv.stop()


@case
def results_kept_bounded():
    srv = Server("retry-bound").start()
    try:
        c = Client(srv.sock)
        answers = []
        for i in range(KEEP + 8):
            ev, _ = turn(c, "append", "b", b"w%d " % i, "b-%d" % i)
            answers.append(ev)
        expect(turns_rows(srv.db, "b") == KEEP, "the store keeps %d: %d" % (KEEP, turns_rows(srv.db, "b")))
        last = answers[-KEEP]
        ev, _ = turn(c, "append", "b", b"w%d " % 8, "b-8")
        expect(ev.get("replayed") is True and ev["session_tokens"] == last["session_tokens"],
               "the oldest kept one replays: %r" % ev)
        n = tokens_of(srv.sock, "b")
        ev, _ = turn(c, "append", "b", b"w0 ", "b-0")
        expect("replayed" not in ev and ev["session_tokens"] > n, "a forgotten id runs again: %r" % ev)
        expect(c.call("delete", session="b")["event"] == "result", "deleted")
        expect(turns_rows(srv.db, "b") == 0, "a deleted session's results go with it")
        c.close()
    finally:
        srv.stop()


@case
def lindctl_retries_after_restart():
    srv = Server("retry-lindctl").start()
    try:
        # Long enough that the kill lands mid-turn on a loaded machine; a
        # sanitized server is ~10x slower, so a fifth of it is as long.
        n = 800 if SANITIZED else 4000
        args = ["generate", "-n", str(n), "--seed", "5", "-t", "0.9", "--retry-for", str(int(120 * SLOW))]
        p = subprocess.Popen([LINDCTL, "--socket", srv.sock] + args + ["s", "it was "],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got = os.read(p.stdout.fileno(), 1)   # streaming: the turn is running (unbuffered: communicate reads the fd)
        expect(got, "lindctl printed nothing")
        srv.stop(signal.SIGKILL)
        srv.start()
        out, err = p.communicate(timeout=600 * SLOW)
        out = got + out
        expect(p.returncode == 0, "lindctl exit %d: %r" % (p.returncode, err[-400:]))
        expect(b"sent the turn again" in err, "it retried: %r" % err[-400:])
        ref = subprocess.run([LINDCTL, "--socket", srv.sock] + args + ["ref", "it was "],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600 * SLOW)
        expect(ref.returncode == 0, "reference: %r" % ref.stderr[-400:])
        expect(out == ref.stdout, "the output equals one uninterrupted run (%d vs %d bytes)" %
               (len(out), len(ref.stdout)))
        expect(tokens_of(srv.sock, "s") == tokens_of(srv.sock, "ref"), "applied once")
    finally:
        srv.stop()


finish()
