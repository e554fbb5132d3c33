#!/usr/bin/python3
"""tests/test_http_template.py — the daemon's chat template (docs/DAEMON.md,
"Chat template"): `lind serve --template NAME|FILE`, else the model
directory's lind_chat.json, else the model family's built-in.

What each case checks is the text the session was fed, read back from the
session's transcript (`info`): an HTTP chat to the RWKV-4 fixture (HF
layout) is framed as Raven, to the RWKV-7 fixture (.pth) as World/G1;
--template wins over both; a bad --template is refused at start with status
2; a restarted daemon and `lindctl chat` continue an HTTP conversation with
the same framing."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Server, case, expect, finish, TMP, LINDCTL, ROOT, SLOW, http_port  # noqa: E402

RWKV4 = os.path.join(ROOT, "tests", "fixtures", "rwkv4", "a_f32", "model")
RWKV7 = os.path.join(ROOT, "tests", "fixtures", "rwkv7", "a_f32", "model")


def chat_raw(port, session, messages, max_tokens=3):
    """(status, JSON answer) of a chat request on a named session."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0}).encode()
    r = subprocess.run(["curl", "-s", "-S", "--max-time", str(60 * SLOW), "-H", "Content-Type: application/json",
                        "-H", "X-Lind-Session: " + session if session else "X-None: 1", "--data-binary", "@-",
                        "-w", "\n%{http_code}",
                        "http://127.0.0.1:%d/v1/chat/completions" % port],
                       input=body, capture_output=True, timeout=120 * SLOW)
    out, _, code = r.stdout.rpartition(b"\n")
    return int(code), json.loads(out)


def chat(port, session, messages, max_tokens=3):
    st, j = chat_raw(port, session, messages, max_tokens)
    expect(st == 200 and "choices" in j, "chat answer: %d %r" % (st, j))
    return j["choices"][0]["message"]["content"]


def fed(srv, session):
    """The text the session was fed (its transcript's "in" entries, joined)."""
    c = Client(srv.sock)
    r = c.call("info", session=session)
    c.close()
    return b"".join(e["text"] for e in r["transcript"] if e["role"] == "in")


def hello_template(srv):
    c = Client(srv.sock)
    r = c.call("hello")
    c.close()
    t = r["model"].get("chat_template")
    return json.loads(t) if t else None


MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


@case
def rwkv4_gets_raven():
    s = Server("t4", model=RWKV4, extra=["--http", "0"]).start()
    try:
        expect("chat template raven (the model family's built-in)" in s.log(), "start-up log: " + s.log())
        expect(hello_template(s)["name"] == "raven", "hello: %r" % hello_template(s))
        chat(http_port(s), "r1", MSGS)
        got = fed(s, "r1")
        expect(got == b"Be brief.\n\nUser: hi\n\nAssistant:", "fed %r" % got)
    finally:
        s.stop()


W = None   # the RWKV-7 daemon, restarted by the cases below


@case
def rwkv7_gets_world():
    global W
    W = Server("t7", model=RWKV7, extra=["--http", "0"]).start()
    expect("chat template world (the model family's built-in)" in W.log(), "start-up log: " + W.log())
    expect(hello_template(W)["name"] == "world", "hello: %r" % hello_template(W))
    reply = chat(http_port(W), "w1", MSGS)
    got = fed(W, "w1")
    expect(got == b"System: Be brief.\n\nUser: hi\n\nAssistant:", "fed %r" % got)
    W.reply = reply


@case
def restart_continues_the_same_way():
    """The HTTP conversation goes on after a restart framed as before: only
    the new message is fed, as a World turn."""
    if W is None:
        raise RuntimeError("needs rwkv7_gets_world")
    W.stop()
    W.start()
    before = fed(W, "w1")
    msgs = MSGS + [{"role": "assistant", "content": W.reply}, {"role": "user", "content": "more"}]
    chat(http_port(W, starts=2), "w1", msgs)
    got = fed(W, "w1")
    expect(got.startswith(before), "the old text is kept: %r" % got)
    new = got[len(before):]
    expect(new.endswith(b"User: more\n\nAssistant:") and b"System:" not in new, "fed after restart %r" % new)


@case
def lindctl_chat_continues_an_http_session():
    """lindctl chat takes the daemon's template: a typed message continues
    the HTTP session as a World turn."""
    if W is None:
        raise RuntimeError("needs rwkv7_gets_world")
    before = fed(W, "w1")
    r = subprocess.run([LINDCTL, "chat", "w1", "--socket", W.sock, "-n", "2"], input=b"again\n",
                       capture_output=True, timeout=120 * SLOW)
    expect(r.returncode == 0, "lindctl chat: %d %r" % (r.returncode, r.stderr[-500:]))
    expect(b"chat template \"world\" served by the daemon" in r.stderr, "banner: %r" % r.stderr[-500:])
    got = fed(W, "w1")
    new = got[len(before):]
    expect(new.endswith(b"User: again\n\nAssistant:") and b"System:" not in new, "fed by lindctl %r" % new)
    W.stop()


@case
def a_session_keeps_its_template():
    """A session records the template its chat turns were framed with
    (docs/DAEMON.md): the daemon restarted with another template refuses to
    go on with it (409 over HTTP, conflict to lindctl chat, nothing fed),
    and serves new sessions with the new one."""
    s = Server("tk", model=RWKV7, extra=["--http", "0"]).start()
    chat(http_port(s), "k1", MSGS)
    before = fed(s, "k1")
    hist = [{"role": "user", "content": "hello"}]
    hist.append({"role": "assistant", "content": chat(http_port(s), None, hist)})
    hist.append({"role": "user", "content": "and then"})
    s.stop()
    s.extra += ["--template", "raven"]
    s.start()
    st, j = chat_raw(http_port(s, starts=2), "k1", [{"role": "user", "content": "more"}])
    msg = j.get("error", {}).get("message", "")
    expect(st == 409 and "was started with chat template 'world'" in msg and "'raven'" in msg,
           "HTTP with another template: %d %r" % (st, j))
    expect(fed(s, "k1") == before, "nothing fed: %r" % fed(s, "k1"))
    c = Client(s.sock)
    inf = c.call("info", session="k1")
    c.close()
    expect(inf.get("chat_template_name") == "world" and inf.get("chat_template"), "info: %r" % inf)
    # lindctl chat told to frame with raven: refused by the daemon, nothing fed.
    r = subprocess.run([LINDCTL, "chat", "k1", "--socket", s.sock, "-n", "2", "--template", "raven"],
                       input=b"again\n", capture_output=True, timeout=120 * SLOW)
    expect(b"was started with chat template 'world'" in r.stderr, "lindctl chat: %r" % r.stderr[-600:])
    expect(fed(s, "k1") == before, "nothing fed: %r" % fed(s, "k1"))
    # Without --template, lindctl chat takes up the session's (a built-in).
    r = subprocess.run([LINDCTL, "chat", "k1", "--socket", s.sock, "-n", "2"], input=b"again\n",
                       capture_output=True, timeout=120 * SLOW)
    expect(r.returncode == 0 and b'started with chat template "world"; continuing with it' in r.stderr and
           fed(s, "k1").endswith(b"User: again\n\nAssistant:"),
           "lindctl chat on the session's template: %d %r %r" % (r.returncode, r.stderr[-600:], fed(s, "k1")))
    # A stateless client resending its history is not refused: under another
    # template it is another conversation, fed whole into a fresh session.
    st, j = chat_raw(http_port(s, starts=2), None, hist)
    expect(st == 200, "stateless history after the change: %d %r" % (st, j))
    got = fed(s, j["lind"]["session"])
    expect(got.startswith(b"User: hello\n\nAssistant:") and got.endswith(b"User: and then\n\nAssistant:"),
           "the whole conversation, as raven: %r" % got)
    chat(http_port(s, starts=2), "k2", [{"role": "user", "content": "hi"}])
    expect(fed(s, "k2") == b"User: hi\n\nAssistant:", "a new session gets raven: %r" % fed(s, "k2"))
    s.stop()


@case
def stop_string_not_repeated_after_a_restart():
    """What the session's stream already ends with is not fed again when a
    chat goes on after the reply: the compute thread reads it from the
    session's transcript, so it holds across a restart. The session's
    stream ends on Raven's stop string (written here with an append, as a
    reply that stopped on it leaves it); the next message's framing begins
    with that string, and only the rest of it is fed."""
    s = Server("tstop", model=RWKV4, extra=["--http", "0"]).start()
    try:
        c = Client(s.sock)
        r = c.call("append", session="st1", text=b"User: hi\n\nAssistant: Hello.\n\nUser:")
        c.close()
        expect(r.get("fed_bytes") == 34, "append: %r" % r)
        before = fed(s, "st1")
        s.stop()
        s.start()
        msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "more"}]
        st, j = chat_raw(http_port(s, starts=2), "st1", msgs)
        expect(st == 200, "chat after the restart: %d %r" % (st, j))
        got = fed(s, "st1")
        expect(got.startswith(before), "the old text is kept: %r" % got)
        new = got[len(before):]
        expect(new == b" more\n\nAssistant:", "fed after the stop string: %r" % new)
        n = len(b"\n\nUser: more\n\nAssistant:")   # the text rendered, what the stream held included
        expect(j["lind"]["prompt_bytes"] == n and j["lind"]["fed_bytes"] == n,
               "fed_bytes counts the held bytes, the prompt is whole: %r" % j["lind"])
    finally:
        s.stop()


@case
def template_option_wins():
    path = os.path.join(TMP, "qa.json")
    with open(path, "w") as f:
        json.dump({"name": "qa", "user": "Q: {prompt}\nA:", "assistant_end": "\n", "stop": ["\nQ:"]}, f)
    # A lind_chat.json in the model directory loses to --template too.
    mdir = os.path.join(TMP, "m7")
    os.makedirs(mdir, exist_ok=True)
    for n in os.listdir(RWKV7):
        os.symlink(os.path.join(RWKV7, n), os.path.join(mdir, n))
    with open(os.path.join(mdir, "lind_chat.json"), "w") as f:
        json.dump({"name": "dir", "user": "IN {prompt} OUT"}, f)
    s = Server("tq", model=mdir, extra=["--http", "0", "--template", path]).start()
    try:
        expect("chat template qa (--template)" in s.log(), "start-up log: " + s.log())
        chat(http_port(s), "q1", [{"role": "user", "content": "hi"}])
        got = fed(s, "q1")
        expect(got == b"Q: hi\nA:", "fed %r" % got)
    finally:
        s.stop()
    s = Server("td", model=mdir, extra=["--http", "0"]).start()
    try:
        expect("chat template dir (lind_chat.json)" in s.log(), "start-up log: " + s.log())
    finally:
        s.stop()
    s = Server("tn", model=RWKV7, extra=["--http", "0", "--template", "none"]).start()
    try:
        chat(http_port(s), "n1", [{"role": "user", "content": "hi"}])
        got = fed(s, "n1")
        expect(b"User:" not in got and got.startswith(b"hi"), "fed %r" % got)
    finally:
        s.stop()


@case
def bad_template_refused_at_start():
    s = Server("tbad", model=RWKV7, extra=["--template", "no-such-template"])
    rc = s.start(expect_fail=True)
    expect(rc == 2, "exit %r: %s" % (rc, s.log()))
    expect("neither a built-in (none, raven, world, g1-think) nor a readable file" in s.log(), "message: " + s.log())
    path = os.path.join(TMP, "broken.json")
    with open(path, "w") as f:
        f.write('{"user": "no placeholder"}')
    s = Server("tbad2", model=RWKV7, extra=["--template", path])
    rc = s.start(expect_fail=True)
    expect(rc == 2 and "must contain {prompt}" in s.log(), "exit %r: %s" % (rc, s.log()))


finish()
