"""tests/test_http_ops.py — running the HTTP front door (docs/HTTP.md): work
nobody waits for is dropped ("Work nobody waits for"), the access log,
X-Request-Id, CORS, /metrics' process and build figures, ambiguous body
lengths, the HTTP/2 switch, and a prompt cut by shutdown reported as such.

The flood: while a canary stream runs, LIND_FLOOD_N (default 2,000; 300
under the sanitizers) completion requests are sent on their own
connections and each connection is closed right after its request, as a
client that gives up does. Checked: once the daemon has seen every one of
them (lind_http_requests_in_flight back to the canary's one), no session
but the canary's is in the store, and the canary's worst gap between two
writes while the flood was handled. The figures are printed as a NOTE:

    LIND_BUILD=build LIND_TEST_CASES=abandoned_flood_leaves_no_sessions_and_the_canary_streams \
        /usr/bin/python3 tests/test_http_ops.py

No case sleeps: each waits for the event it needs (a log line, a metric
reaching a value, the server's answer)."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import (Client, Server, case, expect, finish, SLOW, SANITIZED, http_port)  # noqa: E402


def exchange(port, raw, timeout=60):
    """Send raw bytes on a fresh connection; everything the server writes
    until it closes (or `timeout` s times SLOW pass without a byte)."""
    c = socket.create_connection(("127.0.0.1", port))
    c.settimeout(timeout * SLOW)
    c.sendall(raw)
    got = b""
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
    except (socket.timeout, ConnectionResetError):
        pass
    c.close()
    return got


def request(method, path, body=b"", headers=()):
    h = b"%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method.encode(), path.encode())
    for k in headers:
        h += k.encode() + b"\r\n"
    if body or method == "POST":
        h += b"Content-Length: %d\r\n" % len(body)
    return h + b"\r\n" + body


def head_of(resp):
    head = resp.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.1 (\d+)", head[0]) if head else None
    expect(m, "no HTTP answer: %r" % resp[:200])
    hd = {}
    for ln in head[1:]:
        k, _, v = ln.partition(":")
        hd.setdefault(k.strip().lower(), []).append(v.strip())
    return int(m.group(1)), hd


def body_of(resp):
    """The body of a whole HTTP/1.1 answer (chunked or not)."""
    head, _, raw = resp.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return raw
    out = b""
    while raw:
        size, _, rest = raw.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        raw = rest[n + 2:]
    return out


def metric(port, name):
    got = exchange(port, request("GET", "/metrics"))
    m = re.search(rb"^" + re.escape(name.encode()) + rb"(?:\{[^}]*\})? ([0-9.e+-]+)$", got, re.M)
    return float(m.group(1)) if m else None


def wait_for(cond, what, limit=120):
    deadline = time.time() + limit * SLOW
    while not cond():
        expect(time.time() < deadline, what)
        time.sleep(0.05)


S = Server("http-ops", extra=["--http", "0", "--http-cors", "https://app.example,http://localhost:3000",
                              "--max-tokens", "1000000"]).start()
PORT = http_port(S)


@case
def access_log_and_request_id():
    body = json.dumps({"prompt": "Let there be light", "max_tokens": 3}).encode()
    r = exchange(PORT, request("POST", "/v1/completions", body, ["X-Request-Id: trace-42",
                                                                  "X-Lind-Session: logged"]))
    st, hd = head_of(r)
    expect(st == 200, "status %d" % st)
    expect(hd.get("x-request-id") == ["trace-42"], "the client's request id echoed: %r" % hd)
    line = [ln for ln in S.log().splitlines() if " access " in ln and "request_id=trace-42" in ln]
    wait_for(lambda: any(" access " in ln and "request_id=trace-42" in ln for ln in S.log().splitlines()),
             "no access line for the request")
    line = [ln for ln in S.log().splitlines() if " access " in ln and "request_id=trace-42" in ln][0]
    m = re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info access (.*)$", line)
    expect(m, "not in the log's one form: %r" % line)
    kv = dict(p.split("=", 1) for p in m.group(1).split(" "))
    expect(kv["method"] == "POST" and kv["path"] == "/v1/completions" and kv["status"] == "200",
           "method, path, status: %r" % kv)
    expect(int(kv["bytes"]) == len(r.partition(b"\r\n\r\n")[2]) or int(kv["bytes"]) > 0, "bytes: %r" % kv)
    expect(float(kv["duration_ms"]) >= 0 and kv["client"].startswith("127.0.0.1:"), "duration, client: %r" % kv)
    expect(kv["session"] == "logged" and kv["proto"] == "HTTP/1.1", "session, proto: %r" % kv)
    # No id, or one that is not a visible token: a fresh one, logged alike.
    for hdrs in ([], ["X-Request-Id: has space"]):
        st, hd = head_of(exchange(PORT, request("GET", "/health", headers=hdrs)))
        rid = hd.get("x-request-id", [""])[0]
        expect(re.fullmatch(r"[0-9a-f]{32}", rid), "a generated request id: %r" % hd)
        wait_for(lambda: "request_id=" + rid in S.log(), "the generated id is not logged")
    # Refusals are logged too (a 404).
    st, hd = head_of(exchange(PORT, request("GET", "/nope", headers=["X-Request-Id: r404"])))
    expect(st == 404, "404: %d" % st)
    wait_for(lambda: re.search(r"access method=GET path=/nope status=404 .*request_id=r404", S.log()),
             "no access line for the 404")


@case
def cors_preflight_and_headers():
    pre = ["Origin: https://app.example", "Access-Control-Request-Method: POST",
           "Access-Control-Request-Headers: content-type, authorization"]
    st, hd = head_of(exchange(PORT, request("OPTIONS", "/v1/chat/completions", headers=pre)))
    expect(st == 204, "preflight: %d %r" % (st, hd))
    expect(hd.get("access-control-allow-origin") == ["https://app.example"], "allow-origin: %r" % hd)
    expect("POST" in hd["access-control-allow-methods"][0], "methods: %r" % hd)
    allow = hd["access-control-allow-headers"][0].lower()
    expect("authorization" in allow and "content-type" in allow, "headers: %r" % hd)
    expect("access-control-allow-credentials" not in hd, "credentials stay off: %r" % hd)
    # An origin not listed: refused, and no allow-origin.
    st, hd = head_of(exchange(PORT, request("OPTIONS", "/v1/completions",
                                            headers=["Origin: https://evil.example",
                                                     "Access-Control-Request-Method: POST"])))
    expect(st == 403 and "access-control-allow-origin" not in hd, "foreign preflight: %d %r" % (st, hd))
    # An actual request from an allowed origin carries the headers a page may read.
    body = json.dumps({"prompt": "a", "max_tokens": 1}).encode()
    st, hd = head_of(exchange(PORT, request("POST", "/v1/completions", body, ["Origin: http://localhost:3000"])))
    expect(st == 200 and hd.get("access-control-allow-origin") == ["http://localhost:3000"], "%d %r" % (st, hd))
    expose = hd["access-control-expose-headers"][0].lower()
    expect("x-request-id" in expose and "x-lind-session" in expose, "exposed: %r" % hd)
    # Without --http-cors (the default) a preflight is a 405 as before.
    D = Server("http-nocors", extra=["--http", "0"]).start()
    try:
        st, hd = head_of(exchange(http_port(D), request("OPTIONS", "/v1/completions", headers=pre)))
        expect(st == 405 and "access-control-allow-origin" not in hd, "CORS off: %d %r" % (st, hd))
    finally:
        D.stop()
    # A bad origin list is refused at start.
    rc = Server("http-badcors", extra=["--http", "0", "--http-cors", "app.example/x"]).start(expect_fail=True)
    expect(rc != 0, "a bad --http-cors must stop the start")


@case
def metrics_have_build_info_and_process():
    got = exchange(PORT, request("GET", "/metrics")).decode()
    m = re.search(r'^lind_build_info\{version="([^"]+)",model="default",fingerprint="([0-9a-f]{16})"\} 1$', got, re.M)
    expect(m, "lind_build_info: %r" % got[-600:])
    c = Client(S.sock)
    hello = c.call("hello")
    c.close()
    if "fingerprint" in hello:
        expect(hello["fingerprint"] == m.group(2), "the fingerprint is the model's: %r" % hello)
    rss = metric(PORT, "process_resident_memory_bytes")
    with open("/proc/%d/status" % S.proc.pid) as f:
        vmrss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
    expect(rss and 0.5 * vmrss < rss < 2 * vmrss, "RSS %r against VmRSS %d" % (rss, vmrss))
    cpu = metric(PORT, "process_cpu_seconds_total")
    expect(cpu is not None and cpu > 0, "CPU seconds: %r" % cpu)
    start = metric(PORT, "process_start_time_seconds")
    expect(start and abs(start - time.time()) < 3600 * 24, "start time: %r" % start)


@case
def ambiguous_body_length_is_refused():
    body = json.dumps({"prompt": "a", "max_tokens": 1}).encode()
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    # Two Content-Lengths that disagree: the second request hidden behind
    # the shorter reading must never be answered.
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n"
           % (len(body), len(body) + len(smuggled)) + body + smuggled)
    got = exchange(PORT, raw)
    st, _ = head_of(got)
    expect(st == 400 and b"ambiguous_length" in got, "disagreeing Content-Length: %r" % got[:300])
    expect(got.count(b"HTTP/1.1 ") == 1, "the connection is closed after the refusal: %r" % got)
    # Content-Length beside chunked, either order.
    chunk = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    for hdrs in (b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
                 b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"):
        got = exchange(PORT, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + hdrs + b"\r\n" + chunk + smuggled)
        st, _ = head_of(got)
        expect(st == 400 and b"ambiguous_length" in got and got.count(b"HTTP/1.1 ") == 1,
               "Content-Length with chunked: %r" % got[:300])
    # The same Content-Length twice, and plain chunked, are served.
    got = exchange(PORT, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n"
                   b"Content-Length: %d\r\n\r\n" % (len(body), len(body)) + body)
    expect(head_of(got)[0] == 200, "repeated equal Content-Length: %r" % got[:200])
    got = exchange(PORT, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" + chunk)
    expect(head_of(got)[0] == 200, "chunked: %r" % got[:200])


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@case
def http2_is_off_unless_asked():
    # Off (the default): the preface is not HTTP/2's; no SETTINGS frame comes back.
    got = exchange(PORT, H2_PREFACE + struct.pack(">I", 0)[1:] + b"\x04\x00\x00\x00\x00\x00", timeout=10)
    expect(not got or got.startswith(b"HTTP/1.1 4"), "HTTP/2 answered while off: %r" % got[:100])
    # --http2 on: curl speaks it by prior knowledge.
    D = Server("http-h2", extra=["--http", "0", "--http2", "on"]).start()
    try:
        r = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                            "--max-time", str(30 * SLOW), "http://127.0.0.1:%d/health" % http_port(D)],
                           capture_output=True, timeout=60 * SLOW)
        expect(r.stdout == b"2 200", "HTTP/2 with --http2 on: %r %r" % (r.stdout, r.stderr))
    finally:
        D.stop()


def stored_sessions(srv):
    c = Client(srv.sock)
    names = [s["session"] for s in c.call("list")["sessions"]]
    c.close()
    return names


def flood_beside_a_canary(name, extra, n, flood, what):
    """A daemon (extra options) with a canary stream on its own session;
    flood(port, reqs) sends n abandoned completion requests (reqs: their
    bodies). Waits until the daemon has ended every one, prints the
    figures as a NOTE, and checks that no session is stored but the
    canary's and those of requests answered before their client left, and
    that the canary's worst gap between two reads while the flood was
    handled is under 1 s (times SLOW)."""
    F = Server(name, extra=["--http", "0", "--max-tokens", "1000000"] + extra).start()
    try:
        port = http_port(F)
        # The canary: a long stream on its own session; the time of every read.
        can = socket.create_connection(("127.0.0.1", port))
        body = json.dumps({"prompt": "Let there be light", "max_tokens": 1000000, "stream": True,
                           "seed": 1}).encode()
        can.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Lind-Session: canary\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body)
        reads = []
        stop = threading.Event()

        def read_canary():
            can.settimeout(1.0)
            while not stop.is_set():
                try:
                    d = can.recv(65536)
                except socket.timeout:
                    continue
                if not d:
                    break
                reads.append((time.monotonic(), d.count(b"data: ")))
        t = threading.Thread(target=read_canary)
        t.start()
        wait_for(lambda: sum(k for _, k in reads) >= 20, "the canary does not stream")
        # The flood: requests a prompt to feed and tokens to make, had anybody waited.
        prompt = ("In the beginning God created the heaven and the earth. " * 8)
        reqs = [json.dumps({"prompt": prompt + str(i), "max_tokens": 200}).encode() for i in range(n)]
        t0 = time.monotonic()
        flood(port, reqs)
        t_sent = time.monotonic()
        # Every flood request seen and ended: only the canary is in flight.
        # (in flight: /metrics itself, and the canary while it streams)
        wait_for(lambda: metric(port, "lind_http_requests_in_flight") == 1 + t.is_alive() and
                 (metric(port, "lind_turns_running") or 0) <= 1 and (metric(port, "lind_queue_depth") or 0) == 0,
                 "the flood's requests did not end", limit=600)
        t1 = time.monotonic()
        expect(t.is_alive(), "the canary ended before the flood was handled: lengthen it")
        window = [r for r in reads if t0 <= r[0] <= t1]
        gaps = [b[0] - a[0] for a, b in zip(window, window[1:])]
        worst = max(gaps) if gaps else t1 - t0
        tokens = sum(k for _, k in window)
        stop.set()
        can.shutdown(socket.SHUT_RDWR)
        t.join()
        can.close()
        got = exchange(port, request("GET", "/metrics")).decode()
        m = re.search(r'lind_http_requests_total\{outcome="disconnected"\} (\d+)', got)
        gone = int(m.group(1)) if m else -1
        # A flood request answered before its client hung up was told its
        # answer (the bytes went to the socket): its session is kept.
        answered = sum(int(x) for x in re.findall(r'lind_http_requests_total\{outcome="(?:stop|length)"\} (\d+)', got))
        dropped = int(float(re.search(r"^lind_turns_dropped_total (\S+)$", got, re.M).group(1)))
        rss = float(re.search(r"^process_resident_memory_bytes (\S+)$", got, re.M).group(1))
        wait_for(lambda: "canary" in stored_sessions(F), "the canary's session is saved once it is closed")
        left = [s for s in stored_sessions(F) if s != "canary"]
        print("NOTE %s of %d abandoned requests (sent in %.2f s, all ended %.2f s after the first): "
              "%d sessions left besides the canary (%d requests answered before their client left); "
              "%d seen gone by the front door, %d turns dropped "
              "unstarted or not kept; canary: %d tokens in the window, worst gap %.3f s; RSS after %.0f MB"
              % (what, n, t_sent - t0, t1 - t0, len(left), answered, gone, dropped, tokens, worst, rss / 1e6),
              flush=True)
        expect(len(left) <= answered, "sessions left by abandoned requests: %d, %d answered (%r)"
               % (len(left), answered, left[:5]))
        expect(worst < 1.0 * SLOW, "the canary's worst gap %.3f s" % worst)
    finally:
        F.stop()


FLOOD_N = int(os.environ.get("LIND_FLOOD_N") or (300 if SANITIZED else 2000))


@case
def abandoned_flood_leaves_no_sessions_and_the_canary_streams():
    def flood(port, bodies):
        reqs = [request("POST", "/v1/completions", b) for b in bodies]

        def part(rs):
            # Half give up at once (closed right after the request); half
            # are all sent first and closed together after, so that the
            # daemon has admitted and queued them when their clients go.
            held = []
            for k, r in enumerate(rs):
                try:
                    s = socket.create_connection(("127.0.0.1", port))
                    s.sendall(r)
                    if k % 2:
                        held.append(s)
                    else:
                        s.close()
                except OSError:
                    pass
            for s in held:
                s.close()
        senders = [threading.Thread(target=part, args=(reqs[i::4],)) for i in range(4)]
        for s in senders:
            s.start()
        for s in senders:
            s.join()
    flood_beside_a_canary("http-flood", [], FLOOD_N, flood, "HTTP/1.1 flood")


def sleeping_threads(pid):
    """Threads of pid inside nanosleep or clock_nanosleep (x86-64 syscalls
    35 and 230): /proc/PID/task/TID/syscall."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                if f.read().split(" ", 1)[0] in ("35", "230"):
                    out.append(tid)
        except OSError:
            pass
    return out


@case
def client_gone_while_the_store_is_locked_keeps_no_session():
    # Another writer holds the database's lock: the request's session
    # cannot be leased (nor, had it run, its answer committed). Its client,
    # told nothing, hangs up meanwhile; once the lock goes, no session may
    # be left behind (nobody has its name). tests/scale_nodes.py
    # scale_gone_pg holds the commit itself (a table lock on PostgreSQL).
    # Retention is off: its once-a-second sweep would wait on the lock too,
    # maybe already when the idle threads are taken below, and hold the
    # store thread the request's load needs (as in scale_gone_pg).
    import sqlite3
    D = Server("http-gone-locked", extra=["--http", "0", "--db-lock-timeout", "600000", "--response-ttl", "0"]).start()
    lock = None
    try:
        port = http_port(D)
        lock = sqlite3.connect(D.db, timeout=60 * SLOW, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        idle = set(sleeping_threads(D.proc.pid))   # a sanitizer's own thread may sleep
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(request("POST", "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 1}).encode()))
        # The store waits in SQLite's busy handler, which sleeps between tries.
        wait_for(lambda: set(sleeping_threads(D.proc.pid)) - idle, "the store does not wait for the lock")
        c.close()
        wait_for(lambda: "status=499" in D.log(), "the front door did not see its client gone")
        lock.execute("COMMIT")
        lock.close()
        lock = None
        wait_for(lambda: (metric(port, "lind_turns_dropped_total") or 0) >= 1,
                 "the abandoned turn was not dropped")
        left = stored_sessions(D)
        expect(left == [], "sessions left by a client gone while the store was locked: %r" % left)
    finally:
        if lock:
            lock.close()
        D.stop()


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A header as HPACK's literal without indexing, new name, no Huffman
    (RFC 7541 6.2.2; both lengths under 127 here)."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


@case
def http2_rapid_reset_leaves_no_sessions_and_the_canary_streams():
    # --http2 on: one HTTP/2 connection opens FLOOD_N streams, each a
    # completion request (HEADERS, DATA with END_STREAM) reset at once
    # (RST_STREAM CANCEL), 50 streams per write: rapid reset.
    def flood(port, bodies):
        c = socket.create_connection(("127.0.0.1", port))
        stop = threading.Event()

        def drain():   # the server's frames (SETTINGS, GOAWAY, ...): read and dropped
            c.settimeout(1.0)
            while not stop.is_set():
                try:
                    if not c.recv(65536):
                        break
                except socket.timeout:
                    continue
                except OSError:
                    break
        d = threading.Thread(target=drain)
        d.start()
        c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0) + h2_frame(4, 1, 0))
        out = b""
        for i, body in enumerate(bodies):
            sid = 2 * i + 1
            hdr = (hpack_literal(b":method", b"POST") + hpack_literal(b":scheme", b"http") +
                   hpack_literal(b":path", b"/v1/completions") + hpack_literal(b":authority", b"x") +
                   hpack_literal(b"content-type", b"application/json") +
                   hpack_literal(b"content-length", str(len(body)).encode()))
            out += (h2_frame(1, 4, sid, hdr) + h2_frame(0, 1, sid, body) +
                    h2_frame(3, 0, sid, struct.pack(">I", 8)))
            if i % 50 == 49 or i == len(bodies) - 1:
                try:
                    c.sendall(out)
                except OSError:
                    break
                out = b""
        stop.set()
        d.join()
        c.close()
    flood_beside_a_canary("http2-reset", ["--http2", "on"], FLOOD_N, flood, "HTTP/2 rapid reset")


@case
def socket_turns_queued_on_a_closed_connection_are_dropped():
    # One model slot, held by a long turn: five generates on fresh sessions
    # wait for it; their connection closes; when the slot frees, none of
    # them is fed and no session is made.
    Q = Server("queued-drop", extra=["--http", "0", "--max-resident", "1", "--max-tokens", "1000000"]).start()
    try:
        port = http_port(Q)
        a = Client(Q.sock)
        hog = a.send("generate", session="hog", text="a", max_tokens=1000000)
        wait_for(lambda: (metric(port, "lind_tokens_generated_total") or 0) > 10, "the long turn does not run")
        b = Client(Q.sock)
        for i in range(5):
            b.send("generate", session="queued-%d" % i, text="never fed", max_tokens=5)
        wait_for(lambda: metric(port, "lind_queue_depth") == 5, "the five turns do not wait for the slot")
        b.close()
        a.send("cancel", session="hog")
        a.final(hog)
        wait_for(lambda: metric(port, "lind_turns_dropped_total") == 5 and metric(port, "lind_queue_depth") == 0,
                 "the queued turns of the closed connection were not dropped")
        names = stored_sessions(Q)
        expect(names == ["hog"], "only the long turn's session is stored: %r" % names)
        got = a.call("info", session="queued-0")
        expect(got["event"] == "error" and got["code"] == "not_found", "no session made: %r" % got)
        a.close()
    finally:
        Q.stop()


@case
def queue_of_unstarted_turns_is_bounded():
    # --max-waiting bounds the turns admitted but not started, all
    # connections together: with the one slot held, the third HTTP request
    # to wait gets 429 `limit` naming the option; the two admitted ones run
    # once the slot frees.
    Q = Server("queue-bound", extra=["--http", "0", "--max-resident", "1", "--max-waiting", "2",
                                     "--max-tokens", "1000000"]).start()
    try:
        port = http_port(Q)
        a = Client(Q.sock)
        hog = a.send("generate", session="hog", text="a", max_tokens=1000000)
        wait_for(lambda: (metric(port, "lind_tokens_generated_total") or 0) > 10, "the long turn does not run")
        body = json.dumps({"prompt": "x", "max_tokens": 2}).encode()
        held = []
        for i in range(2):
            c = socket.create_connection(("127.0.0.1", port))
            c.settimeout(120 * SLOW)
            c.sendall(request("POST", "/v1/completions", body))
            held.append(c)
        wait_for(lambda: metric(port, "lind_queue_depth") == 2, "the two requests do not wait for the slot")
        got = exchange(port, request("POST", "/v1/completions", body))
        st, _ = head_of(got)
        j = json.loads(body_of(got))
        expect(st == 429 and j["error"]["code"] == "limit" and "--max-waiting" in j["error"]["message"],
               "over the bound: %d %r" % (st, j))
        a.send("cancel", session="hog")
        a.final(hog)
        for c in held:
            r = b""
            while b"\r\n0\r\n\r\n" not in r and b'"lind"' not in r:
                d = c.recv(65536)
                if not d:
                    break
                r += d
            expect(head_of(r)[0] == 200, "an admitted request is answered: %r" % r[:200])
            c.close()
        a.close()
    finally:
        Q.stop()


def progress_of(srv):
    c = Client(srv.sock)
    try:
        return c.call("stats").get("tokens_in", 0)
    finally:
        c.close()


@case
def responses_say_how_much_was_fed():
    got = exchange(PORT, request("POST", "/v1/responses", json.dumps({"input": "Hello there", "max_output_tokens": 3})
                                 .encode(), ["Content-Type: application/json"]))
    st, _ = head_of(got)
    expect(st == 200, "status %d: %r" % (st, got[:300]))
    lind = json.loads(body_of(got))["lind"]
    expect(lind.get("prompt_bytes", 0) >= len("Hello there") and lind.get("fed_bytes") == lind["prompt_bytes"],
           "the response's lind object: %r" % lind)


@case
def prompt_cut_by_shutdown_says_how_much_was_fed():
    # SIGTERM while a long prompt is fed: the turn stops at the next chunk,
    # the session holds what was fed, and the answer says how much of it.
    Q = Server("http-cut", extra=["--http", "0", "--prompt-chunk", "64"]).start()
    try:
        port = http_port(Q)
        prompt = ("In the beginning God created the heaven and the earth. " * 16000)[:800000]
        body = json.dumps({"prompt": prompt, "max_tokens": 5}).encode()
        c = socket.create_connection(("127.0.0.1", port))
        c.settimeout(120 * SLOW)
        c.sendall(request("POST", "/v1/completions", body, ["X-Lind-Session: cut"]))
        wait_for(lambda: progress_of(Q) > 2000, "the prompt is not being fed")
        Q.proc.send_signal(signal.SIGTERM)
        got = b""
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
            if got.endswith(b"\r\n0\r\n\r\n"):
                break
        c.close()
        st, hd = head_of(got)
        expect(st == 200, "status %d: %r" % (st, got[:300]))
        j = json.loads(body_of(got))
        fed, total = j["lind"]["fed_bytes"], j["lind"]["prompt_bytes"]
        expect(total == len(prompt) and 0 < fed < total, "fed %r of %r" % (fed, total))
        expect(j["choices"][0]["finish_reason"] == "cancelled", "finish: %r" % j["choices"][0])
        expect(hd.get("x-lind-prompt-cut") == ["%d/%d" % (fed, total)], "header: %r" % hd)
        Q.proc.wait(timeout=60 * SLOW)
        Q.proc = None
        Q.start()
        cc = Client(Q.sock)
        r = cc.call("info", session="cut")
        cc.close()
        expect(r["event"] == "result" and fed <= r["tokens"] <= fed + 2, "the session holds what was fed: %r" % r)
    finally:
        Q.stop()


S.stop()
finish()
