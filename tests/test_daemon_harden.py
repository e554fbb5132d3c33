"""tests/test_daemon_harden.py — `lind serve` against the operational
mistakes of issue 14 ("Hardening the daemon"), as a user would make them:

  - a second daemon on the same database (another socket) is refused, naming
    the database and the running daemon's pid; the first keeps serving;
  - a database the daemon cannot write is refused at start with the reason;
  - the database (or only its -wal) removed under a running daemon: the
    next turn ends with `io` naming what happened instead of `done`, the
    daemon logs it, and after a restart the turns acknowledged before the
    removal of the -wal are there;
  - a socket in a missing directory is reported as such, not as
    "permission denied";
  - connections beyond the open-file limit get a `limit` error (id 0) and a
    log line, and connections work again once others close;
  - request id 0 and an id already in flight on the connection are refused
    (`bad_request` on id 0), the connection stays usable, and the id is free
    again once its request ended.

Runs the daemon from $LIND_BUILD (default build) on the shipped model.
"""
import os
import resource
import signal
import sys
import tempfile
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, case, expect, finish, remove_at_exit, TMP, SLOW  # noqa: E402


@case
def second_daemon_same_db_refused():
    a = Server("two-a").start()
    try:
        b = Server("two-b", db=a.db)
        rc = b.start(expect_fail=True)
        log = b.log()
        expect(rc != 0, "the second daemon exited with %r" % rc)
        expect(a.db in log and ("pid %d" % a.proc.pid) in log,
               "its message names the database and pid %d: %s" % (a.proc.pid, log))
        c = Client(a.sock)
        ev = c.call("hello")
        expect(ev["event"] == "result", "the first daemon still serves: %r" % ev)
        c.close()
    finally:
        a.stop()


@case
def unwritable_db_refused_at_start():
    s = Server("ro")
    # Make the store once, then take write access away: as root, by running
    # the daemon as nobody in a directory it may read but not write.
    Server("ro", db=s.db).start().stop()
    if os.getuid() == 0:
        os.chmod(s.dir, 0o755)
        os.chmod(TMP, 0o755)
        os.chmod(s.db, 0o644)
        sockdir = tempfile.mkdtemp(prefix="lind-harden-sock-")
        remove_at_exit(sockdir)
        os.chmod(sockdir, 0o777)
        s.sock = os.path.join(sockdir, "s.sock")

        def drop():
            os.setgid(65534)
            os.setuid(65534)
        s.preexec = drop
    else:
        os.chmod(s.db, 0o444)
    rc = s.start(expect_fail=True)
    log = s.log()
    expect(rc != 0, "exit status %r" % rc)
    expect("not writable" in log and s.db in log, "the reason, naming the database: %s" % log)


def generate(c, session, text, n=4):
    return c.call("generate", session=session, text=text, max_tokens=n, seed=1, temperature=0.0)


@case
def db_removed_under_daemon():
    s = Server("rm").start()
    try:
        c = Client(s.sock)
        ev = generate(c, "s1", "In the beginning")
        expect(ev["event"] == "done", "first turn: %r" % ev)
        os.unlink(s.db)
        ev = generate(c, "s1", " more")
        expect(ev["event"] == "error" and ev["code"] == "io", "a turn after the removal: %r" % ev)
        expect("removed" in ev["message"], "the error says what happened: %r" % ev["message"])
        ev = generate(c, "s2", "new")
        expect(ev["event"] == "error" and ev["code"] == "io", "and every later turn: %r" % ev)
        log = s.log()
        expect(" error store msg=" in log and "removed" in log, "the daemon logged it: %s" % log)
        c.close()
    finally:
        s.stop()


@case
def wal_removed_under_daemon_keeps_acknowledged():
    s = Server("wal").start()
    try:
        c = Client(s.sock)
        ev = generate(c, "kept", "And God said")
        expect(ev["event"] == "done", "first turn: %r" % ev)
        acked = ev["session_tokens"]
        os.unlink(s.db + "-wal")
        ev = generate(c, "kept", " again")
        expect(ev["event"] == "error" and ev["code"] == "io" and "write-ahead log" in ev["message"],
               "a turn after the -wal went: %r" % ev)
        c.close()
    finally:
        s.stop(signal.SIGKILL)     # a crash: no orderly checkpoint at close
    s.start()
    try:
        c = Client(s.sock)
        ev = c.call("info", session="kept")
        expect(ev["event"] == "result" and ev["tokens"] == acked,
               "after a restart the acknowledged turn is there (%d tokens): %r" % (acked, ev))
        c.close()
    finally:
        s.stop()


@case
def socket_in_missing_directory():
    s = Server("nosock", sock=os.path.join(TMP, "no-such-dir", "lind.sock"))
    rc = s.start(expect_fail=True)
    log = s.log()
    expect(rc != 0, "exit status %r" % rc)
    expect("does not exist" in log and "no-such-dir" in log, "names the missing directory: %s" % log)
    expect("ermission denied" not in log, "not 'permission denied': %s" % log)


@case
def connections_beyond_fd_limit_answered():
    limit = 64

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    s = Server("fds", preexec=low_limit).start()
    conns = []
    try:
        refused = 0
        served = 0
        for _ in range(limit + 8):
            try:
                c = Client(s.sock)
            except OSError:
                break
            conns.append(c)
            # A refused connection may be closed before the hello reaches the
            # daemon (the send fails) or with the hello unread (a later read
            # fails): its answer was written first, so it is read either way.
            try:
                c.s.sendall(msgpack.packb({"op": "hello", "id": 1}))
            except OSError:
                pass
            try:
                ev = c.event()
            except OSError:
                ev = None
            if ev and ev["event"] == "result":
                served += 1
            elif ev and ev["event"] == "error":
                expect(ev["id"] == 0 and ev["code"] == "limit" and "open files" in ev["message"],
                       "a refused connection's answer: %r" % ev)
                refused += 1
        expect(served >= limit // 2, "only %d connections served under a limit of %d" % (served, limit))
        expect(refused >= 1, "no connection was refused with an answer (%d served)" % served)
        log = s.log()
        expect("limit of %d open files" % limit in log, "the refusal is logged: %s" % log)
        for c in conns:
            c.close()
        conns = []
        # The daemon sees the closes on its next loop turns: a new connection is
        # served once it has (polled with a deadline, not a fixed sleep).
        deadline = time.time() + 30 * SLOW
        while True:
            c = Client(s.sock)
            try:
                ev = c.call("hello")
            except (OSError, EOFError) as e:   # still refused: answered on id 0, then closed
                ev = {"event": repr(e)}
            c.close()
            if ev["event"] == "result" or time.time() > deadline:
                break
            time.sleep(0.1)
        expect(ev["event"] == "result", "a connection after the others closed: %r" % ev)
    finally:
        for c in conns:
            c.close()
        s.stop()


@case
def request_ids_zero_and_duplicates():
    s = Server("ids").start()
    try:
        c = Client(s.sock)
        c.s.sendall(msgpack.packb({"op": "hello", "id": 0}))
        ev = c.event()
        expect(ev["id"] == 0 and ev["event"] == "error" and ev["code"] == "bad_request"
               and "connection-level" in ev["message"], "id 0: %r" % ev)
        ev = c.call("hello")
        expect(ev["event"] == "result", "the connection stays usable: %r" % ev)
        # A long generate in flight on id 50, then another request on id 50.
        c.send("generate", id=50, session="long", text="And", max_tokens=60000)
        c.send("info", id=50, session="long")
        while True:
            ev = c.event()
            if ev["id"] == 0:
                break
            expect(ev["id"] == 50 and ev["event"] == "token", "unexpected %r" % ev)
        expect(ev["event"] == "error" and ev["code"] == "bad_request"
               and "already in flight" in ev["message"] and "50" in ev["message"],
               "a duplicate in-flight id: %r" % ev)
        ev = c.call("cancel", target=50)
        expect(ev["event"] == "result" and ev["cancelled"], "cancel: %r" % ev)
        ev = c.final(50)
        expect(ev["event"] == "done" and ev["reason"] == "cancelled", "the generate ended: %r" % ev)
        ev = c.call("info", id=50, session="long")
        expect(ev["event"] == "result", "id 50 is free again once its request ended: %r" % ev)
        c.close()
    finally:
        s.stop()


finish()
