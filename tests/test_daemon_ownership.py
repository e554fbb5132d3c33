"""tests/test_daemon_ownership.py — versions and leases in a single `lind
serve` on SQLite (docs/SCALE.md: the same code as several nodes on
PostgreSQL). Another writer is simulated by writing the database behind the
daemon's back with Python's sqlite3 (a non-exclusive handle, as tools use):

- a session whose stored version moved on while it was resident: the next
  turn runs but its save is refused with `conflict` (the other write is
  kept, never overwritten), and the turn after it resumes from the store;
- a session leased by another owner: `moved` naming it, nothing runs; once
  that lease is gone the daemon serves it;
- the daemon's own leases: taken while a session is resident (owner
  `local`), renewed, and given back on eviction and at a clean stop;
- --lease-wait: a request for a session leased elsewhere waits until the
  lease expires and then runs."""
import json
import os
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, case, expect, finish, SLOW, LINDCTL, http_port  # noqa: E402


def gen(c, session, text, n=4, seed=None):
    f = {"session": session, "text": text, "max_tokens": n}
    if seed is not None:
        f["seed"] = seed
    toks = []
    ev = c.final(c.send("generate", **f), toks)
    return ev, b"".join(toks)


def db_of(srv):
    return sqlite3.connect(srv.db, timeout=30 * SLOW, isolation_level=None)


def now_ms():
    return int(time.time() * 1000)


@case
def version_moved_on_is_conflict():
    srv = Server("own-cas").start()
    try:
        c = Client(srv.sock)
        ev, _ = gen(c, "s", b"hello ", seed=1)
        expect(ev["event"] == "done", "first turn: %r" % ev)
        db = db_of(srv)
        (v,) = db.execute("SELECT version FROM sessions WHERE name = 's'").fetchone()
        expect(v == 1, "created at version 1, got %r" % v)
        # Another writer saves the session (its own content) behind the daemon.
        db.execute("UPDATE sessions SET version = version + 1, tokens = 4242 WHERE name = 's'")
        ev, _ = gen(c, "s", b"again ")
        expect(ev["event"] == "error" and ev["code"] == "conflict", "stale save: %r" % ev)
        expect("changed in the store" in ev["message"] and "version 1 expected" in ev["message"],
               "the message says why: %r" % ev["message"])
        (v, tok) = db.execute("SELECT version, tokens FROM sessions WHERE name = 's'").fetchone()
        expect(v == 2 and tok == 4242, "the other write is kept: version %r tokens %r" % (v, tok))
        # The next turn resumes from the store's version and saves over it.
        ev, _ = gen(c, "s", b"third ")
        expect(ev["event"] == "done", "after the conflict: %r" % ev)
        (v,) = db.execute("SELECT version FROM sessions WHERE name = 's'").fetchone()
        expect(v == 3, "saved on top of version 2: %r" % v)
        c.close()
        db.close()
    finally:
        srv.stop()


@case
def leased_elsewhere_is_moved():
    srv = Server("own-moved").start()
    try:
        db = db_of(srv)
        db.execute("INSERT INTO leases(name, owner, expires_ms) VALUES('t', 'node-b', ?)",
                   (now_ms() + 3600000,))
        c = Client(srv.sock)
        ev, _ = gen(c, "t", b"hi ")
        expect(ev["event"] == "error" and ev["code"] == "moved", "leased elsewhere: %r" % ev)
        expect("leased by node 'node-b'" in ev["message"], "names the owner: %r" % ev["message"])
        expect(db.execute("SELECT count(*) FROM sessions WHERE name = 't'").fetchone()[0] == 0,
               "nothing ran")
        # lindctl gives `moved` its own exit status (docs/LINDCTL.md) and shows the owner.
        r = subprocess.run([LINDCTL, "--socket", srv.sock, "generate", "t", "hi", "-n", "4"],
                           capture_output=True, text=True, timeout=60 * SLOW)
        expect(r.returncode == 15 and "moved" in r.stderr and "node-b" in r.stderr,
               "lindctl on a moved session: exit %d, %r" % (r.returncode, r.stderr))
        db.execute("DELETE FROM leases WHERE name = 't'")   # node-b gave it back
        ev, _ = gen(c, "t", b"hi ")
        expect(ev["event"] == "done", "free again: %r" % ev)
        owner, exp = db.execute("SELECT owner, expires_ms FROM leases WHERE name = 't'").fetchone()
        expect(owner == "local" and exp > now_ms(), "resident under our lease: %r %r" % (owner, exp))
        c.close()
        db.close()
    finally:
        srv.stop()


@case
def http_moved_and_conflict_statuses():
    """Through the HTTP front door: a session leased elsewhere is 421 with
    code `moved` naming the owner; a stale save is 409 with `conflict`."""
    srv = Server("own-http", extra=["--http", "0"]).start()
    try:
        port = http_port(srv)

        def complete(session, prompt):
            r = subprocess.run(["curl", "-s", "-S", "-o", "-", "-w", "\n%{http_code}", "--max-time", str(60 * SLOW),
                                "-H", "Content-Type: application/json", "--data-binary", "@-",
                                "http://127.0.0.1:%d/v1/completions" % port],
                               input=json.dumps({"prompt": prompt, "max_tokens": 4, "session": session}).encode(),
                               capture_output=True, timeout=120 * SLOW)
            out, _, code = r.stdout.rpartition(b"\n")
            return int(code or 0), json.loads(out)
        db = db_of(srv)
        db.execute("INSERT INTO leases(name, owner, expires_ms) VALUES('h', 'node-b', ?)",
                   (now_ms() + 3600000,))
        st, body = complete("h", "hi ")
        expect(st == 421 and body["error"]["code"] == "moved" and "node-b" in body["error"]["message"],
               "leased elsewhere over HTTP: %d %r" % (st, body))
        db.execute("DELETE FROM leases WHERE name = 'h'")
        st, body = complete("h", "hi ")
        expect(st == 200, "free again: %d %r" % (st, body))
        db.execute("UPDATE sessions SET version = version + 1 WHERE name = 'h'")
        st, body = complete("h", "again ")
        expect(st == 409 and body["error"]["code"] == "conflict", "stale save over HTTP: %d %r" % (st, body))
        db.close()
    finally:
        srv.stop()


@case
def leases_renewed_and_given_back():
    lease = 600
    srv = Server("own-renew", extra=["--lease-ms", str(lease), "--max-resident", "2"]).start()
    try:
        db = db_of(srv)
        c = Client(srv.sock)
        ev, _ = gen(c, "r0", b"a ")
        expect(ev["event"] == "done", "%r" % ev)
        (first,) = db.execute("SELECT expires_ms FROM leases WHERE name = 'r0'").fetchone()
        # Renewed from the timer with no turn: wait (deadline) for the expiry to move.
        deadline = time.time() + 30 * SLOW
        while True:
            (exp,) = db.execute("SELECT expires_ms FROM leases WHERE name = 'r0'").fetchone()
            if exp > first:
                break
            expect(time.time() < deadline, "the lease was never renewed")
            time.sleep(0.05)
        # Two more sessions evict r0 (2 slots): its lease is given back.
        for s in ("r1", "r2"):
            ev, _ = gen(c, s, b"b ")
            expect(ev["event"] == "done", "%r" % ev)
        names = sorted(r[0] for r in db.execute("SELECT name FROM leases"))
        expect(names == ["r1", "r2"], "leases after evicting r0: %r" % names)
        c.close()
        srv.stop()
        left = db.execute("SELECT count(*) FROM leases").fetchone()[0]
        expect(left == 0, "a clean stop gives every lease back, %d left" % left)
        db.close()
    finally:
        if srv.proc:
            srv.stop()


@case
def lease_wait_runs_after_expiry():
    srv = Server("own-wait", extra=["--lease-wait", str(int(60000 * SLOW))]).start()
    try:
        db = db_of(srv)
        expiry = now_ms() + 700
        db.execute("INSERT INTO leases(name, owner, expires_ms) VALUES('w', 'node-dead', ?)", (expiry,))
        c = Client(srv.sock)
        ev, _ = gen(c, "w", b"wait ")
        expect(ev["event"] == "done", "served once the lease expired: %r" % ev)
        expect(now_ms() >= expiry, "served before the other lease expired")
        (owner,) = db.execute("SELECT owner FROM leases WHERE name = 'w'").fetchone()
        expect(owner == "local", "taken over: %r" % owner)
        c.close()
        db.close()
    finally:
        srv.stop()


finish()
