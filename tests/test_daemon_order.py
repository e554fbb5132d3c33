"""tests/test_daemon_order.py — requests on one connection reach the store in
the order they were sent, and a state without a pending token (issue 14,
"Pipelined requests can be answered out of order", "A state with no pending
token reads uninitialised memory"):

  - `delete X` then `export X`, pipelined, always answers the export with
    `not_found`; `fork A B` then `export B` always exports B; `delete` then
    `list` never lists the deleted session (200 rounds each);
  - an imported state whose pending token is -1: a `generate` or `append`
    with empty text feeds nothing and samples nothing (done reason `length`,
    tokens_in 0, tokens_out 0, the session unchanged), every time, whatever
    other sessions ran before; with text it continues exactly like another
    copy of the same state.

Runs the daemon from $LIND_BUILD (default build) on the shipped model.
"""
from daemon_harness import Server, Client, case, expect, finish, export_with_pending


@case
def delete_then_export_pipelined():
    s = Server("delexp").start()
    try:
        c = Client(s.sock)
        for i in range(200):
            name = "x%d" % i
            ev = c.call("append", session=name, text=b"abc")
            expect(ev["event"] == "result", "append: %r" % ev)
            d = c.send("delete", session=name)
            e = c.send("export", session=name)
            l = c.send("list")
            ev = c.final(d)
            expect(ev["event"] == "result" and ev["deleted"], "delete %d: %r" % (i, ev))
            ev = c.final(e)
            expect(ev["event"] == "error" and ev["code"] == "not_found", "export after delete %d: %r" % (i, ev))
            ev = c.final(l)
            expect(all(x["session"] != name for x in ev["sessions"]), "list after delete %d names it" % i)
        c.close()
    finally:
        s.stop()


@case
def fork_then_export_pipelined():
    s = Server("forkexp").start()
    try:
        c = Client(s.sock)
        ev = c.call("append", session="src", text=b"the source")
        for i in range(200):
            f = c.send("fork", session="src", to="f%d" % i)
            e = c.send("export", session="f%d" % i)
            i2 = c.send("info", session="f%d" % i)
            ev = c.final(f)
            expect(ev["event"] == "result", "fork %d: %r" % (i, ev))
            ev = c.final(e)
            expect(ev["event"] == "result" and ev["session"] == "f%d" % i, "export after fork %d: %r" % (i, ev))
            ev = c.final(i2)
            expect(ev["event"] == "result" and ev["tokens"] == 11, "info after fork %d: %r" % (i, ev))
        c.close()
    finally:
        s.stop()


@case
def no_pending_token_empty_feed_is_defined():
    s = Server("nopending").start()
    try:
        c = Client(s.sock)
        c.call("append", session="a", text=b"Once upon a time")
        data = export_with_pending(c.call("export", session="a")["data"], -1)
        for name in ("p", "q"):
            ev = c.call("import", session=name, data=data)
            expect(ev["event"] == "result", "import: %r" % ev)
        wrong = bytearray(data)
        wrong[16 + 1] ^= 1    # the record's token count (after a 1-byte name) no longer matches
        ev = c.call("import", session="w", data=export_with_pending(bytes(wrong), -1))
        expect(ev["event"] == "error" and ev["code"] == "bad_state" and "records" in ev["message"],
               "a count that disagrees with the state: %r" % ev)
        before = c.call("info", session="p")["tokens"]
        for i in range(3):
            # other sessions' steps leave their logits behind
            c.call("generate", session="other%d" % i, text=b"noise", max_tokens=8, temperature=1.0)
            for op in ("generate", "append"):
                f = {"max_tokens": 8} if op == "generate" else {"text": b""}
                toks = []
                ev = c.final(c.send(op, session="p", **f), toks)
                if op == "generate":
                    expect(ev["event"] == "done" and ev["reason"] == "length" and ev["tokens_in"] == 0
                           and ev["tokens_out"] == 0 and not toks, "empty generate: %r %r" % (ev, toks))
                else:
                    expect(ev["event"] == "result" and ev["tokens_in"] == 0, "empty append: %r" % ev)
                expect(ev["session_tokens"] == before, "the session moved: %r" % ev)
        outs = []
        for name in ("p", "q"):
            toks = []
            ev = c.final(c.send("generate", session=name, text=b" there", max_tokens=16, temperature=0), toks)
            expect(ev["event"] == "done" and ev["tokens_out"] == 16, "generate: %r" % ev)
            outs.append(b"".join(toks))
        expect(outs[0] == outs[1], "two copies of one state continue differently: %r" % outs)
        c.close()
    finally:
        s.stop()


finish()
