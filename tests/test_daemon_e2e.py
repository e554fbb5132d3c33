#!/usr/bin/python3
"""tests/test_daemon_e2e.py — `lind serve` end to end, from docs/PROTOCOL.md only.

A client on another msgpack implementation (python3-msgpack) talks to the
real daemon ($LIND_BUILD/lind, default build/lind) on a temporary socket and
database, with a small random model written here in the layout of
docs/MODEL.md. Prints one line per case: PASS name / FAIL name: why.
"""
import atexit
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import msgpack
import numpy as np

BUILD = os.environ.get("LIND_BUILD", "build")
LIND = os.path.join(BUILD, "lind")
SANITIZED = os.environ.get("LIND_SANITIZED") == "1"
SCALE = 4 if SANITIZED else 1   # sanitizers slow everything: smaller runs, same assertions
# Time bounds: seconds times SLOW, as in tests/daemon_harness.py (LIND_TEST_TIME_SCALE).
SLOW = max(1.0, float(os.environ.get("LIND_TEST_TIME_SCALE") or 1)) * (5 if SANITIZED else 1)


# ---- a random model (docs/MODEL.md layout) ---------------------------------

def write_model(path, seed=1, d=32, layers=2, heads=4, dhead=8, dff=64):
    os.makedirs(path, exist_ok=True)
    mixers = ["linear", "aft"] * layers
    mixers = mixers[:layers]
    cfg = {"vocab_size": 256, "d_model": d, "n_layers": layers, "n_heads": heads,
           "d_head": dhead, "d_ff": dff, "mixers": mixers, "feature_map": "elu1",
           "token_shift": True, "norm_eps": 1e-5, "attn_eps": 1e-6, "aft_variant": "decay"}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(seed)
    t = {}

    def u(name, shape, a):
        t[name] = (a * rng.uniform(-1, 1, size=shape)).astype(np.float32)

    def one(name, n):
        t[name] = (1 + 0.1 * rng.uniform(-1, 1, size=n)).astype(np.float32)

    def rng_range(name, n, lo, hi):
        t[name] = rng.uniform(lo, hi, size=n).astype(np.float32)

    hd = heads * dhead
    u("embed.weight", (256, d), 1.0)
    one("ln_f.weight", d)
    u("ln_f.bias", d, 0.1)
    u("head.weight", (256, d), 3.0 / np.sqrt(d))
    for i, mx in enumerate(mixers):
        p = "layers.%d." % i
        one(p + "ln1.weight", d)
        u(p + "ln1.bias", d, 0.1)
        one(p + "ln2.weight", d)
        u(p + "ln2.bias", d, 0.1)
        u(p + "ffn.w1", (dff, d), 1 / np.sqrt(d))
        u(p + "ffn.b1", dff, 0.1)
        u(p + "ffn.w2", (d, dff), 1 / np.sqrt(dff))
        u(p + "ffn.b2", d, 0.1)
        if mx == "linear":
            for w in ("wq", "wk", "wv"):
                u(p + "mixer." + w, (hd, d), 1 / np.sqrt(d))
            u(p + "mixer.wo", (d, hd), 1 / np.sqrt(hd))
            for w in ("mu_q", "mu_k", "mu_v"):
                rng_range(p + "mixer." + w, d, 0, 1)
        else:
            for w in ("wr", "wk", "wv", "wo"):
                u(p + "mixer." + w, (d, d), 1 / np.sqrt(d))
            rng_range(p + "mixer.time_decay", d, -2, 0.5)
            rng_range(p + "mixer.time_first", d, -1, 1)
            for w in ("mu_r", "mu_k", "mu_v"):
                rng_range(p + "mixer." + w, d, 0, 1)
    header, off, blobs = {}, 0, []
    for name, arr in t.items():
        b = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the server --------------------------------------------------------------

class Server:
    def __init__(self, tmp, *extra):
        self.tmp = tmp
        self.sock = os.path.join(tmp, "lind.sock")
        self.db = os.path.join(tmp, "lind.db")
        self.extra = list(extra)
        self.proc = None
        self.log = open(os.path.join(tmp, "server.log"), "ab")

    def start(self):
        args = [LIND, "serve", "--model", os.path.join(self.tmp, "model"), "--socket", self.sock,
                "--db", self.db, "--backend", "cpu"] + self.extra
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        deadline = time.time() + 30 * SLOW
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited with %d: %s" % (self.proc.returncode, self.tail()))
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.sock)
                s.close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("server did not start: " + self.tail())

    def tail(self):
        self.log.flush()
        with open(os.path.join(self.tmp, "server.log"), "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if not self.proc:
            return None
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout * SLOW)
        self.proc = None
        return rc

    def client(self):
        return Client(self.sock)


class Client:
    def __init__(self, path):
        self.path = path
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.s.settimeout(60 * SLOW)
        self.up = msgpack.Unpacker(raw=False)
        self.next_id = 1
        self.events = []   # events read but not yet consumed

    def send(self, op, **fields):
        rid = fields.pop("id", None)
        if rid is None:
            rid = self.next_id
            self.next_id += 1
        req = {"op": op, "id": rid}
        req.update(fields)
        self.s.sendall(msgpack.packb(req, use_bin_type=True))
        return rid

    def send_raw(self, data):
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass   # the server may close before reading it all; its error is still readable

    def read_event(self):
        while True:
            for ev in self.up:
                return ev
            data = self.s.recv(1 << 16)
            if not data:
                return None
            self.up.feed(data)

    def progress(self):
        """The server's tokens fed and generated (stats, on a connection of its own)."""
        c = Client(self.path)
        try:
            st = c.call("stats")
            return st.get("tokens_in", 0) + st.get("tokens_out", 0)
        finally:
            c.close()

    def wait(self, rid):
        """Events of request rid until its final one: (tokens bytes, final event).
        A read that times out (60 s times SLOW) fails only when the server
        also fed and generated nothing meanwhile: an answer that takes work
        (a 100 KB prompt) takes what it takes on a loaded machine."""
        out = bytearray()
        i = 0
        last = None
        while True:
            while i < len(self.events):
                ev = self.events[i]
                if ev["id"] == rid:
                    del self.events[i]
                    if ev["event"] == "token":
                        out += ev["data"]
                        continue
                    return bytes(out), ev
                i += 1
            try:
                ev = self.read_event()
            except socket.timeout:
                now = self.progress()
                if now == last:
                    raise
                last = now
                continue
            if ev is None:
                raise EOFError("connection closed while waiting for %d" % rid)
            self.events.append(ev)

    def call(self, op, **fields):
        return self.wait(self.send(op, **fields))[1]

    def close(self):
        self.s.close()


# ---- the cases ---------------------------------------------------------------

failures = 0


ONLY = os.environ.get("LIND_TEST_CASES", "").split()   # as in tests/daemon_harness.py


def case(fn):
    global failures
    name = fn.__name__
    if ONLY and name not in ONLY:
        return fn
    try:
        fn()
        print("PASS", name, flush=True)
    except Exception as e:   # a failed assertion or a protocol surprise
        failures += 1
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print("FAIL %s: %s (line %d)" % (name, repr(e)[:400], tb.lineno), flush=True)
    return fn


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def scratch(prefix):
    """A fresh directory, removed when the program exits (LIND_KEEP_TMP=1 keeps it)."""
    d = tempfile.mkdtemp(prefix=prefix)
    if os.environ.get("LIND_KEEP_TMP") != "1":
        atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


TMP = scratch("lind-e2e-")
write_model(os.path.join(TMP, "model"), seed=3)
srv = Server(TMP, "--max-output", "16384", "--max-tokens", "100000").start()


@case
def hello():
    c = srv.client()
    r = c.call("hello")
    expect(r["event"] == "result" and r["protocol"] == 1, r)
    expect(r["model"]["d_model"] == 32 and r["model"]["n_layers"] == 2, r["model"])
    expect(len(r["model"]["fingerprint"]) == 16 and r["model"]["state_bytes"] > 0, r["model"])
    expect(r["backend"] == "cpu" and r["limits"]["max_tokens"] == 100000, r)
    expect(r["limits"]["max_name"] == 128 and r["limits"]["max_message"] == 1 << 20, r["limits"])
    mode = os.stat(srv.sock).st_mode & 0o777
    expect(mode == 0o600, "socket mode %o, want 600" % mode)
    c.close()


@case
def second_server_on_same_socket_refused():
    p = subprocess.run([LIND, "serve", "--model", os.path.join(TMP, "model"), "--socket", srv.sock,
                        "--db", os.path.join(TMP, "other.db"), "--backend", "cpu"],
                       capture_output=True, timeout=60 * SLOW)
    expect(p.returncode != 0 and b"another server is listening" in p.stderr, p)
    expect(srv.client().call("hello")["event"] == "result", "the first one still serves")
    bad = subprocess.run([LIND, "serve", "--model", os.path.join(TMP, "no-such-model"),
                          "--socket", os.path.join(TMP, "x.sock"), "--db", os.path.join(TMP, "x.db")],
                         capture_output=True, timeout=60 * SLOW)
    expect(bad.returncode != 0 and b"no-such-model" in bad.stderr, bad)
    baddb = subprocess.run([LIND, "serve", "--model", os.path.join(TMP, "model"), "--socket",
                            os.path.join(TMP, "y.sock"), "--db", TMP], capture_output=True, timeout=60 * SLOW)
    expect(baddb.returncode == 1 and b"store" in baddb.stderr, baddb)
    opt = subprocess.run([LIND, "serve", "--max-batch", "0"], capture_output=True, timeout=60 * SLOW)
    expect(opt.returncode == 2 and b"--max-batch" in opt.stderr, opt)


@case
def streaming_generate():
    c = srv.client()
    rid = c.send("generate", session="stream", text="Once upon a time", max_tokens=50, seed=1)
    first = c.read_event()
    expect(first["id"] == rid and first["event"] == "token" and len(first["data"]) == 1, first)
    c.events.append(first)
    out, done = c.wait(rid)
    expect(done["event"] == "done" and done["reason"] == "length", done)
    expect(len(out) == 50 and done["tokens_out"] == 50 and done["tokens_in"] == 16, done)
    # BOS + 16 prompt bytes + 50 generated (the last one pending)
    expect(done["session_tokens"] == 1 + 16 + 50, done)
    for k in ("queue", "prompt", "generate", "save", "total"):
        expect(k in done["ms"] and done["ms"][k] >= 0, done["ms"])
    info = c.call("info", session="stream")
    expect(info["tokens"] == 67 and info["resident"] is True and info["busy"] is False, info)
    tr = info["transcript"]
    expect(tr[0] == {"role": "in", "text": b"Once upon a time"}, tr)
    expect(tr[1]["role"] == "out" and tr[1]["text"] == out, tr)
    c.close()


def gen_alone(name, seed, text, n, **kw):
    c = srv.client()
    out, done = c.wait(c.send("generate", session=name, text=text, max_tokens=n, seed=seed,
                              temperature=0.9, **kw))
    c.close()
    expect(done["event"] == "done", done)
    return out


@case
def no_bleed_one_connection():
    n = 60 // SCALE
    texts = ["alpha", "beta beta", "gamma!", "d", "epsilon epsilon epsilon", "zeta"]
    alone = [gen_alone("alone-%d" % i, 100 + i, t, n) for i, t in enumerate(texts)]
    expect(len(set(alone)) > 1, "different sessions should differ")
    c = srv.client()
    ids = [c.send("generate", session="together-%d" % i, text=t, max_tokens=n, seed=100 + i,
                  temperature=0.9) for i, t in enumerate(texts)]
    res = [c.wait(r) for r in ids]
    for i, (out, done) in enumerate(res):
        expect(done["event"] == "done" and out == alone[i],
               "session %d together differs from alone: %r vs %r" % (i, out, alone[i]))
    st = c.call("stats")
    multi = sum(v for k, v in st["batch_hist"].items() if k != "1")
    expect(multi > 0, "sessions were stepped together: %r" % st["batch_hist"])
    c.close()


@case
def many_connections():
    n = 40 // SCALE
    k = 12
    alone = [gen_alone("mc-alone-%d" % i, 7 * i + 1, "conn %d" % i, n) for i in range(k)]
    results = [None] * k

    def run(i):
        results[i] = gen_alone("mc-%d" % i, 7 * i + 1, "conn %d" % i, n)
    th = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for i in range(k):
        expect(results[i] == alone[i], "connection %d differs" % i)


def split_vs_whole(kill):
    tag = "kill" if kill else "term"
    n1, n2 = 37, 45
    whole = gen_alone("whole-" + tag, 99, "The quick brown fox", n1 + n2, top_k=50, top_p=0.95,
                      repetition_penalty=1.2)
    c = srv.client()
    a, d1 = c.wait(c.send("generate", session="split-" + tag, text="The quick brown fox",
                          max_tokens=n1, seed=99, temperature=0.9, top_k=50, top_p=0.95,
                          repetition_penalty=1.2))
    c.close()
    expect(d1["event"] == "done" and len(a) == n1, d1)
    rc = srv.stop(signal.SIGKILL if kill else signal.SIGTERM)
    expect(rc == (-signal.SIGKILL if kill else 0), "exit status %r" % rc)
    srv.start()
    c = srv.client()
    # after the restart the session is only stored: info still reports its seed
    info = c.call("info", session="split-" + tag)
    expect(info.get("resident") is False and info.get("seed") == 99, "stored session's info: %r" % info)
    b, d2 = c.wait(c.send("generate", session="split-" + tag, max_tokens=n2, temperature=0.9,
                          top_k=50, top_p=0.95, repetition_penalty=1.2))
    c.close()
    expect(d2["event"] == "done" and d2["session_tokens"] == 1 + 19 + n1 + n2, d2)
    expect(a + b == whole, "split stream differs: %r + %r vs %r" % (a, b, whole))


@case
def restart_graceful_equals_uninterrupted():
    split_vs_whole(False)


@case
def restart_sigkill_equals_uninterrupted():
    split_vs_whole(True)


@case
def sigkill_mid_stream_resumes_from_a_done():
    """Six sessions run 20-token turns back to back; SIGKILL lands mid-stream.
    After restart each session holds exactly the state after one of its
    turns — at least the last one whose `done` the client saw — and goes on
    exactly like a session that was never interrupted."""
    k, turn = 6, 20
    c = srv.client()
    seen = {i: 0 for i in range(k)}      # dones seen per session
    pending = {}
    for i in range(k):
        pending[c.send("generate", session="kill-%d" % i, text="k%d" % i, max_tokens=turn,
                       seed=50 + i)] = i
    total = 0
    while total < 40 // SCALE + 12:
        ev = c.read_event()
        if ev["event"] == "token":
            continue
        i = pending.pop(ev["id"])
        expect(ev["event"] == "done", ev)
        seen[i] += 1
        total += 1
        pending[c.send("generate", session="kill-%d" % i, max_tokens=turn)] = i
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=60 * SLOW)
    srv.proc = None
    c.close()
    srv.start()
    c = srv.client()
    for i in range(k):
        info = c.call("info", session="kill-%d" % i)
        turns, rest = divmod(info["tokens"] - (1 + 2), turn)
        expect(rest == 0 and turns >= seen[i], "session %d: %d tokens after %d dones seen"
               % (i, info["tokens"], seen[i]))
        x, _ = c.wait(c.send("generate", session="kill-%d" % i, max_tokens=30))
        c.call("generate", session="ref-%d" % i, text="k%d" % i, max_tokens=turn, seed=50 + i)
        for _ in range(turns - 1):
            c.call("generate", session="ref-%d" % i, max_tokens=turn)
        y, _ = c.wait(c.send("generate", session="ref-%d" % i, max_tokens=30))
        expect(x == y, "session %d after SIGKILL differs from an uninterrupted one" % i)
    c.close()


@case
def cancel():
    c = srv.client()
    rid = c.send("generate", session="cancel-me", text="x", max_tokens=90000)
    got = bytearray()
    while len(got) < 20:
        ev = c.read_event()
        expect(ev["id"] == rid and ev["event"] == "token", ev)
        got += ev["data"]
    cid = c.send("cancel", target=rid)
    out, done = c.wait(rid)
    got += out
    _, cr = c.wait(cid)
    expect(cr["event"] == "result" and cr["cancelled"] is True, cr)
    expect(done["event"] == "done" and done["reason"] == "cancelled", done)
    expect(done["tokens_out"] == len(got) and len(got) < 90000, (done, len(got)))
    expect(done["session_tokens"] == 1 + 1 + len(got), done)
    again = c.call("cancel", target=rid)
    expect(again["cancelled"] is False, again)
    info = c.call("info", session="cancel-me")
    expect(info["tokens"] == done["session_tokens"] and not info["busy"], info)
    c.close()


@case
def disconnect_mid_turn():
    c = srv.client()
    c.send("generate", session="gone", text="abc", max_tokens=90000)
    got = bytearray()
    while len(got) < 10:
        got += c.read_event()["data"]
    c.close()
    c = srv.client()
    deadline = time.time() + 30 * SLOW
    while True:
        info = c.call("info", session="gone")
        if info["event"] == "result" and not info["busy"]:
            break
        expect(time.time() < deadline, "turn never ended: %r" % info)
        time.sleep(0.05)
    expect(1 + 3 + len(got) <= info["tokens"] < 1 + 3 + 90000, info)
    outs = b"".join(e["text"] for e in info["transcript"] if e["role"] == "out")
    expect(outs.startswith(bytes(got)) and len(outs) == info["tokens"] - 4, (outs[:20], info["tokens"]))
    # the session goes on from where it was saved
    out, done = c.wait(c.send("generate", session="gone", max_tokens=5))
    expect(done["event"] == "done" and done["session_tokens"] == info["tokens"] + 5, done)
    c.close()


@case
def client_that_never_reads():
    lazy = srv.client()
    lazy.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    total = 50000   # well past what socket buffers and --max-output hold
    rid = lazy.send("generate", session="lazy", text="z", max_tokens=total)
    time.sleep(0.5)
    c = srv.client()
    out, done = c.wait(c.send("generate", session="busy-bee", text="hi", max_tokens=300))
    expect(done["event"] == "done" and len(out) == 300, done)
    # The unread stream must come to a halt while unfinished: tokens_out
    # stops moving although the lazy session is still busy.
    deadline = time.time() + 60 * SLOW
    prev = c.call("stats")["tokens_out"]
    while True:
        time.sleep(0.3)
        cur = c.call("stats")["tokens_out"]
        if cur == prev:
            break
        expect(time.time() < deadline, "the unread stream never paused")
        prev = cur
    info = c.call("info", session="lazy")
    expect(info["busy"] is True, "paused, not finished: %r" % info)
    c.close()
    out, done = lazy.wait(rid)
    expect(done["event"] == "done" and done["reason"] == "length", done)
    expect(len(out) == total and done["tokens_out"] == total, (len(out), done))
    lazy.close()


def expect_error(ev, code, words=()):
    expect(ev["event"] == "error" and ev["code"] == code, ev)
    for w in words:
        expect(w in ev["message"], "%r not in %r" % (w, ev["message"]))


@case
def requests_without_reading_answers():
    """A client that floods requests and reads nothing: the server stops
    reading it (its answers are held back, bounded), then delivers every
    answer once the client reads."""
    c = srv.client()
    n = 20000
    blob = b"".join(msgpack.packb({"op": "nope", "id": i + 1}) for i in range(n))
    sender = threading.Thread(target=c.send_raw, args=(blob,))
    sender.start()
    time.sleep(1.0)
    other = srv.client()
    expect(other.call("hello")["event"] == "result", "others are served meanwhile")
    other.close()
    got = 0
    while got < n:
        ev = c.read_event()
        expect(ev is not None and ev["code"] == "unknown_op" and ev["id"] == got + 1, ev)
        got += 1
    sender.join()
    c.close()


@case
def bad_requests_get_errors():
    c = srv.client()
    expect_error(c.call("frobnicate"), "unknown_op", ["frobnicate"])
    expect_error(c.call("generate", text="x"), "bad_request", ["session"])
    expect_error(c.call("generate", session=5), "bad_request", ["session"])
    expect_error(c.call("generate", session="s", max_tokens="ten"), "bad_request", ["max_tokens"])
    expect_error(c.call("generate", session="s", max_tokens=100001), "limit", ["max_tokens"])
    expect_error(c.call("generate", session="s", temperature=-1), "bad_request", ["temperature"])
    expect_error(c.call("generate", session="s", top_p=1.5), "bad_request", ["top_p"])
    expect_error(c.call("generate", session="s", stop=["a"] * 9), "bad_request", ["stop"])
    expect_error(c.call("generate", session="s", text=b"a\x00b"), "bad_request", ["text"])
    expect_error(c.call("append", session="s"), "bad_request", ["text"])
    expect_error(c.call("cancel"), "bad_request", ["target"])
    expect_error(c.call("generate", session="x" * 129), "bad_name", ["129"])
    expect_error(c.call("generate", session=""), "bad_name")
    expect_error(c.call("info", session="tab\there"), "bad_name")
    expect_error(c.call("info", session=b"\xff\xfe"), "bad_name")
    expect_error(c.call("info", session="never-made"), "not_found")
    expect_error(c.call("export", session="never-made"), "not_found")
    expect_error(c.call("delete", session="never-made"), "not_found")
    # a request without a usable id is answered on id 0
    c.send_raw(msgpack.packb({"op": "hello"}))
    ev = c.read_event()
    expect(ev["id"] == 0 and ev["code"] == "bad_request" and "id" in ev["message"], ev)
    c.send_raw(msgpack.packb({"op": "hello", "id": -1}))
    ev = c.read_event()
    expect(ev["code"] == "bad_request", ev)
    # the connection still works after all of that
    expect(c.call("hello")["event"] == "result", "still serving")
    c.close()


@case
def busy_and_exists():
    c = srv.client()
    r1 = c.send("generate", session="one-at-a-time", text="a", max_tokens=3000 // SCALE)
    r2 = c.send("generate", session="one-at-a-time", text="b", max_tokens=5)
    r3 = c.send("append", session="one-at-a-time", text="c")
    _, e2 = c.wait(r2)
    _, e3 = c.wait(r3)
    expect_error(e2, "busy", ["one-at-a-time"])
    expect_error(e3, "busy")
    _, d1 = c.wait(r1)
    expect(d1["event"] == "done", d1)
    c.call("generate", session="other", max_tokens=1)
    expect_error(c.call("fork", session="other", to="one-at-a-time"), "exists")
    c.close()


@case
def non_msgpack_closes_connection():
    c = srv.client()
    c.send_raw(b"\xc1GET / HTTP/1.0\r\n\r\n")
    ev = c.read_event()
    expect_error(ev, "decode")
    expect(c.read_event() is None, "connection closed after a decode error")
    c = srv.client()
    c.send_raw(msgpack.packb([1, 2, 3]))
    expect_error(c.read_event(), "decode", ["map"])
    expect(c.read_event() is None, "closed after a non-map")
    expect(srv.client().call("hello")["event"] == "result", "others still served")


@case
def oversized_message_closes_connection():
    c = srv.client()
    c.send_raw(msgpack.packb({"op": "append", "id": 4, "session": "big",
                              "text": "x" * ((1 << 20) + 10)}))
    ev = c.read_event()
    expect_error(ev, "too_large")
    expect(c.read_event() is None, "closed after too_large")
    # a container header claiming 4 billion elements is refused up front
    c = srv.client()
    c.send_raw(b"\xdd\xff\xff\xff\xff")
    expect_error(c.read_event(), "too_large")
    c2 = srv.client()
    expect(c2.call("hello")["event"] == "result", "others still served")
    expect_error(c2.call("info", session="big"), "not_found")


@case
def garbage_storm_leaves_streams_intact():
    import random
    rnd = random.Random(5)
    ref = gen_alone("storm-ref", 17, "steady", 200)
    c = srv.client()
    rid = c.send("generate", session="storm", text="steady", max_tokens=200, seed=17,
                 temperature=0.9)
    closed = 0
    for i in range(40):
        g = srv.client()
        g.s.settimeout(10 * SLOW)
        g.send_raw(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 3000))))
        g.s.shutdown(socket.SHUT_WR)
        try:
            while g.read_event() is not None:
                pass
            closed += 1
        except (ConnectionResetError, socket.timeout):
            pass
        g.close()
    out, done = c.wait(rid)
    expect(done["event"] == "done" and out == ref, "the stream beside the garbage is intact")
    expect(closed == 40, "every garbage connection ended cleanly (%d of 40)" % closed)
    expect(srv.client().call("hello")["event"] == "result", "still serving")
    c.close()


@case
def stop_strings():
    whole = gen_alone("stop-ref", 5, "stop test", 200)
    stop = whole[40:42]
    first = whole.find(stop)
    c = srv.client()
    out, done = c.wait(c.send("generate", session="stop-run", text="stop test", max_tokens=200,
                              seed=5, temperature=0.9, stop=[stop, b"\x01never"]))
    expect(done["reason"] == "stop" and done["stop"] == stop, done)
    expect(out == whole[:first + 2], (out, whole[:first + 2]))
    c.close()


@case
def append_then_generate():
    c = srv.client()
    r = c.call("append", session="app", text="Hello, ")
    expect(r["event"] == "result" and r["session_tokens"] == 1 + 7, r)
    r = c.call("append", session="app", text="world")
    expect(r["session_tokens"] == 1 + 12, r)
    a, _ = c.wait(c.send("generate", session="app", max_tokens=30, seed=4))
    b, _ = c.wait(c.send("generate", session="app-whole", text="Hello, world", max_tokens=30, seed=4))
    expect(a == b, "append+generate equals one generate: %r vs %r" % (a, b))
    c.close()


@case
def admin_ops():
    c = srv.client()
    c.call("generate", session="orig", text="fork me", max_tokens=10, seed=2)
    f = c.call("fork", session="orig", to="copy")
    expect(f["event"] == "result" and f["to"] == "copy", f)
    a, _ = c.wait(c.send("generate", session="orig", max_tokens=30, seed=8))
    b, _ = c.wait(c.send("generate", session="copy", max_tokens=30, seed=8))
    expect(a == b, "a fork continues exactly like its source")
    ex = c.call("export", session="orig")
    expect(ex["event"] == "result" and isinstance(ex["data"], bytes), ex)
    im = c.call("import", session="imported", data=ex["data"])
    expect(im["event"] == "result" and im["tokens"] == 1 + 7 + 10 + 30, im)
    expect_error(c.call("import", session="imported", data=ex["data"]), "exists")
    bad = bytearray(ex["data"])
    bad[len(bad) // 2] ^= 0x40
    expect_error(c.call("import", session="broken", data=bytes(bad)), "bad_state")
    x, _ = c.wait(c.send("generate", session="orig", max_tokens=20, seed=9))
    y, _ = c.wait(c.send("generate", session="imported", max_tokens=20, seed=9))
    expect(x == y, "an import continues exactly like its source")
    names = [s["session"] for s in c.call("list")["sessions"]]
    expect("orig" in names and "copy" in names and "imported" in names, names)
    d = c.call("delete", session="copy")
    expect(d["event"] == "result" and d["deleted"] is True, d)
    expect_error(c.call("info", session="copy"), "not_found")
    names = [s["session"] for s in c.call("list")["sessions"]]
    expect("copy" not in names, names)
    c.close()


@case
def stats_fields():
    c = srv.client()
    st = c.call("stats")
    for k in ("uptime_s", "connections", "sessions_resident", "sessions_stored", "tokens_in",
              "tokens_out", "steps", "batch_hist", "step_ms", "save_ms", "backend"):
        expect(k in st, "stats lacks " + k)
    expect(st["connections"] >= 1 and st["sessions_stored"] >= 5 and st["steps"] > 0, st)
    expect(st["step_ms"]["p50"] <= st["step_ms"]["p99"] <= st["step_ms"]["max"], st["step_ms"])
    c.close()


def gen_alone_on(server, name, seed, text, n):
    c = server.client()
    out, done = c.wait(c.send("generate", session=name, text=text, max_tokens=n, seed=seed,
                              temperature=0.9))
    c.close()
    expect(done["event"] == "done", done)
    return out


@case
def eviction_keeps_sessions():
    # a second server with room for 2 resident sessions: 5 sessions round-robin
    t2 = scratch("lind-e2e-evict-")
    os.symlink(os.path.join(TMP, "model"), os.path.join(t2, "model"))
    s2 = Server(t2, "--max-resident", "2").start()
    try:
        c = s2.client()
        ref = {}
        for i in range(5):
            ref[i] = gen_alone_on(s2, "ref-%d" % i, 30 + i, "evict %d" % i, 24)
        parts = {i: b"" for i in range(5)}
        for rnd in range(3):
            for i in range(5):
                kw = {"seed": 30 + i, "text": "evict %d" % i} if rnd == 0 else {}
                out, done = c.wait(c.send("generate", session="ev-%d" % i, max_tokens=8,
                                          temperature=0.9, **kw))
                expect(done["event"] == "done", done)
                parts[i] += out
        for i in range(5):
            expect(parts[i] == ref[i], "session %d after evictions differs" % i)
        st = c.call("stats")
        expect(st["sessions_resident"] <= 2, st)
        c.close()
    finally:
        s2.stop()


@case
def corrupt_or_foreign_state_reported_alone():
    import sqlite3
    t3 = scratch("lind-e2e-corrupt-")
    os.symlink(os.path.join(TMP, "model"), os.path.join(t3, "model"))
    s3 = Server(t3).start()
    try:
        c = s3.client()
        for name in ("good", "bad"):
            expect(c.call("generate", session=name, text="x", max_tokens=5)["event"] == "done", name)
        c.close()
        expect(s3.stop() == 0, "clean stop")
        db = sqlite3.connect(s3.db)
        blob = bytearray(db.execute("SELECT state FROM sessions WHERE name='bad'").fetchone()[0])
        blob[len(blob) // 2] ^= 0x01
        db.execute("UPDATE sessions SET state=? WHERE name='bad'", (bytes(blob),))
        db.commit()
        db.close()
        s3.start()
        c = s3.client()
        expect_error(c.call("generate", session="bad", max_tokens=3), "bad_state", ["bad", "checksum"])
        expect(c.call("generate", session="good", max_tokens=3)["event"] == "done", "good loads")
        c.close()
        expect(s3.stop() == 0, "clean stop")
        # the same store under another model: every state is refused, by name
        write_model(os.path.join(t3, "model2"), seed=4)
        os.unlink(os.path.join(t3, "model"))
        os.symlink(os.path.join(t3, "model2"), os.path.join(t3, "model"))
        s3.start()
        c = s3.client()
        expect_error(c.call("generate", session="good", max_tokens=3), "bad_state", ["good"])
        expect(c.call("generate", session="fresh", max_tokens=3)["event"] == "done", "new sessions work")
        c.close()
    finally:
        s3.stop()


@case
def sync_normal_survives_process_kill():
    t5 = scratch("lind-e2e-normal-")
    os.symlink(os.path.join(TMP, "model"), os.path.join(t5, "model"))
    s5 = Server(t5, "--sync", "normal", "--transcript-bytes", "16").start()
    try:
        c = s5.client()
        a, d = c.wait(c.send("generate", session="n", text="normal sync", max_tokens=40, seed=3))
        expect(d["event"] == "done", d)
        c.close()
        s5.stop(signal.SIGKILL)
        s5.start()
        c = s5.client()
        info = c.call("info", session="n")
        expect(info["tokens"] == d["session_tokens"], (info, d))
        tail = b"".join(e["text"] for e in info["transcript"])
        expect(len(tail) <= 16 and tail == (b"normal sync" + a)[-len(tail):],
               "a 16-byte transcript tail: %r" % tail)
        c.close()
    finally:
        s5.stop()


@case
def inflight_limit():
    t4 = scratch("lind-e2e-inflight-")
    os.symlink(os.path.join(TMP, "model"), os.path.join(t4, "model"))
    s4 = Server(t4, "--max-inflight", "2").start()
    try:
        c = s4.client()
        a = c.send("generate", session="a", max_tokens=2000)
        b = c.send("generate", session="b", max_tokens=2000)
        expect_error(c.wait(c.send("generate", session="c", max_tokens=5))[1], "limit", ["in flight"])
        expect(c.wait(a)[1]["event"] == "done" and c.wait(b)[1]["event"] == "done", "first two run")
        expect(c.call("generate", session="c", max_tokens=5)["event"] == "done", "room again")
        c.close()
    finally:
        s4.stop()


@case
def long_prompt_does_not_stall_others():
    text = bytes((i * 7 + 13) % 250 + 1 for i in range(100000))
    a = srv.client()
    b = srv.client()
    rl = a.send("generate", session="long-prompt", text=text, max_tokens=5, seed=6)
    time.sleep(0.05)
    rq = b.send("generate", session="quick", text="hi", max_tokens=50)
    out_q, done_q = b.wait(rq)
    expect(done_q["event"] == "done" and len(out_q) == 50, done_q)
    st = b.call("info", session="long-prompt")
    expect(st["busy"] is True, "the quick stream ended while the long prompt was still feeding")
    out_l, done_l = a.wait(rl)
    expect(done_l["event"] == "done" and done_l["tokens_in"] == len(text), done_l)
    # fed in chunks, the result is the same as fed in two requests
    r = a.call("append", session="long-prompt-2", text=text[:60001])
    expect(r["event"] == "result", r)
    out2, _ = a.wait(a.send("generate", session="long-prompt-2", text=text[60001:], max_tokens=5,
                            seed=6))
    expect(out2 == out_l, "chunked feed differs: %r vs %r" % (out2, out_l))
    a.close()
    b.close()


@case
def sigterm_with_turns_in_flight():
    c = srv.client()
    ids = {c.send("generate", session="term-%d" % i, text="t", max_tokens=90000): i for i in range(4)}
    seen = 0
    while seen < 40:
        ev = c.read_event()
        c.events.append(ev)
        seen += 1
    srv.proc.send_signal(signal.SIGTERM)
    dones = {}
    for rid, i in ids.items():
        out, done = c.wait(rid)
        expect(done["event"] == "done" and done["reason"] == "cancelled", done)
        expect(done["tokens_out"] == len(out), (done, len(out)))
        dones[i] = done
    rc = srv.proc.wait(timeout=60 * SLOW)
    srv.proc = None
    expect(rc == 0, "exit status %d" % rc)
    srv.start()
    c = srv.client()
    for i, done in dones.items():
        info = c.call("info", session="term-%d" % i)
        expect(info["tokens"] == done["session_tokens"], (info, done))
    c.close()


try:
    rc = srv.stop()
    if rc != 0:
        print("FAIL final_shutdown: exit status %r: %s" % (rc, srv.tail()))
        failures += 1
    else:
        print("PASS final_shutdown")
except Exception as e:
    print("FAIL final_shutdown: %r" % e)
    failures += 1
if failures:
    print("server log tail:\n" + srv.tail())
sys.exit(1 if failures else 0)
