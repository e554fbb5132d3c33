"""tests/test_daemon_retention.py — retention in `lind serve` (docs/STATE.md,
"Retention"): the copies every HTTP answer keeps (resp-, and chat- for a
stateless chat) stay within --max-store-bytes however many requests come;
named sessions are never deleted for the quota, and once only they are
left new turns are refused with `insufficient_storage` (HTTP 507) while
reads go on, until a delete brings the store back under the quota;
--response-ttl deletes answers' copies that are not used again. The store
is read behind the daemon's back with Python's sqlite3 (a non-exclusive
handle, as tools use)."""
import os
import re
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Http, Server, Client, Skip, case, expect, finish, SLOW, LINDCTL, TMP  # noqa: E402


def metric(h, name):
    st, text = h.get("/metrics")
    m = re.search(r"(?m)^%s (\S+)$" % name, text)
    return float(m.group(1)) if st == 200 and m else None


def usage(srv):
    """(sessions, bytes of state and transcript, {origin: count}) in the store now."""
    db = sqlite3.connect(srv.db, timeout=30 * SLOW)
    try:
        n, b = db.execute("SELECT count(*), coalesce(sum(length(state) + length(transcript)), 0)"
                          " FROM sessions").fetchone()
        by = dict(db.execute("SELECT origin, count(*) FROM sessions GROUP BY origin").fetchall())
        return n, b, by
    finally:
        db.close()


def wait_for(cond, what, limit=60):
    """cond() holding; the store thread collects within a second of a commit."""
    deadline = time.time() + limit * SLOW
    while not cond():
        if time.time() > deadline:
            raise AssertionError(what)
        time.sleep(0.02)


def gen(c, session, text, n=2):
    return c.call("generate", session=session, text=text, max_tokens=n, seed=1)


@case
def quota_bounds_http_answers():
    """200 requests, half completions (a resp- copy each), half stateless
    chats (resp- and chat- copies), each a different prompt so nothing is
    shared: the sessions' bytes never pass the quota by more than what the
    last commit added, and end within it."""
    quota = 1000000
    srv = Server("ret-quota", extra=["--http", "0", "--max-store-bytes", str(quota)]).start()
    h = Http(srv)
    try:
        peak = peak_n = 0
        per = None
        n_req = 200
        for i in range(n_req):
            if i % 2:
                st, j = h.post("/v1/chat/completions", {
                    "messages": [{"role": "user", "content": "question %d" % i}], "max_tokens": 1})
            else:
                st, j = h.post("/v1/completions", {"prompt": "prompt %d " % i, "max_tokens": 1})
            expect(st == 200, "request %d: %d %r" % (i, st, j))
            n, b, _ = usage(srv)
            if per is None:
                per = b   # one answer's copy: the first completion's resp-
            peak, peak_n = max(peak, b), max(peak_n, n)
        # A commit group of one request (resp- and chat-) may be seen
        # before the store thread's next collection step.
        expect(peak <= quota + 2 * per, "peak %d bytes, quota %d, one copy %d" % (peak, quota, per))
        wait_for(lambda: usage(srv)[1] <= quota, "the store stays past the quota: %r" % (usage(srv),))
        n, b, by = usage(srv)
        size = os.path.getsize(srv.db) + (os.path.getsize(srv.db + "-wal")
                                         if os.path.exists(srv.db + "-wal") else 0)
        expect(size <= 8 * quota, "database and log files hold %d bytes" % size)
        print("NOTE %d HTTP answers (%d completions, %d stateless chats), one copy %d bytes: "
              "without retention %d bytes; with --max-store-bytes %d the sessions peaked at %d "
              "bytes (%d sessions) and ended at %d bytes (%d sessions); database + WAL files %d bytes"
              % (n_req, n_req // 2, n_req // 2, per, per * (n_req + n_req // 2), quota, peak, peak_n,
                 b, n, size), flush=True)
        expect(set(by) <= {2, 3}, "only ephemeral copies: %r" % by)
    finally:
        h.close()
        srv.stop()


@case
def named_sessions_refused_past_quota():
    """Named sessions (socket and HTTP) fill the quota: none is deleted,
    new turns get insufficient_storage (507 over HTTP), reads go on, and a
    delete lets turns in again."""
    srv = Server("ret-named", extra=["--http", "0", "--max-store-bytes", "300000"]).start()
    c = Client(srv.sock)
    h = Http(srv)
    try:
        for name in ("a", "b"):
            ev = gen(c, name, "hello %s " % name)
            expect(ev["event"] == "done", "turn on %s: %r" % (name, ev))
        st, j = h.post("/v1/completions", {"prompt": "hi ", "max_tokens": 1, "session": "web"})
        expect(st == 200, "HTTP named: %d %r" % (st, j))
        db = sqlite3.connect(srv.db, timeout=30 * SLOW)
        origins = dict(db.execute("SELECT name, origin FROM sessions WHERE name IN ('a', 'web')"))
        db.close()
        expect(origins == {"a": 0, "web": 1}, "origins: %r" % origins)

        def refused():
            ev = gen(c, "a", "more ")
            return ev["event"] == "error" and ev["code"] == "insufficient_storage"
        wait_for(refused, "no refusal past the quota: %r" % (usage(srv),))
        ev = gen(c, "new", "x ")
        expect(ev["event"] == "error" and ev["code"] == "insufficient_storage" and
               "--max-store-bytes" in ev["message"], "a new session refused too: %r" % ev)
        st, j = h.post("/v1/completions", {"prompt": "hi ", "max_tokens": 1})
        expect(st == 507 and j["error"]["code"] == "insufficient_storage", "HTTP: %d %r" % (st, j))
        expect(metric(h, "lind_store_refusing_turns") == 1 and metric(h, "lind_store_bytes") > 300000,
               "/metrics says so")
        # The named HTTP turn's resp- snapshot is collected; the named stay.
        wait_for(lambda: usage(srv)[0] == 3, "the resp- snapshot stays: %r" % (usage(srv),))
        n, b, by = usage(srv)
        expect(b > 300000 and by == {0: 2, 1: 1}, "named sessions kept: %d bytes, %r" % (b, by))
        # Reads go on.
        info = c.call("info", session="a")
        expect(info["event"] == "result" and info["tokens"] > 0, "info: %r" % info)
        ls = c.call("list")
        expect(sorted(s["session"] for s in ls["sessions"]) == ["a", "b", "web"], "list: %r" % ls)
        ex = c.call("export", session="b")
        expect(ex["event"] == "result" and len(ex["data"]) > 100000, "export works")
        # A delete makes room; turns are accepted again.
        expect(c.call("delete", session="b")["event"] == "result", "delete")
        wait_for(lambda: gen(c, "a", "again ")["event"] == "done", "turns not accepted after a delete")
        expect(metric(h, "lind_store_refusing_turns") == 0, "/metrics: accepting again")
        expect("new turns are refused" in srv.log() and "accepted again" in srv.log(),
               "the log says why: %s" % srv.log())
    finally:
        h.close()
        c.close()
        srv.stop()


@case
def response_ttl_expires_copies():
    """--response-ttl 1s: an answer's resp- copy goes once not used for a
    second (the daemon's own lease on it does not keep it); named sessions
    stay (--session-ttl is off)."""
    srv = Server("ret-ttl", extra=["--http", "0", "--response-ttl", "1s"]).start()
    c = Client(srv.sock)
    h = Http(srv)
    try:
        expect(gen(c, "keep", "hello ")["event"] == "done", "named turn")
        st, j = h.post("/v1/completions", {"prompt": "hi ", "max_tokens": 1})
        expect(st == 200, "completion: %d %r" % (st, j))
        rid = j["id"]
        wait_for(lambda: usage(srv)[2].get(2, 0) == 0, "%s never expired: %r" % (rid, usage(srv)))
        n, _, by = usage(srv)
        expect(n == 1 and by == {0: 1}, "the named session stays: %r" % by)
        st, j = h.post("/v1/responses", {"input": "and then", "previous_response_id": rid,
                                         "max_output_tokens": 1})
        expect(st == 404, "an expired response cannot be continued: %d %r" % (st, j))
    finally:
        h.close()
        c.close()
        srv.stop()


@case
def store_false_keeps_nothing():
    """store: false: a completion, a stateless chat (n = 2 as well) and a
    response leave no session behind; on a named session the session
    stays and no resp- snapshot is made."""
    srv = Server("ret-nostore", extra=["--http", "0"]).start()
    h = Http(srv)
    try:
        for path, body in (("/v1/completions", {"prompt": "hi ", "max_tokens": 2}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                     "max_tokens": 2}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "yo"}],
                                                     "max_tokens": 2, "n": 2}),
                           ("/v1/responses", {"input": "hi", "max_output_tokens": 2})):
            st, j = h.post(path, dict(body, store=False))
            expect(st == 200, "%s: %d %r" % (path, st, j))
            n, _, by = usage(srv)
            expect(n == 0, "%s left %r" % (path, by))
        st, j = h.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 2, "session": "mine", "store": False})
        expect(st == 200, "named: %d %r" % (st, j))
        n, _, by = usage(srv)
        expect(n == 1 and by == {1: 1}, "only the named session: %r" % by)
        st, j = h.post("/v1/completions", {"prompt": "hi ", "max_tokens": 2, "store": "no"})
        expect(st == 400 and "store" in j["error"]["message"], "a non-boolean store: %d %r" % (st, j))
        st, j = h.post("/v1/completions", {"prompt": "hi ", "max_tokens": 2})
        expect(st == 200 and usage(srv)[0] == 2, "the default keeps the answer: %r" % (usage(srv),))
    finally:
        h.close()
        srv.stop()


def lindctl(srv, *args):
    r = subprocess.run([LINDCTL, "--socket", srv.sock] + list(args), capture_output=True,
                       timeout=60 * SLOW)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


@case
def lindctl_ls_rm_gc():
    """sessions ls shows origin, bytes, age and idle time; rm --prefix
    --older-than deletes what matches; gc collects what the options allow."""
    srv = Server("ret-ctl", extra=["--http", "0"]).start()
    c = Client(srv.sock)
    h = Http(srv)
    try:
        for name in ("keep", "tmp/a", "tmp/b"):
            expect(gen(c, name, "hello ")["event"] == "done", "turn on " + name)
        st, j = h.post("/v1/completions", {"prompt": "hi ", "max_tokens": 1})
        expect(st == 200, "completion: %d %r" % (st, j))
        rid = j["id"]
        db = sqlite3.connect(srv.db, timeout=30 * SLOW, isolation_level=None)
        day = 86400000
        now = int(time.time() * 1000)
        db.execute("UPDATE sessions SET created_ms = ?, updated_ms = ? WHERE name = 'tmp/a'",
                   (now - 3 * day, now - 2 * day))
        rc, out, err = lindctl(srv, "sessions", "ls")
        expect(rc == 0, "ls: %d %s" % (rc, err))
        lines = out.splitlines()
        expect(lines[0].split() == ["SESSION", "ORIGIN", "TOKENS", "BYTES", "AGE", "IDLE", "UPDATED"],
               "header: %r" % lines[0])
        rows = {ln.split()[0]: ln.split() for ln in lines[1:-1]}
        b = db.execute("SELECT length(state) + length(transcript) FROM sessions WHERE name = ?",
                       (rid,)).fetchone()[0]
        expect(rows[rid][1] == "response" and int(rows[rid][3]) == b, "resp- row: %r" % rows[rid])
        expect(rows["keep"][1] == "socket" and rows["tmp/a"][4] == "3d0h" and rows["tmp/a"][5] == "2d0h",
               "rows: %r" % rows)
        expect(lines[-1].startswith("4 sessions, "), "total line: %r" % lines[-1])
        rc, out, err = lindctl(srv, "sessions", "rm", "--prefix", "tmp/", "--older-than", "1d")
        expect(rc == 0 and out.strip() == "deleted tmp/a", "rm: %d %r %r" % (rc, out, err))
        rc, out, err = lindctl(srv, "sessions", "rm", "--prefix", "nothing/")
        expect(rc == 0 and "no session matches" in out, "rm nothing: %d %r" % (rc, out))
        rc, _, err = lindctl(srv, "sessions", "rm", "--older-than", "1d")
        expect(rc == 2 and "--prefix" in err, "--older-than alone: %d %r" % (rc, err))
        # 40 days idle: past the default --response-ttl of 30 days.
        db.execute("UPDATE sessions SET updated_ms = ? WHERE name LIKE 'resp-%'", (now - 40 * day,))
        rc, out, err = lindctl(srv, "sessions", "gc")
        expect(rc == 0 and re.match(r"collected \d+ expired and 0 over the quota \(\d+ bytes\); "
                                    r"2 sessions hold \d+ bytes$", out.strip()), "gc: %d %r %r" % (rc, out, err))
        names = sorted(r[0] for r in db.execute("SELECT name FROM sessions"))
        expect(names == ["keep", "tmp/b"], "left: %r" % names)
        db.close()
    finally:
        h.close()
        c.close()
        srv.stop()


def warnings(srv):
    with open(srv.logpath, "rb") as f:
        return [ln for ln in f.read().decode(errors="replace").splitlines()
                if " warn " in ln or " error " in ln or "status=5" in ln][-6:]


def fill_disk(path):
    """Write a file at path until the filesystem is full; its size."""
    n = 0
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
                os.fsync(f.fileno())
                n += 65536
        except OSError:
            pass
    return n


def tmpfs(name, size):
    """A size-limited tmpfs under TMP (a real ENOSPC; mounting needs root:
    Skip where it is not permitted)."""
    mnt = os.path.join(TMP, name)
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        raise Skip("cannot mount a size-limited tmpfs here: %s" % r.stderr.decode().strip())
    return mnt


@case
def full_disk_serves_what_it_can():
    """The store on a 40 MiB tmpfs that answers fill: the turn that finds
    no room is refused with insufficient_storage saying the disk is full,
    later turns are refused at once, reads and deletes go on, and once
    sessions are deleted turns are accepted again."""
    mnt = tmpfs("ret-full-disk", "40m")
    srv = None
    try:
        db = os.path.join(mnt, "lind.db")
        srv = Server("ret-full", extra=["--http", "0"], db=db).start()
        expect(os.path.getsize(db + "-reserve") == 8 << 20, "the reserve is kept")
        c = Client(srv.sock)
        h = Http(srv)
        ids = []
        for i in range(1000):
            st, j = h.post("/v1/completions", {"prompt": "prompt %d " % i, "max_tokens": 1})
            if st != 200:
                break
            ids.append(j["id"])
        expect(st == 507 and j["error"]["code"] == "insufficient_storage" and "full" in j["error"]["message"],
               "the full disk refused: %d %r" % (st, j))
        expect(not os.path.exists(db + "-reserve"), "the reserve was released: %s" % warnings(srv))
        st, j = h.post("/v1/completions", {"prompt": "more ", "max_tokens": 1})
        expect(st == 507 and "disk holding the store is full" in j["error"]["message"],
               "then refused at once: %d %r" % (st, j))
        ev = gen(c, "named", "hello ")
        expect(ev["event"] == "error" and ev["code"] == "insufficient_storage", "socket too: %r" % ev)
        ls = c.call("list")
        expect(ls["event"] == "result" and len(ls["sessions"]) == len(ids), "list: %d of %d" %
               (len(ls.get("sessions", [])), len(ids)))
        ex = c.call("export", session=ids[0])
        expect(ex["event"] == "result", "export: %r" % ex)
        for rid in ids[:20]:
            d = c.call("delete", session=rid)
            expect(d["event"] == "result", "delete on a full disk: %r %s" % (d, warnings(srv)))
        st, j = h.post("/v1/completions", {"prompt": "after ", "max_tokens": 1})
        expect(st == 200, "accepted after deletes: %d %r" % (st, j))
        expect("accepted again" in srv.log(), "the log says so: %s" % warnings(srv))
        h.close()
        c.close()
        print("NOTE full disk: a 40 MiB tmpfs took %d answers before the first insufficient_storage"
              % len(ids), flush=True)
    finally:
        try:
            if srv and srv.proc:
                srv.stop()
        finally:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


@case
def full_disk_restart():
    """A store whose disk another file filled to the last byte while the
    daemon was stopped: it starts (the reserve makes room for its open),
    says why it refuses turns, serves reads, and once there is room again
    (the other file gone, a session deleted) serves turns and keeps its
    reserve again."""
    mnt = tmpfs("ret-full-restart", "24m")
    srv = None
    try:
        db = os.path.join(mnt, "lind.db")
        srv = Server("ret-restart", db=db).start()
        c = Client(srv.sock)
        for name in ("a", "b", "c"):
            expect(gen(c, name, "hello ")["event"] == "done", "turn on " + name)
        c.close()
        srv.stop()
        filler = os.path.join(mnt, "filler")
        fill_disk(filler)
        srv.start()
        expect("released the 8388608-byte reserve" in srv.log(), "start says why: %s" % warnings(srv))
        c = Client(srv.sock)
        ev = gen(c, "a", "more ")
        expect(ev["event"] == "error" and ev["code"] == "insufficient_storage" and "full" in ev["message"],
               "turns refused after the restart: %r" % ev)
        ls = c.call("list")
        expect(ls["event"] == "result" and [s["session"] for s in ls["sessions"]] == ["a", "b", "c"],
               "reads after the restart: %r" % ls)
        info = c.call("info", session="b")
        expect(info["event"] == "result" and info["tokens"] > 0, "info: %r" % info)
        os.unlink(filler)
        d = c.call("delete", session="c")
        expect(d["event"] == "result", "delete: %r" % d)
        ev = gen(c, "a", "more ")
        expect(ev["event"] == "done", "turns again once there is room: %r" % ev)
        expect(os.path.getsize(db + "-reserve") == 8 << 20, "the reserve made again")
        c.close()
    finally:
        try:
            if srv and srv.proc:
                srv.stop()
        finally:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


@case
def options_checked():
    """Durations with units; a bad one is refused at start with the option named."""
    for bad in (["--response-ttl", "3w"], ["--session-ttl", "-1s"], ["--max-store-bytes", "lots"]):
        srv = Server("ret-opt", extra=bad)
        rc = srv.start(expect_fail=True)
        expect(rc == 2 and bad[0] in srv.log(), "%r: exit %r, %s" % (bad, rc, srv.log()[-300:]))



finish()
