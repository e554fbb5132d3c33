"""tests/daemon_harness.py — a `lind serve` process and a msgpack client for
the daemon's Python tests (not a test itself: run.sh runs tests/test_*.py).

Server(name, extra=[...], model=DIR).start() serves DIR (default: the shipped model)
on a fresh socket and database in a temporary directory; Client(path) speaks
docs/PROTOCOL.md; case() runs one test function and prints PASS/FAIL."""
import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import msgpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("LIND_BUILD", "build")
LIND = os.path.join(ROOT, BUILD, "lind") if not os.path.isabs(BUILD) else os.path.join(BUILD, "lind")
LINDCTL = os.path.join(os.path.dirname(LIND), "lindctl")
MODEL = os.path.join(ROOT, "models", "default")
TMP = tempfile.mkdtemp(prefix="lind-test-")
# Every program that imports the harness removes TMP when it exits, however it
# exits (LIND_KEEP_TMP=1 keeps it for a post-mortem): a suite run leaves
# nothing in /tmp.
KEEP_TMP = os.environ.get("LIND_KEEP_TMP") == "1"


def remove_at_exit(path):
    """Remove the directory path when the program exits (unless LIND_KEEP_TMP=1)."""
    if not KEEP_TMP:
        atexit.register(shutil.rmtree, path, ignore_errors=True)


remove_at_exit(TMP)
# Every time bound in the tests is a number of seconds times SLOW: the one
# multiplier LIND_TEST_TIME_SCALE (default 1; CI on a loaded machine may raise
# it, as libuv's UV_TEST_TIMEOUT_MULTIPLIER), times 5 under the sanitizers
# (`make asan`, LIND_SANITIZED=1), where everything is slower.
SANITIZED = os.environ.get("LIND_SANITIZED") == "1"
TIME_SCALE = max(1.0, float(os.environ.get("LIND_TEST_TIME_SCALE") or 1))
SLOW = TIME_SCALE * (5 if SANITIZED else 1)


class Server:
    """`lind serve` on a fresh socket and database under TMP/name (name may
    also be an absolute directory; or the given db / sock); extra: more
    options; preexec: run in the child before exec (e.g. to lower a limit);
    env: variables added to the environment (None: the variable removed);
    lind: the program to run instead of $LIND_BUILD/lind (the fault tests'
    lind-faults); logpath: where the server's output goes (default
    DIR/server.log, appended to by every start)."""
    def __init__(self, name, extra=(), db=None, model=None, sock=None, preexec=None, backend="cpu", env=None,
                 lind=None, logpath=None):
        self.model = model or MODEL
        self.dir = os.path.join(TMP, name)
        os.makedirs(self.dir, exist_ok=True)
        self.sock = sock or os.path.join(self.dir, "lind.sock")
        self.db = db or os.path.join(self.dir, "lind.db")
        self.logpath = logpath or os.path.join(self.dir, "server.log")
        self.extra = list(extra)
        self.preexec = preexec
        self.backend = backend
        self.env = env
        self.lind = lind or LIND
        self.proc = None
        self.returncode = None

    def args(self):
        return [self.lind, "serve", "--model", self.model, "--socket", self.sock, "--db", self.db,
                "--backend", self.backend] + self.extra

    def start(self, timeout=60, expect_fail=False, may_fail=False):
        """self once the socket accepts; with expect_fail, the exit status
        of a server that must refuse to start; with may_fail, None when the
        server exits before its socket accepts (stop() then reads its
        status). timeout: seconds (times SLOW)."""
        log = open(self.logpath, "ab")
        env = dict(os.environ)
        for k, v in (self.env or {}).items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log, preexec_fn=self.preexec, env=env)
        log.close()
        deadline = time.time() + timeout * SLOW
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if may_fail:
                    return None
                if expect_fail:
                    rc = self.proc.returncode
                    self.proc = None
                    return rc
                raise RuntimeError("server exited with %d: %s" % (self.proc.returncode, self.log()))
            if not expect_fail:
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(self.sock)
                    s.close()
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("server neither started nor failed: " + self.log())

    def log(self, tail=4000):
        """The last `tail` bytes of the log, as text (None: all of it)."""
        try:
            with open(self.logpath, "rb") as f:
                data = f.read()
        except OSError:
            return ""
        return (data if tail is None else data[-tail:]).decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=60, check=True):
        """Signal the server (one that already exited is not); the seconds
        it took to exit, which must be with status 0 unless sig is SIGKILL
        or check is False. The status is kept in self.returncode. A server
        that does not exit within timeout seconds (times SLOW): TimeoutExpired."""
        if not self.proc:
            return None
        t0 = time.time()
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout * SLOW)
        took = time.time() - t0
        self.proc = None
        self.returncode = rc
        if check and rc != 0 and sig != signal.SIGKILL:   # a clean stop is 0; sanitizer reports (leaks) make it not
            raise RuntimeError("the server exited with %d: %s" % (rc, self.log()))
        return took


class Client:
    ask_progress = True   # (a class default too: test_http_api builds one with __new__)

    def __init__(self, path, timeout=60, ask_progress=True):
        """timeout: seconds (times SLOW) a read may wait; a read that times
        out in final() fails only when the server did no work meanwhile
        (it asks, with a stats request on a connection of its own), or at
        once (socket.timeout) with ask_progress False: for a server that
        must see no request but the test's (the fault tests count its
        allocations). The socket is self.s; self.up unpacks what was
        read from the socket."""
        self.path = path
        self.ask_progress = ask_progress
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.s.settimeout(timeout * SLOW)
        self.up = msgpack.Unpacker(raw=False)
        self.next_id = 1
        self.pending = []

    def send(self, op, **f):
        rid = f.pop("id", None)
        if rid is None:
            rid = self.next_id
            self.next_id += 1
        req = {"op": op, "id": rid}
        req.update(f)
        self.s.sendall(msgpack.packb(req, use_bin_type=True))
        return rid

    def event(self):
        if self.pending:
            return self.pending.pop(0)
        while True:
            for ev in self.up:
                return ev
            data = self.s.recv(1 << 16)
            if not data:
                return None
            self.up.feed(data)

    def final(self, rid, tokens=None):
        """Events until rid's final one, which is returned; rid's tokens go
        to the list `tokens` if given, other requests' events are kept
        (also when a read times out). A read that times out fails only when
        the server also fed and generated nothing since the last one: an
        answer that takes work takes what it takes on a loaded machine.
        A read that is not an event (a map with id and event): ValueError."""
        held = []
        last = None
        try:
            while True:
                try:
                    ev = self.event()
                except socket.timeout:
                    now = progress(self.path) if self.ask_progress and getattr(self, "path", None) else None
                    if now is None or now == last:
                        raise
                    last = now
                    continue
                if ev is None:
                    raise EOFError("closed while waiting for %d" % rid)
                if not isinstance(ev, dict) or "id" not in ev or "event" not in ev:
                    raise ValueError("a malformed event while waiting for %d: %r" % (rid, ev))
                if ev["id"] == rid and ev["event"] in ("result", "done", "error"):
                    return ev
                if ev["id"] != rid:
                    held.append(ev)
                elif tokens is not None and ev["event"] == "token":
                    tokens.append(ev["data"])
        finally:
            self.pending = held + self.pending

    def final_working(self, rid, sock, stall=60, tokens=None):
        """final(rid) for a request whose answer takes work (a long prompt
        fed, many tokens generated): waits as long as the server at `sock`
        makes progress, and fails (TimeoutError) only after `stall` seconds
        (times SLOW) in which it fed and generated no token at all. A slow
        machine is not a stuck server."""
        saved = self.s.gettimeout()
        self.s.settimeout(min(saved or 5.0, 5.0))
        last, since = progress(sock), time.time()
        try:
            while True:
                try:
                    return self.final(rid, tokens)
                except socket.timeout:
                    now = progress(sock)
                    if now != last:
                        last, since = now, time.time()
                    elif time.time() - since > stall * SLOW:
                        raise TimeoutError("no answer to %d, and the server fed and generated nothing "
                                           "for %.0f s" % (rid, stall * SLOW))
        finally:
            self.s.settimeout(saved)

    def call(self, op, **f):
        return self.final(self.send(op, **f))

    def close(self):
        self.s.close()


def progress(sock):
    """The tokens the server at sock has fed and generated (stats), to tell
    a slow machine from a stuck server."""
    c = Client(sock)
    try:
        st = c.call("stats")
        return st.get("tokens_in", 0) + st.get("tokens_out", 0)
    finally:
        c.close()


def wait_working(cond, sock, what, stall=60, poll=0.1):
    """Wait for cond() to hold, an event the server at sock reaches after
    work (tokens to generate or feed): fails (AssertionError `what`) only
    after `stall` seconds (times SLOW) in which cond() did not hold and the
    server fed and generated no token."""
    last, since = progress(sock), time.time()
    while not cond():
        time.sleep(poll)
        now = progress(sock)
        if now != last:
            last, since = now, time.time()
        elif time.time() - since > stall * SLOW:
            raise AssertionError(what)


failures = 0


class Skip(Exception):
    """Raised by a case that cannot run here (printed as SKIP)."""


def http_port(srv, timeout=30, starts=1):
    """The port srv's HTTP listener took ("HTTP on ADDR:PORT" in its log) at
    its start number `starts` (a server's log is appended to by every start;
    1: its first). Waits up to timeout seconds (times SLOW) for the line;
    RuntimeError when it does not come."""
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        try:
            with open(srv.logpath, "rb") as f:   # the whole log: srv.log() is its tail
                m = re.findall(rb"HTTP on [0-9.]+:(\d+)", f.read())
        except OSError:
            m = []
        if len(m) >= starts:
            return int(m[starts - 1])
        time.sleep(0.02)
    raise RuntimeError("no HTTP port in the log: " + srv.log())


ONLY = os.environ.get("LIND_TEST_CASES", "").split()


def case(fn):
    """Run fn as a case (all of them, or those LIND_TEST_CASES names)."""
    global failures
    if ONLY and fn.__name__ not in ONLY:
        return fn
    t0 = time.monotonic()
    try:
        fn()
        # The case's wall time, so a slow suite shows where its minutes go.
        print("PASS %s (%.1f s)" % (fn.__name__, time.monotonic() - t0), flush=True)
    except Skip as e:
        print("SKIP %s: %s" % (fn.__name__, e), flush=True)
    except Exception as e:
        failures += 1
        tb = traceback.extract_tb(e.__traceback__)
        # The line in the test's own file (and the harness's, when it was there).
        own = [f for f in tb if os.path.basename(f.filename) != "daemon_harness.py"]
        where = "line %d" % (own or tb)[-1].lineno
        if own and tb[-1] is not own[-1]:
            where += ", daemon_harness.py line %d" % tb[-1].lineno
        print("FAIL %s: %s (%s)" % (fn.__name__, repr(e)[:600], where), flush=True)
    return fn


class Http:
    """One keep-alive HTTP/1.1 connection to a server's front door."""
    def __init__(self, srv):
        import http.client
        self.c = http.client.HTTPConnection("127.0.0.1", http_port(srv), timeout=120 * SLOW)

    def post(self, path, body):
        """JSON body; (status, the parsed JSON answer or the raw bytes)."""
        import json
        self.c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = self.c.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data.startswith(b"{") else data

    def get(self, path):
        self.c.request("GET", path)
        r = self.c.getresponse()
        return r.status, r.read().decode()

    def close(self):
        self.c.close()


def run_tool(cmd, **kw):
    """cmd (lind's offline commands, curl...) run to completion: its
    CompletedProcess, or a RuntimeError carrying its stderr."""
    r = subprocess.run(cmd, capture_output=True, timeout=120 * SLOW, **kw)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd[:2]), r.returncode, r.stderr.decode(errors="replace")))
    return r


class Offline:
    """A model directory with a tokenizer.json, through `lind tokenize` and
    `lind logits` alone: what the daemon's answers are checked against."""

    def __init__(self, model):
        self.model = model
        self.tok = "bpe:" + os.path.join(model, "tokenizer.json")
        self.dir = tempfile.mkdtemp(dir=TMP)

    def tokenize(self, text):
        p = os.path.join(self.dir, "text")
        with open(p, "wb") as f:
            f.write(text)
        return [int(x) for x in run_tool([LIND, "tokenize", "--tokenizer", self.tok, p]).stdout.split()]

    def greedy(self, ids, n):
        """n greedy tokens after ids from a fresh state."""
        import struct
        ids, out = list(ids), []
        tp, lp = os.path.join(self.dir, "toks.i32"), os.path.join(self.dir, "logits.f32")
        for _ in range(n):
            with open(tp, "wb") as f:
                f.write(struct.pack("<%di" % len(ids), *ids))
            run_tool([LIND, "logits", "--model", self.model, "--backend", "cpu", "--tokens", tp, "--out", lp])
            with open(lp, "rb") as f:
                data = f.read()
            V = len(data) // 4 // len(ids)
            row = struct.unpack("<%df" % V, data[-4 * V:])
            best = max(range(V), key=lambda i: (row[i], -i))   # the sampler's argmax keeps the lowest id on ties
            out.append(best)
            ids.append(best)
        return out

    def decode(self, ids):
        p = os.path.join(self.dir, "ids.txt")
        with open(p, "w") as f:
            f.write(" ".join(map(str, ids)))
        return run_tool([LIND, "tokenize", "--tokenizer", self.tok, "--decode", p]).stdout


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def text_of(n, seed=1):
    """n bytes of lowercase words (no NUL), the same for the same seed."""
    import random
    r = random.Random(seed)
    words = [bytes(r.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(1, 8)))
             for _ in range(500)]
    out = bytearray()
    while len(out) < n:
        out += r.choice(words) + b" "
    return bytes(out[:n])


def finish():
    sys.exit(1 if failures else 0)


def xxh64(data, seed=0):
    """XXH64 of bytes (for tests that rewrite checksummed exports)."""
    M = (1 << 64) - 1
    P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                          9650029242287828579, 2870177450012600261)
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & M
    def rnd(acc, lane):
        acc = (acc + lane * P2) & M
        return (rotl(acc, 31) * P1) & M
    def merge(acc, v):
        acc ^= rnd(0, v)
        return (acc * P1 + P4) & M
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for k in range(4):
            h = merge(h, v[k])
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h ^= rnd(0, int.from_bytes(data[i:i + 8], "little"))
        h = (rotl(h, 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & M
        h = (rotl(h, 23) * P2 + P3) & M
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M
        h = (rotl(h, 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


def export_with_pending(data, pending):
    """An export (docs/STATE.md) with its state's pending token replaced and
    every checksum recomputed."""
    import struct
    b = bytearray(data)
    L = struct.unpack_from("<I", b, 12)[0]
    off = 16 + L + 8
    S = struct.unpack_from("<Q", b, off)[0]
    st = off + 8
    old = struct.unpack_from("<i", b, st + 48)[0]
    tokens = struct.unpack_from("<Q", b, 16 + L)[0] - (old >= 0) + (pending >= 0)
    struct.pack_into("<Q", b, 16 + L, tokens)   # the record's count follows the stream
    struct.pack_into("<i", b, st + 48, pending)
    struct.pack_into("<I", b, st + 60, xxh64(bytes(b[st:st + 60])) & 0xffffffff)
    struct.pack_into("<Q", b, st + S - 8, xxh64(bytes(b[st:st + S - 8])))
    struct.pack_into("<Q", b, len(b) - 8, xxh64(bytes(b[:len(b) - 8])))
    return bytes(b)
