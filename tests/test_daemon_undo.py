"""tests/test_daemon_undo.py — op `undo` (docs/PROTOCOL.md, "undo"): a
session back to its state before its last turn.

- after two turns, undo answers `undone` with the token count before the
  second; the session's tokens and transcript are those of then, and the
  same second turn sent again gives the same tokens (state and sampler
  restored); the undo is committed: a restarted daemon has it;
- one level: a second undo, an undo of a session's first turn, of an
  unknown session, after a restart, or with --undo off is `not_found`
  saying why, and changes nothing;
- a turn cancelled mid-reply is undone as a whole;
- an undo while a turn runs is `busy`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, case, expect, finish  # noqa: E402


def turn(c, session, text, **f):
    """(final event, the tokens' bytes joined) of one generate."""
    toks = []
    ev = c.final(c.send("generate", session=session, text=text, **f), toks)
    return ev, b"".join(toks)


def info(c, session):
    return c.call("info", session=session)


def ins_outs(ev):
    return [(t["role"], t["text"]) for t in ev.get("transcript", [])]


S = Server("undo").start()


@case
def undo_restores_the_state_before_the_last_turn():
    c = Client(S.sock)
    ev, _ = turn(c, "u1", "Hello there. ", max_tokens=8, seed=7, temperature=0.9)
    expect(ev["event"] == "done", "first turn: %r" % ev)
    before = info(c, "u1")
    ev2, out2 = turn(c, "u1", "And then? ", max_tokens=12, temperature=0.9)
    expect(ev2["event"] == "done" and ev2["session_tokens"] > before["tokens"], "second turn: %r" % ev2)
    u = c.call("undo", session="u1")
    expect(u["event"] == "result" and u.get("undone") is True and u["session_tokens"] == before["tokens"]
           and u["session"] == "u1", "undo: %r" % u)
    after = info(c, "u1")
    expect(after["tokens"] == before["tokens"], "tokens after undo %r, before %r" % (after["tokens"], before["tokens"]))
    expect(ins_outs(after) == ins_outs(before), "transcript after undo: %r" % ins_outs(after))
    # the same turn again: the same tokens (the sampler's state came back too)
    ev3, out3 = turn(c, "u1", "And then? ", max_tokens=12, temperature=0.9)
    expect(ev3["session_tokens"] == ev2["session_tokens"] and out3 == out2,
           "the turn again after undo: %r vs %r" % (out3, out2))
    # committed: a restarted daemon has the undone state, and nothing to undo
    u = c.call("undo", session="u1")
    expect(u["event"] == "result", "undo the repeated turn: %r" % u)
    c.close()
    S.stop()
    S.start()
    c = Client(S.sock)
    expect(info(c, "u1")["tokens"] == before["tokens"], "after a restart: %r" % info(c, "u1"))
    u = c.call("undo", session="u1")
    expect(u["event"] == "error" and u["code"] == "not_found" and "restart" in u["message"],
           "undo after a restart: %r" % u)
    c.close()


@case
def one_level_and_clear_refusals():
    c = Client(S.sock)
    turn(c, "u2", "One. ", max_tokens=4)
    u = c.call("undo", session="u2")
    expect(u["event"] == "error" and u["code"] == "not_found", "undo of a first turn: %r" % u)
    ev, _ = turn(c, "u2", "Two. ", max_tokens=4)
    tokens = ev["session_tokens"]
    expect(c.call("undo", session="u2")["event"] == "result", "undo of the second turn")
    u = c.call("undo", session="u2")
    expect(u["event"] == "error" and u["code"] == "not_found" and "nothing to undo" in u["message"],
           "a second undo: %r" % u)
    expect(info(c, "u2")["tokens"] < tokens, "one level only: %r" % info(c, "u2"))
    u = c.call("undo", session="nobody-here")
    expect(u["event"] == "error" and u["code"] == "not_found", "unknown session: %r" % u)
    c.close()


@case
def a_cancelled_turn_is_undone_whole():
    c = Client(S.sock)
    turn(c, "u3", "Start. ", max_tokens=4)
    before = info(c, "u3")["tokens"]
    rid = c.send("generate", session="u3", text="Go on and on. ", max_tokens=65536)
    while True:   # its first token: the turn runs
        ev = c.event()
        expect(ev and ev["event"] != "error", "the long turn: %r" % ev)
        if ev["id"] == rid and ev["event"] == "token":
            break
    busy = c.call("undo", session="u3")
    expect(busy["event"] == "error" and busy["code"] == "busy", "undo while the turn runs: %r" % busy)
    c.send("cancel", target=rid)
    done = c.final(rid)
    expect(done["event"] == "done" and done["reason"] == "cancelled", "cancelled: %r" % done)
    expect(done["session_tokens"] > before, "the cancelled turn kept its tokens: %r" % done)
    u = c.call("undo", session="u3")
    expect(u["event"] == "result" and u["session_tokens"] == before, "undo: %r" % u)
    expect(info(c, "u3")["tokens"] == before, "back: %r" % info(c, "u3"))
    c.close()


@case
def undo_off_keeps_nothing():
    D = Server("undo-off", extra=["--undo", "off"]).start()
    try:
        c = Client(D.sock)
        turn(c, "u4", "One. ", max_tokens=4)
        turn(c, "u4", "Two. ", max_tokens=4)
        u = c.call("undo", session="u4")
        expect(u["event"] == "error" and u["code"] == "not_found", "undo with --undo off: %r" % u)
        c.close()
    finally:
        D.stop()


S.stop()
finish()
