"""tests/test_daemon_tcp.py — the msgpack protocol over TCP (lind serve
--listen, docs/PROTOCOL.md "TCP"): with a token (--http-token-file) the
first message must be a hello carrying it; anything else, or a wrong
token, gets an `unauthorized` error and the connection is closed (also
one silent for 10 s). A
non-loopback address without a token refuses to start; lindctl reaches the
daemon with --socket tcp://HOST:PORT --token-file PATH."""
import os
import re
import socket
import subprocess
import time

import msgpack

from daemon_harness import LINDCTL, SLOW, Client, Server, case, expect, finish

TOKEN = "s3cret-token-for-tcp"


def token_file(srv):
    path = os.path.join(srv.dir, "token")
    with open(path, "w") as f:
        f.write(TOKEN + "\n")
    return path


def tcp_port(srv):
    deadline = time.time() + 60 * SLOW
    while time.time() < deadline:
        m = re.search(r"TCP on [0-9.]+:(\d+)", srv.log())
        if m:
            return int(m.group(1))
        time.sleep(0.02)
    raise AssertionError("no TCP port in the log: " + srv.log())


class TcpClient(Client):
    """Client over TCP; `path` stays the Unix socket (its progress checks)."""
    def __init__(self, port, sock, timeout=60):
        self.path = sock
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout * SLOW)
        self.s.settimeout(timeout * SLOW)
        self.up = msgpack.Unpacker(raw=False)
        self.next_id = 1
        self.pending = []

    def closed(self):
        """True once the server has closed the connection (EOF), reading
        and dropping whatever else it sent first; bounded by the timeout."""
        try:
            while True:
                ev = self.event()
                if ev is None:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True


def served(name, extra=()):
    srv = Server(name, extra=["--listen", "127.0.0.1:0"] + list(extra))
    return srv


@case
def hello_with_token_then_generate():
    srv = served("tcp_ok")
    srv.extra += ["--http-token-file", token_file(srv)]
    srv.start()
    try:
        c = TcpClient(tcp_port(srv), srv.sock)
        ev = c.call("hello", token=TOKEN)
        expect(ev["event"] == "result" and "server" in ev, "hello: %r" % ev)
        toks = []
        ev = c.final(c.send("generate", session="t1", text="Hello", max_tokens=4, seed=1,
                            temperature=0), toks)
        expect(ev["event"] == "done" and ev["tokens_out"] == 4, "generate over TCP: %r" % ev)
        info = c.call("info", session="t1")
        expect(info["event"] == "result" and info["tokens"] == ev["session_tokens"], "info: %r" % info)
        c.close()
        # The Unix socket needs no token, as before.
        u = Client(srv.sock)
        ev = u.call("info", session="t1")
        expect(ev["event"] == "result", "Unix socket without a token: %r" % ev)
        u.close()
    finally:
        srv.stop()


@case
def refused_before_hello():
    srv = served("tcp_refuse")
    srv.extra += ["--http-token-file", token_file(srv)]
    srv.start()
    try:
        port = tcp_port(srv)
        tries = [("no token", "hello", {}),
                 ("wrong token", "hello", {"token": "not-the-token-at-all"}),
                 ("a near miss", "hello", {"token": TOKEN[:-1] + "X"}),
                 ("generate first", "generate", {"session": "x", "text": "hi", "max_tokens": 1}),
                 ("a bad token type", "hello", {"token": 12})]
        for what, op, f in tries:
            c = TcpClient(port, srv.sock)
            ev = c.call(op, **f)
            expect(ev["event"] == "error" and ev["code"] in ("unauthorized", "bad_request"),
                   "%s: %r" % (what, ev))
            if what != "a bad token type":
                expect(ev["code"] == "unauthorized", "%s: %r" % (what, ev))
            expect(c.closed(), "%s: the connection stays open" % what)
            c.close()
        # Nothing ran: no session x.
        u = Client(srv.sock)
        ev = u.call("info", session="x")
        expect(ev["event"] == "error" and ev["code"] == "not_found", "a refused generate ran: %r" % ev)
        u.close()
    finally:
        srv.stop()


@case
def silent_connection_closed():
    """A TCP connection that never says hello is closed after 10 s."""
    srv = served("tcp_silent")
    srv.extra += ["--http-token-file", token_file(srv)]
    srv.start()
    try:
        c = TcpClient(tcp_port(srv), srv.sock, timeout=60)
        t0 = time.time()
        ev = c.event()
        took = time.time() - t0
        expect(ev and ev["event"] == "error" and ev["code"] == "unauthorized" and ev["id"] == 0,
               "a silent connection got %r" % ev)
        expect(9 <= took, "closed after %.1f s, before the 10 s" % took)
        expect(c.closed(), "the connection stays open")
        c.close()
    finally:
        srv.stop()


@case
def non_loopback_needs_a_token():
    srv = Server("tcp_open", extra=["--listen", "0.0.0.0:0"])
    rc = srv.start(expect_fail=True)
    expect(rc == 2, "started (or failed with %r): %s" % (rc, srv.log()))
    expect("--listen 0.0.0.0:0 is not a loopback address" in srv.log() and "--http-token-file" in srv.log(),
           "the refusal does not say why: " + srv.log())


@case
def lindctl_over_tcp():
    srv = served("tcp_ctl")
    tf = token_file(srv)
    srv.extra += ["--http-token-file", tf]
    srv.start()
    try:
        where = "tcp://127.0.0.1:%d" % tcp_port(srv)
        r = subprocess.run([LINDCTL, "--socket", where, "--token-file", tf, "generate", "c1", "Once",
                            "--max-tokens", "5", "--seed", "3", "--temperature", "0"],
                           capture_output=True, timeout=120 * SLOW)
        expect(r.returncode == 0 and r.stdout, "lindctl over TCP: %d %r %r" % (r.returncode, r.stdout, r.stderr))
        u = Client(srv.sock)
        ev = u.call("info", session="c1")
        expect(ev["event"] == "result" and ev["tokens"] >= 5, "the session: %r" % ev)
        u.close()
        # Without the token file: refused, with the daemon's reason.
        r = subprocess.run([LINDCTL, "--socket", where, "sessions", "ls"], capture_output=True,
                           timeout=120 * SLOW)
        expect(r.returncode != 0 and b"unauthorized" in r.stderr, "no token: %d %r" % (r.returncode, r.stderr))
    finally:
        srv.stop()


finish()
