"""tests/daemon_harness.py — a `lind serve` process and a msgpack client for
the daemon's Python tests (not a test itself: run.sh runs tests/test_*.py).

Server(name, extra=[...], model=DIR).start() serves DIR (default: the shipped model)
on a fresh socket and database in a temporary directory; Client(path) speaks
docs/PROTOCOL.md; case() runs one test function and prints PASS/FAIL."""
import os
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
# Under `make asan` (LIND_SANITIZED=1) everything is slower: time bounds scale.
SANITIZED = os.environ.get("LIND_SANITIZED") == "1"
SLOW = 5 if SANITIZED else 1


class Server:
    """`lind serve` on a fresh socket and database under TMP/name (or the
    given db / sock); extra: more options; preexec: run in the child before
    exec (e.g. to lower a limit); env: variables added to the environment."""
    def __init__(self, name, extra=(), db=None, model=None, sock=None, preexec=None, backend="cpu", env=None):
        self.model = model or MODEL
        self.dir = os.path.join(TMP, name)
        os.makedirs(self.dir, exist_ok=True)
        self.sock = sock or os.path.join(self.dir, "lind.sock")
        self.db = db or os.path.join(self.dir, "lind.db")
        self.logpath = os.path.join(self.dir, "server.log")
        self.extra = list(extra)
        self.preexec = preexec
        self.backend = backend
        self.env = env
        self.proc = None

    def args(self):
        return [LIND, "serve", "--model", self.model, "--socket", self.sock, "--db", self.db,
                "--backend", self.backend] + self.extra

    def start(self, timeout=60, expect_fail=False):
        """self once the socket accepts; with expect_fail, the exit status
        of a server that must refuse to start."""
        log = open(self.logpath, "ab")
        env = dict(os.environ)
        env.update(self.env or {})
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log, preexec_fn=self.preexec, env=env)
        log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
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

    def log(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read()[-4000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signal the server; the seconds it took to exit (which must be with status 0)."""
        if not self.proc:
            return None
        t0 = time.time()
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        took = time.time() - t0
        self.proc = None
        if rc != 0 and sig != signal.SIGKILL:   # a clean stop is 0; sanitizer reports (leaks) make it not
            raise RuntimeError("the server exited with %d: %s" % (rc, self.log()))
        return took


class Client:
    def __init__(self, path, timeout=60):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.s.settimeout(timeout)
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
        to the list `tokens` if given, other requests' events are kept."""
        held = []
        while True:
            ev = self.event()
            if ev is None:
                raise EOFError("closed while waiting for %d" % rid)
            if ev["id"] == rid and ev["event"] in ("result", "done", "error"):
                self.pending = held + self.pending
                return ev
            if ev["id"] != rid:
                held.append(ev)
            elif tokens is not None and ev["event"] == "token":
                tokens.append(ev["data"])

    def call(self, op, **f):
        return self.final(self.send(op, **f))

    def close(self):
        self.s.close()


failures = 0


class Skip(Exception):
    """Raised by a case that cannot run here (printed as SKIP)."""


def case(fn):
    global failures
    try:
        fn()
        print("PASS", fn.__name__, flush=True)
    except Skip as e:
        print("SKIP %s: %s" % (fn.__name__, e), flush=True)
    except Exception as e:
        failures += 1
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print("FAIL %s: %s (line %d)" % (fn.__name__, repr(e)[:600], tb.lineno), flush=True)
    return fn


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
    import shutil
    shutil.rmtree(TMP, ignore_errors=True)
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
