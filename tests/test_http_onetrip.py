"""tests/test_http_onetrip.py — a continued or stateless chat over HTTP is
one trip to the compute thread (docs/HTTP.md, "Sessions: what is fed"):
its generate starts from the stored session it continues and its commit
keeps the copy a later request looks for, with no fork before or after
(lind_http_stage_requests_total counts each stage's requests). When the
session it continues is gone by the time its turn loads it, an optional
one (a stateless chat's prefix) feeds the whole conversation from a zero
state, and a required one (previous_response_id) is 404 with nothing made.
The store is read behind the daemon's back with Python's sqlite3."""
import os
import re
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Http, Server, Client, case, expect, finish, SLOW  # noqa: E402


def stages(h):
    """lind_http_stage_requests_total by stage."""
    st, text = h.get("/metrics")
    expect(st == 200, "metrics: %d" % st)
    return {k: int(float(v)) for k, v in
            re.findall(r'(?m)^lind_http_stage_requests_total\{stage="(\w+)"\} (\S+)$', text)}


def rows(srv):
    """{name: (origin, created_ms, updated_ms, version)} of the store now."""
    db = sqlite3.connect(srv.db, timeout=30 * SLOW)
    try:
        return {n: (o, c, u, v) for n, o, c, u, v in
                db.execute("SELECT name, origin, created_ms, updated_ms, version FROM sessions")}
    finally:
        db.close()


def delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)
            if after.get(k, 0) != before.get(k, 0)}


S = Server("onetrip", extra=["--http", "0"]).start()
H = Http(S)
M1 = [{"role": "user", "content": "Who was Noah"}]


def chat(messages, **kw):
    st, j = H.post("/v1/chat/completions", dict({"messages": messages, "max_tokens": 8, "seed": 4}, **kw))
    expect(st == 200, "chat: %d %r" % (st, j))
    return j


@case
def stateless_chat_is_one_generate():
    before, names = stages(H), set(rows(S))
    r1 = chat(M1)
    expect(delta(before, stages(H)) == {"generate": 1},
           "a fresh chat took %r (one generate, no fork)" % delta(before, stages(H)))
    new = {n: v for n, v in rows(S).items() if n not in names}
    chats = [n for n in new if n.startswith("chat-")]
    expect(r1["id"] in new and len(chats) == 1 and len(new) == 2,
           "the answer's session and its chat copy are stored: %r" % sorted(new))
    resp, copy = new[r1["id"]], new[chats[0]]
    expect(resp[0] == 2 and copy[0] == 3, "origins response and chat: %r %r" % (resp, copy))
    expect(copy[1] == copy[2] == resp[2] and copy[3] == 1,
           "the copy was written by the turn's commit (same time, a new row): %r %r" % (resp, copy))
    # The continuation starts from that copy on the compute thread: one
    # generate again, and only the new message is fed.
    reply = r1["choices"][0]["message"]["content"]
    m2 = M1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then"}]
    before = stages(H)
    r2 = chat(m2)
    expect(delta(before, stages(H)) == {"generate": 1},
           "a continued chat took %r (one generate, no fork)" % delta(before, stages(H)))
    expect(r2["usage"]["prompt_tokens"] <= len("And then\n") + 1,
           "the stored prefix was continued: %r" % r2["usage"])
    expect(r2["lind"]["fed_bytes"] == r2["lind"]["prompt_bytes"], "nothing cut: %r" % r2["lind"])
    c = Client(S.sock)
    i = c.call("info", session=r2["id"])
    c.close()
    expect(i["tokens"] == r2["lind"]["session_tokens"] and i["tokens"] > r2["usage"]["total_tokens"],
           "the answer's session holds the whole conversation: %r %r" % (i, r2["usage"]))


@case
def named_session_and_previous_response_are_one_generate():
    before = stages(H)
    st, a = H.post("/v1/completions", {"prompt": "Blessed are the meek", "max_tokens": 6, "seed": 2,
                                       "session": "onetrip-named"})
    expect(st == 200, "%d %r" % (st, a))
    st, b = H.post("/v1/completions", {"prompt": ", for they", "max_tokens": 6, "seed": 2,
                                       "previous_response_id": a["id"]})
    expect(st == 200, "%d %r" % (st, b))
    expect(delta(before, stages(H)) == {"generate": 2}, "two turns took %r" % delta(before, stages(H)))
    c = Client(S.sock)
    ia, ib = c.call("info", session=a["id"]), c.call("info", session=b["id"])
    c.close()
    expect(ia["tokens"] == a["lind"]["session_tokens"], "the named turn's copy under its id: %r" % ia)
    expect(ib["tokens"] == b["lind"]["session_tokens"] and ib["tokens"] > ia["tokens"],
           "the continuation holds both turns: %r %r" % (ia, ib))


@case
def prefix_gone_feeds_the_whole_conversation():
    names = set(rows(S))
    r1 = chat(M1, seed=7, max_tokens=6)
    reply = r1["choices"][0]["message"]["content"]
    m2 = M1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Say more"}]
    # The copy the next request names goes (as retention or a client may
    # delete it) before its turn loads it.
    copies = [n for n in set(rows(S)) - names if n.startswith("chat-")]
    expect(len(copies) == 1, "one copy kept by the first answer: %r" % copies)
    c = Client(S.sock)
    d = c.call("delete", session=copies[0])
    c.close()
    expect(d["event"] == "result", "deleted: %r" % d)
    before = stages(H)
    r2 = chat(m2, seed=7, max_tokens=6)
    expect(delta(before, stages(H)) == {"generate": 1}, "took %r" % delta(before, stages(H)))
    expect(r2["usage"]["prompt_tokens"] > len("Say more") and
           r2["lind"]["fed_bytes"] == r2["lind"]["prompt_bytes"] and
           r2["lind"]["prompt_bytes"] >= sum(len(m["content"].encode()) for m in m2),
           "the whole conversation was fed: %r %r" % (r2["usage"], r2["lind"]))
    # Exactly what a daemon that never stored the prefix answers.
    F = Server("onetrip-fresh", extra=["--http", "0"]).start()
    try:
        h = Http(F)
        st, f2 = h.post("/v1/chat/completions", {"messages": m2, "max_tokens": 6, "seed": 7})
        h.close()
    finally:
        F.stop()
    expect(st == 200 and f2["choices"][0]["message"]["content"] == r2["choices"][0]["message"]["content"] and
           f2["usage"] == r2["usage"], "as a fresh conversation: %r / %r" % (f2, r2))


@case
def previous_response_gone_is_404_and_makes_nothing():
    st, a = H.post("/v1/completions", {"prompt": "In the beginning", "max_tokens": 4, "seed": 3})
    expect(st == 200, "%d %r" % (st, a))
    c = Client(S.sock)
    c.call("delete", session=a["id"])
    c.close()
    names = set(rows(S))
    for path, body in (("/v1/completions", {"prompt": " was", "previous_response_id": a["id"]}),
                       ("/v1/chat/completions", {"messages": M1, "previous_response_id": a["id"]}),
                       ("/v1/responses", {"input": "was", "previous_response_id": a["id"]})):
        st, j = H.post(path, dict(body, max_tokens=4) if "input" not in body else body)
        expect(st == 404 and j["error"]["code"] == "not_found" and a["id"] in j["error"]["message"],
               "%s: %d %r" % (path, st, j))
    expect(set(rows(S)) == names, "no session made: %r" % (set(rows(S)) - names))


@case
def n_choices_continue_through_a_fork():
    # n > 1 feeds the prompt once into the response's session and forks it
    # to the other choices, so a continued one copies its prefix in first;
    # each choice's copy is still kept by its own commit.
    r1 = chat(M1, seed=5, max_tokens=5)
    reply = r1["choices"][0]["message"]["content"]
    m2 = M1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Why"}]
    before, names = stages(H), set(rows(S))
    r2 = chat(m2, seed=5, max_tokens=5, n=2)
    expect(delta(before, stages(H)) == {"fork_in": 1, "prefill": 1, "fork_n": 1, "generate": 2},
           "took %r" % delta(before, stages(H)))
    new = set(rows(S)) - names
    expect(len([n for n in new if n.startswith("chat-")]) == len({c["message"]["content"] for c in r2["choices"]})
           and set(r2["lind"]["sessions"]) <= new, "each choice's session and copy: %r %r" % (sorted(new), r2["lind"]))


H.close()
S.stop()
finish()
