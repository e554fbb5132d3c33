"""tests/scale_nodes.py — the cases of tests/test_daemon_scale.c: several
`lind serve` nodes on one PostgreSQL database (docs/SCALE.md). Not run on
its own: test_daemon_scale starts the database server and runs this with
LIND_PG_URI set (a libpq URI with %s for the database name).

- scale_moving_pg: three nodes, 64 sessions, clients pick a node at random
  for every turn; `moved` sends them to the named owner. Nodes keep few
  sessions resident, so evictions give leases back and sessions really move.
  At the end every acknowledged turn is in the store, in order, nothing
  else is, and every stream equals an uninterrupted one on a single node.
- scale_failover_pg: a node is SIGKILLed mid-turn; its leases expire; another
  node (waiting for them with --lease-wait) continues its sessions: every
  acknowledged turn present and the continued streams byte-identical to
  uninterrupted ones (fixed seeds, sampling at temperature 0.8).
- scale_race_pg: two nodes get the same new session at the same moment:
  exactly one serves it, the other answers `moved` naming it; and a node
  frozen (SIGSTOP) mid-turn past its lease loses the session to the other
  node, which serves the next turn, and the frozen node's turn, once it
  runs on, is refused (`conflict`), never acknowledged over the newer one.
- scale_retry_pg: exactly-once turns across nodes. On n0, turns with
  request ids: one answered, one whose answer was never read (committed:
  watched from another connection), one SIGKILLed mid-turn; then n0 is
  SIGKILLed. n1 (waiting for the leases) gets the same requests again: the
  committed ones answer with the recorded result (`replayed`, the same
  token events and done as the first answer, the session not moved on),
  the killed one runs once and its second retry replays; a request id
  reused with other text is refused; the store keeps at most 32 results a
  session.
- scale_dbloss_pg: two nodes under load while their database connections
  are terminated (pg_terminate_backend) twice and the database is restarted
  (immediate stop, start): every turn ends `done` (no `io`), and the store
  holds exactly the acknowledged turns.
- scale_dbwait_pg: a node started while the database is down waits for it
  (--db-wait, a log line per attempt) and then serves.
- scale_dupid_pg: a second node with a live node's --node-id is refused,
  naming it; after that node is SIGKILLed, a node with its id starts (once
  the dead claim expires) and serves its sessions.
- scale_bouncer_pg: two nodes through PgBouncer in transaction pooling mode
  (a pool of 2 server connections for 6 store connections), sessions moving
  between them; and a node through PgBouncer in session mode with a pool of
  1 for 3 store connections fails to start with a message saying the pooler
  had no free connection, instead of hanging. SKIP without pgbouncer.
- scale_metrics_pg: the scale-out series of GET /metrics (docs/SCALE.md)
  on two nodes: node id; leases held equal to the resident sessions; a
  session another node holds answered `moved` and counted; if_tokens and a
  lease taken from under a node and a session written behind its back (in
  the database) answered `conflict` and counted by reason, the lease
  counted as lapsed;
  renewals counted; terminated database connections counted as reconnects
  (and no failed call); a load failed with the database down counted as
  an io error.
- scale_gone_pg: an HTTP client, told nothing yet, hangs up while its
  answer's commit waits for a lock on lind_sessions (another transaction
  holds it; pg_stat_activity shows the wait): once the lock goes, the
  commit lands and the session it created, whose name nobody has, is
  deleted (counted in lind_turns_dropped_total).

- scale_balancer_pg: three nodes with HTTP behind HAProxy (started by the
  test; SKIP without it) balancing on X-Lind-Session with consistent
  hashing and /health checks; a client that knows only the balancer sends
  turns on 12 sessions with Idempotency-Key, the node holding the most
  sessions is SIGKILLed under load: failed requests (502, broken
  connections) are retried, no acknowledged turn is lost or applied twice,
  every session goes on on the live nodes. NOTE: the counts and the resume
  latency (the kill to the first turn answered on a session it held).
- scale_standby_pg: a database that fails over. The case starts its own
  primary and synchronous standby (streaming replication,
  synchronous_standby_names 'standby1', seen `sync` in pg_stat_replication);
  two nodes reach them through a libpq multi-host URI with
  target_session_attrs=read-write. Under load (16 sessions, 8 client
  threads, turns with request ids) the standby's WAL receiver is paused
  until commits wait for it, the primary crashed (immediate stop), and once
  turns have failed `io` the standby promoted; the nodes reconnect to it by
  themselves, clients retry with the same request ids. On the new primary:
  every acknowledged turn once, nothing else, the streams equal to an
  uninterrupted node's. LIND_STANDBY_ASYNC=1 runs it with asynchronous
  replication instead, which loses the turns acknowledged while the
  receiver was paused (a demonstration: the case then fails);
  LIND_SCALE_VERBOSE=1 prints the failed attempts' messages.

Waits are on events (a final answer, a token, a process exit); lease expiry
is waited for by the nodes themselves (--lease-wait) or by retrying `moved`
until a deadline. LIND_SCALE_ONLY=case,case runs only those (debugging)."""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, Skip, case, expect, finish, SLOW, SANITIZED, http_port  # noqa: E402
from scale_harness import (URI, OWNER, TR, PGDIR, PGBIN, PGPORT, PGUID, PGGID, ONLY, scase,  # noqa: E402,F401
                           as_pg, pg_ctl, pg_stop, pg_start, psql, terminate_lind, node, turn, merged,
                           stored, expected, replay, stop_all, rturn, same_done)


@scase
def scale_moving_pg():
    db = URI % "scale_moving"
    lease = int(3000 * SLOW)
    ids = ["n0", "n1", "n2"]
    nodes = [node("mv%d" % i, db, ids[i], lease, ["--max-resident", "16"]) for i in range(3)]
    where = {ids[i]: nodes[i].sock for i in range(3)}
    sessions = ["mv-%02d" % i for i in range(64)]
    rounds = 2 if SANITIZED else 4
    acked = {s: [] for s in sessions}      # (text, output) in order
    reqs = {s: [] for s in sessions}       # (text, max_tokens, seed) of acknowledged turns
    served_by = {s: set() for s in sessions}
    errors = []
    moved = [0]
    lock = threading.Lock()

    def client(k):
        r = random.Random(1000 + k)
        conns = {nid: Client(where[nid]) for nid in ids}
        try:
            for rnd in range(rounds):
                for s in sessions[k::8]:
                    text = ("%s turn %d. " % (s, rnd)).encode()
                    seed = 7 + sessions.index(s) if rnd == 0 else None
                    target = r.choice(ids)
                    for attempt in range(200):
                        st, v = turn(conns[target], s, text, 6, seed)
                        if st == "done":
                            acked[s].append((text, v))
                            reqs[s].append((text, 6, seed))
                            served_by[s].add(target)
                            break
                        if st == "moved":
                            with lock:
                                moved[0] += 1
                            expect(v in where, "moved names an unknown node %r" % v)
                            target = v
                            continue
                        raise AssertionError("turn %d of %s on %s: %s %s" % (rnd, s, target, st, v))
                    else:
                        raise AssertionError("turn %d of %s never found its node" % (rnd, s))
        except Exception as e:   # reported by the main thread
            errors.append(repr(e))
        finally:
            for c in conns.values():
                c.close()

    # First, on quiet nodes: a session resident on n0 is `moved` on the others.
    pin = "mv-pin"
    pc = {nid: Client(where[nid]) for nid in ids}
    st, out = turn(pc["n0"], pin, b"pinned. ", 6, 3)
    expect(st == "done", "pin on n0: %s %r" % (st, out))
    pinned = [(b"pinned. ", out)]
    for nid in ("n1", "n2"):
        st, v = turn(pc[nid], pin, b"elsewhere. ", 6)
        expect(st == "moved" and v == "n0", "pin asked of %s: %s %r" % (nid, st, v))
    for c in pc.values():
        c.close()
    th = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    try:
        expect(not errors, "client errors: %s" % errors[:3])
        print("NOTE scale_moving_pg: %d turns, %d moved answers, %d of %d sessions served by 2+ nodes"
              % (sum(len(v) for v in acked.values()), moved[0],
                 sum(len(v) > 1 for v in served_by.values()), len(sessions)), flush=True)
        expect(any(len(v) > 1 for v in served_by.values()), "no session moved between nodes")
        c = Client(nodes[1].sock)
        for s in sessions:
            expect(len(acked[s]) == rounds, "%s: %d turns acknowledged" % (s, len(acked[s])))
            expect(stored(c, s) == expected(acked[s]), "%s: the store does not hold exactly the "
                   "acknowledged turns" % s)
        expect(stored(c, pin) == expected(pinned), "the pinned session holds its one turn")
        c.close()
    finally:
        stop_all(nodes)
    # The streams equal those of one node serving each session throughout.
    ref = Server("mvref", extra=TR).start()
    try:
        for s in sessions:
            outs = replay(ref, s, reqs[s])
            expect(outs == [o for _, o in acked[s]], "%s: the moved stream differs from one node's" % s)
    finally:
        ref.stop()


@scase
def scale_failover_pg():
    db = URI % "scale_failover"
    lease = int(2000 * SLOW)
    a = node("fo0", db, "n0", lease)
    b = node("fo1", db, "n1", lease, ["--lease-wait", str(min(3600000, int(120000 * SLOW)))])
    c = node("fo2", db, "n2", lease)
    nodes = [a, b, c]
    sessions = ["fo-%d" % i for i in range(8)]
    reqs = {s: [] for s in sessions}
    acked = {s: [] for s in sessions}
    try:
        ca = Client(a.sock)
        for s in sessions:
            for k in range(2):
                req = (("%s before %d. " % (s, k)).encode(), 8, 500 + sessions.index(s) if k == 0 else None)
                st, out = turn(ca, s, *req)
                expect(st == "done", "on n0: %s %r" % (st, out))
                reqs[s].append(req)
                acked[s].append((req[0], out))
        # Long turns on every session, then SIGKILL once each is streaming.
        killed = {}
        rid = {}
        for s in sessions:
            killed[s] = (("%s killed turn. " % s).encode(), 20000, None)
            rid[ca.send("generate", session=s, text=killed[s][0], max_tokens=20000, temperature=0.8)] = s
        streaming = set()
        while len(streaming) < len(sessions):
            ev = ca.event()
            expect(ev is not None, "n0 closed before streaming")
            expect(ev["event"] == "token", "before the kill: %r" % ev)
            streaming.add(ev["id"])
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        a.proc = None
        t_kill = time.time()
        ca.close()
        # Another node names the dead owner while its leases last. Should
        # n0's lease have run out already (a slow machine), n2 serves the
        # probe: an acknowledged turn like any other; n2 then stops, giving
        # the lease back.
        cc = Client(c.sock)
        probe = (b"probe. ", 1, None)
        st, v = turn(cc, sessions[0], *probe)
        cc.close()
        if (time.time() - t_kill) * 1000 < lease / 2:
            expect(st == "moved" and v == "n0", "within the lease: %s %r" % (st, v))
        expect(st in ("moved", "done"), "probe: %s %r" % (st, v))
        if st == "done":
            reqs[sessions[0]].append(probe)
            acked[sessions[0]].append((probe[0], v))
        c.stop()
        # n1 waits for the expired leases and continues every session.
        cb = Client(b.sock)
        for k in range(2):
            ids = {}
            for s in sessions:
                req = (("%s after %d. " % (s, k)).encode(), 8, None)
                ids[cb.send("generate", session=s, text=req[0], max_tokens=8, temperature=0.8)] = (s, req)
            for i, (s, req) in ids.items():
                toks = []
                ev = cb.final(i, toks)
                expect(ev["event"] == "done", "n1 continuing %s: %r" % (s, ev))
                reqs[s].append(req)
                acked[s].append((req[0], b"".join(toks)))
        history = {s: stored(cb, s) for s in sessions}
        cb.close()
    finally:
        stop_all(nodes)
    ref = Server("foref", extra=TR).start()
    try:
        for s in sessions:
            h = history[s]
            # The killed turn was not acknowledged: it is either absent (the
            # usual case) or, had it committed before the kill, whole; the
            # reference then runs it too.
            full, want = list(reqs[s]), list(acked[s])
            rest = h[len(expected(acked[s][:2])):]
            if rest and rest[0] == ("in", killed[s][0]):
                print("NOTE scale_failover_pg: %s: the killed turn had committed" % s, flush=True)
                full.insert(2, killed[s])
                want.insert(2, (killed[s][0], None))
            outs = replay(ref, s, full)
            for i, (t, o) in enumerate(want):
                if o is not None:
                    expect(outs[i] == o, "%s turn %d: the continued stream differs from the "
                           "uninterrupted one" % (s, i))
            expect(h == expected([(t, outs[i]) for i, (t, _) in enumerate(want)]),
                   "%s: the store does not hold exactly the acknowledged turns" % s)
    finally:
        ref.stop()


@scase
def scale_race_pg():
    db = URI % "scale_race"
    lease = int(1500 * SLOW)
    a = node("ra0", db, "n0", lease)
    b = node("ra1", db, "n1", lease)
    nodes = [a, b]
    try:
        ca, cb = Client(a.sock), Client(b.sock)
        # Both nodes asked for one new session at the same moment.
        for i in range(16):
            s = "race-%d" % i
            f = {"session": s, "text": b"who serves? ", "max_tokens": 4, "seed": 3}
            ra, rb = ca.send("generate", **f), cb.send("generate", **f)
            ea, eb = ca.final(ra), cb.final(rb)
            done = [e for e in (ea, eb) if e["event"] == "done"]
            expect(len(done) == 1, "%s: %d nodes acknowledged the turn: %r %r" % (s, len(done), ea, eb))
            other = eb if ea["event"] == "done" else ea
            winner = "n0" if ea["event"] == "done" else "n1"
            expect(other["code"] == "moved" and OWNER.search(other["message"]).group(1) == winner,
                   "%s: the loser said %r" % (s, other))
        # A node frozen mid-turn past its lease.
        s = "frozen"
        st, out1 = turn(ca, s, b"first. ", 8, 11)
        expect(st == "done", "first turn: %s %r" % (st, out1))
        long_id = ca.send("generate", session=s, text=b"long. ", max_tokens=20000, temperature=0.8)
        ev = ca.event()
        expect(ev["event"] == "token" and ev["id"] == long_id, "the long turn: %r" % ev)
        a.proc.send_signal(signal.SIGSTOP)
        try:
            deadline = time.time() + 120 * SLOW
            while True:   # n1 answers moved until n0's lease expires
                st, out2 = turn(cb, s, b"second. ", 8)
                if st == "done":
                    break
                expect(st == "moved" and out2 == "n0", "while n0 is frozen: %s %r" % (st, out2))
                expect(time.time() < deadline, "n0's lease never expired")
                time.sleep(0.05)
        finally:
            a.proc.send_signal(signal.SIGCONT)
        # n0 runs on: its turn must not be acknowledged over n1's.
        ca.send("cancel", session=s)
        while True:
            ev = ca.event()
            if ev["id"] == long_id and ev["event"] in ("done", "error"):
                break
        expect(ev["event"] == "error" and ev["code"] == "conflict",
               "the frozen node's turn ended with %r" % ev)
        expect(stored(cb, s) == expected([(b"first. ", out1), (b"second. ", out2)]),
               "the store does not hold exactly the two acknowledged turns")
        # And it goes on from n1's turn: a third turn anywhere continues it.
        st, v = turn(ca, s, b"third. ", 4)
        expect(st == "moved" and v == "n1", "n0 after losing the session: %s %r" % (st, v))
        ca.close()
        cb.close()
    finally:
        stop_all(nodes)
    ref = Server("raref", extra=TR).start()
    try:
        outs = replay(ref, s, [(b"first. ", 8, 11), (b"second. ", 8, None)])
        expect(outs == [out1, out2], "the turns differ from one node's")
    finally:
        ref.stop()


@scase
def scale_retry_pg():
    db = URI % "scale_retry"
    lease = int(2000 * SLOW)
    a = node("rt0", db, "n0", lease)
    b = node("rt1", db, "n1", lease, ["--lease-wait", str(min(3600000, int(120000 * SLOW)))])
    nodes = [a, b]
    sessions = ["rt-%d" % i for i in range(4)]
    try:
        ca = Client(a.sock)
        first = {}
        for i, s in enumerate(sessions):
            first[s] = rturn(ca, s, b"answered. ", s + "/1", seed=40 + i)
            expect(first[s][0]["event"] == "done", "n0: %r" % (first[s][0],))
        # Committed, never read: the answer is lost with the connection.
        unread = {}
        for s in sessions[:2]:
            ca.send("generate", session=s, text=b"unread. ", max_tokens=8, temperature=0.8,
                    request_id=s + "/2")
        watch = Client(a.sock)
        deadline = time.time() + 120 * SLOW
        for s in sessions[:2]:
            while True:
                ev = watch.call("info", session=s)
                if not ev["busy"] and ev["tokens"] != first[s][0]["session_tokens"]:
                    unread[s] = ev["tokens"]
                    break
                expect(time.time() < deadline, "the unread turn of %s never committed" % s)
                time.sleep(0.02)
        watch.close()
        # Killed mid-turn: never committed.
        mid = sessions[2]
        ca.send("generate", session=mid, text=b"killed. ", max_tokens=20000, temperature=0.8,
                request_id=mid + "/2")
        while True:
            ev = ca.event()
            expect(ev is not None, "n0 closed before streaming")
            if ev["event"] == "token":
                break
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        a.proc = None
        ca.close()
        cb = Client(b.sock)
        for s in sessions:   # the answered turns, retried on another node
            ev, toks = rturn(cb, s, b"answered. ", s + "/1", seed=40 + sessions.index(s))
            expect(ev.get("replayed") is True, "n1 replays %s/1: %r" % (s, ev))
            same_done(first[s][0], ev, s + "/1")
            expect(toks == first[s][1], "%s/1: the same token events" % s)
        for s in sessions[:2]:
            ev, toks = rturn(cb, s, b"unread. ", s + "/2")
            expect(ev.get("replayed") is True and ev["session_tokens"] == unread[s],
                   "n1 gives the committed answer of %s/2: %r" % (s, ev))
            info = cb.call("info", session=s)
            expect(info["tokens"] == unread[s], "%s/2 applied once" % s)
            expect(stored(cb, s)[-1] == ("out", b"".join(toks)), "%s/2: the replayed text is the stored one" % s)
        before = cb.call("info", session=mid)["tokens"]
        expect(before == first[mid][0]["session_tokens"], "the killed turn was lost as a whole")
        ev, toks = rturn(cb, mid, b"killed. ", mid + "/2", max_tokens=12)
        expect(ev["event"] == "done" and "replayed" not in ev, "the killed turn runs on n1: %r" % ev)
        ev2, toks2 = rturn(cb, mid, b"killed. ", mid + "/2", max_tokens=12)
        expect(ev2.get("replayed") is True and toks2 == toks, "then replays: %r" % ev2)
        same_done(ev, ev2, mid + "/2")
        expect(cb.call("info", session=mid)["tokens"] == ev["session_tokens"], "applied once")
        bad, _ = rturn(cb, mid, b"other text. ", mid + "/2")
        expect(bad["event"] == "error" and bad["code"] == "bad_request" and mid + "/2" in bad["message"],
               "a reused id with other text: %r" % bad)
        s = sessions[3]
        for k in range(40):
            ev, _ = rturn(cb, s, b"x", "%s/b%d" % (s, k), max_tokens=0)
            expect(ev["event"] == "done", "%r" % ev)
        n = int(psql(db, "SELECT count(*) FROM lind_turns WHERE name = '%s'" % s))
        expect(n == 32, "the store keeps 32 results of %s: %d" % (s, n))
        cb.close()
    finally:
        stop_all(nodes)


@scase
def scale_dbloss_pg():
    dbname = "scale_dbloss"
    db = URI % dbname
    lease = int(60000 * SLOW)   # no lease lapses while the database restarts
    extra = ["--store-conns", "2", "--db-reconnect", str(min(3600000, int(600000 * SLOW)))]   # the option's maximum
    nodes = [node("dl%d" % i, db, "n%d" % i, lease, extra) for i in range(2)]
    sessions = ["dl-%d" % i for i in range(8)]
    acked = {s: [] for s in sessions}
    errors = []
    done = [0]
    cv = threading.Condition()
    stop = threading.Event()

    def client(k):
        conns = [Client(n.sock, timeout=600 * SLOW) for n in nodes]
        try:
            for rnd in range(400):
                if stop.is_set():
                    break
                for i, s in enumerate(sessions):
                    if i % 4 != k:
                        continue
                    text = ("%s turn %d. " % (s, rnd)).encode()
                    st, v = turn(conns[i % 2], s, text, 4)
                    if st != "done":
                        errors.append("%s turn %d: %s %s" % (s, rnd, st, v))
                        return
                    acked[s].append((text, v))
                    with cv:
                        done[0] += 1
                        cv.notify_all()
        except Exception as e:   # reported by the main thread
            errors.append(repr(e))
        finally:
            for c in conns:
                c.close()
            with cv:
                cv.notify_all()

    th = [threading.Thread(target=client, args=(k,)) for k in range(4)]

    def more_turns(n, what):
        with cv:
            want = done[0] + n
            ok = cv.wait_for(lambda: done[0] >= want or errors or not any(t.is_alive() for t in th),
                             timeout=600 * SLOW)
        expect(not errors, "%s: %s" % (what, errors[:3]))
        expect(ok and done[0] >= want, "%s: %d more turns did not come" % (what, n))

    terminated = 0
    try:
        for t in th:
            t.start()
        more_turns(8, "at first")
        terminated += terminate_lind(dbname)
        more_turns(8, "after the connections were terminated")
        pg_stop()
        pg_start()
        more_turns(8, "after the database restarted")
        terminated += terminate_lind(dbname)
        more_turns(8, "after the connections were terminated again")
    finally:
        stop.set()
        for t in th:
            t.join()
    try:
        expect(not errors, "turns failed: %s" % errors[:3])
        expect(terminated >= 2, "only %d connections were terminated" % terminated)
        print("NOTE scale_dbloss_pg: %d turns acknowledged, %d connections terminated, one restart,"
              " no turn failed" % (sum(len(v) for v in acked.values()), terminated), flush=True)
        c = Client(nodes[0].sock)
        for s in sessions:
            expect(stored(c, s) == expected(acked[s]), "%s: the store does not hold exactly the "
                   "acknowledged turns" % s)
        c.close()
    finally:
        stop_all(nodes)


def wait_socket(srv, what):
    deadline = time.time() + 600 * SLOW
    while True:
        expect(srv.proc.poll() is None, "%s: the node exited: %s" % (what, srv.log()))
        try:
            c = Client(srv.sock)
            return c
        except OSError:
            pass
        expect(time.time() < deadline, "%s: the node never listened: %s" % (what, srv.log()))
        time.sleep(0.05)


@scase
def scale_dbwait_pg():
    db = URI % "scale_dbwait"
    pg_stop()
    n = Server("dw0", extra=["--node-id", "w0", "--db-wait", str(int(600 * SLOW))] + TR, db=db)
    try:
        log = open(n.logpath, "ab")
        n.proc = subprocess.Popen(n.args(), stdout=log, stderr=log)
        log.close()
        deadline = time.time() + 600 * SLOW
        while n.log().count("the store is not reachable (attempt") < 2:
            expect(n.proc.poll() is None, "the node exited instead of waiting: %s" % n.log())
            expect(time.time() < deadline, "no second attempt logged: %s" % n.log())
            time.sleep(0.05)
        expect("--db-wait" in n.log(), "the line names the option: %s" % n.log())
    finally:
        pg_start()
    try:
        c = wait_socket(n, "after the database came up")
        st, out = turn(c, "dw-1", b"after the wait. ", 4, 5)
        expect(st == "done", "the node serves: %s %r" % (st, out))
        c.close()
    finally:
        stop_all([n])


@scase
def scale_dupid_pg():
    db = URI % "scale_dupid"
    lease = int(2000 * SLOW)
    a = node("du0", db, "n0", lease)
    nodes = [a]
    try:
        ca = Client(a.sock)
        st, out = turn(ca, "du-1", b"first. ", 4, 9)
        expect(st == "done", "n0 serves: %s %r" % (st, out))
        b = Server("du1", extra=["--node-id", "n0", "--lease-ms", str(lease)] + TR, db=db)
        rc = b.start(timeout=600 * SLOW, expect_fail=True)
        expect(rc != 0 and "--node-id 'n0' is in use by another live node" in b.log(),
               "a duplicate node id: exit %r, %s" % (rc, b.log()))
        st, out2 = turn(ca, "du-1", b"second. ", 4)
        expect(st == "done", "n0 still serves: %s %r" % (st, out2))
        ca.close()
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        a.proc = None
        # Its successor under the same id: the dead claim expires, it starts.
        c = Server("du2", extra=["--node-id", "n0", "--lease-ms", str(lease)] + TR, db=db)
        nodes.append(c.start(timeout=600 * SLOW))
        cc = Client(c.sock)
        st, out3 = turn(cc, "du-1", b"third. ", 4)
        expect(st == "done", "the restarted n0 serves: %s %r" % (st, out3))
        expect(stored(cc, "du-1") == expected([(b"first. ", out), (b"second. ", out2), (b"third. ", out3)]),
               "the store holds the three turns")
        cc.close()
    finally:
        stop_all(nodes)


class Bouncer:
    """PgBouncer in front of the test's server, on a Unix socket in its own
    directory, run as the server's user; SKIP without the pgbouncer binary."""
    def __init__(self, mode, pool, dbname):
        exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.access(exe, os.X_OK):
            raise Skip("pgbouncer is not installed (Debian package pgbouncer; make deps)")
        self.dir = tempfile.mkdtemp(prefix="lind-pgb-")
        self.port = int(PGPORT) + 1
        if os.geteuid() == 0 and PGUID > 0:
            os.chown(self.dir, PGUID, PGGID)
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(os.path.join(self.dir, "users.txt"), "w") as f:
            f.write('"lind" ""\n')
        with open(ini, "w") as f:
            f.write("[databases]\n%s = host=%s port=%s dbname=%s user=lind\n"
                    "[pgbouncer]\nunix_socket_dir = %s\nlisten_port = %d\nauth_type = trust\n"
                    "auth_file = %s/users.txt\npool_mode = %s\ndefault_pool_size = %d\n"
                    "max_client_conn = 200\nquery_wait_timeout = 0\nlogfile = %s/pgbouncer.log\n"
                    "pidfile = %s/pgbouncer.pid\n"
                    % (dbname, PGDIR, PGPORT, dbname, self.dir, self.port, self.dir, mode, pool,
                       self.dir, self.dir))
        self.uri = "postgresql:///%s?host=%s&port=%d&user=lind" % (dbname, self.dir, self.port)
        self.proc = subprocess.Popen([exe, ini], preexec_fn=as_pg, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 600 * SLOW
        sock = os.path.join(self.dir, ".s.PGSQL.%d" % self.port)
        while not os.path.exists(sock):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise AssertionError("pgbouncer did not start: %s" % self.log())
            time.sleep(0.05)

    def log(self):
        try:
            with open(os.path.join(self.dir, "pgbouncer.log")) as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@scase
def scale_bouncer_pg():
    dbname = "scale_bouncer"
    pgb = Bouncer("transaction", 2, dbname)
    nodes = []
    try:
        lease = int(10000 * SLOW)
        ids = ["b0", "b1"]
        for i in range(2):
            nodes.append(node("pb%d" % i, pgb.uri, ids[i], lease, ["--store-conns", "3",
                                                                  "--max-resident", "2"]))
        where = {ids[i]: nodes[i].sock for i in range(2)}
        conns = {nid: Client(where[nid]) for nid in ids}
        sessions = ["pb-%d" % i for i in range(8)]
        acked = {s: [] for s in sessions}
        served_by = {s: set() for s in sessions}
        moved = 0
        for rnd in range(3):
            for i, s in enumerate(sessions):
                text = ("%s turn %d. " % (s, rnd)).encode()
                target = ids[(i + rnd) % 2]
                for attempt in range(50):
                    st, v = turn(conns[target], s, text, 4, 20 + i if rnd == 0 else None)
                    if st == "done":
                        acked[s].append((text, v))
                        served_by[s].add(target)
                        break
                    expect(st == "moved" and v in where, "%s on %s: %s %s" % (s, target, st, v))
                    moved += 1
                    target = v
                else:
                    raise AssertionError("%s never found its node" % s)
        for s in sessions:
            expect(stored(conns["b0"], s) == expected(acked[s]), "%s: the store does not hold exactly"
                   " the acknowledged turns" % s)
        for c in conns.values():
            c.close()
        both = sum(len(v) == 2 for v in served_by.values())
        print("NOTE scale_bouncer_pg: 24 turns through PgBouncer (transaction mode, pool 2), %d moved"
              " answers, %d of 8 sessions served by both nodes" % (moved, both), flush=True)
        expect(both > 0, "no session moved between the nodes")
    finally:
        stop_all(nodes)
        pgb.stop()
    # Session mode, a pool of 1 for 3 store connections: start-up ends with
    # a message, not a silent hang.
    pgb = Bouncer("session", 1, dbname)
    try:
        n = Server("pbs", extra=["--node-id", "s0", "--store-conns", "3",
                                 "--db-statement-timeout", "1000"] + TR, db=pgb.uri)
        rc = n.start(timeout=600 * SLOW, expect_fail=True)
        expect(rc != 0 and "no free server connection" in n.log(),
               "session mode, small pool: exit %r, %s" % (rc, n.log()))
    finally:
        pgb.stop()



def metrics(port):
    """GET /metrics: {series (with its labels): value}."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60 * SLOW) as r:
        expect(r.status == 200, "/metrics answered %d" % r.status)
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def wait_metric(port, name, cond, what):
    """Poll /metrics until cond(value of name) (bounded): the value."""
    deadline = time.time() + 60 * SLOW
    while True:
        v = metrics(port).get(name)
        if v is not None and cond(v):
            return v
        expect(time.time() < deadline, "%s: %s is %r" % (what, name, v))
        time.sleep(0.05)


@scase
def scale_metrics_pg():
    dbname = "scale_metrics"
    db = URI % dbname
    http = ["--http", "127.0.0.1:0", "--store-conns", "2"]
    # n0: a lease far longer than the case (never renewed, never lapsing by
    # itself); n1: a short one, renewed every third.
    n0 = node("mt0", db, "n0", int(600000 * SLOW), http)
    n1 = node("mt1", db, "n1", int(1500 * SLOW), http + ["--db-reconnect", "300"])
    try:
        p0, p1 = http_port(n0, 60), http_port(n1, 60)
        c0, c1 = Client(n0.sock), Client(n1.sock)
        m = metrics(p0)
        expect(m.get('lind_node_info{node_id="n0"}') == 1, "no node_info for n0: %r" %
               {k: v for k, v in m.items() if "node" in k})
        for k in ("lind_leases_held", "lind_moved_total", 'lind_conflicts_total{reason="version"}',
                  'lind_conflicts_total{reason="lease"}', 'lind_conflicts_total{reason="if_tokens"}',
                  "lind_lease_renewals_total", "lind_lease_lapses_total", "lind_store_saves_total",
                  'lind_store_errors_total{kind="io"}', 'lind_store_errors_total{kind="timeout"}',
                  "lind_store_reconnects_total", "lind_store_retries_total"):
            expect(m.get(k) == 0, "%s on a fresh node: %r" % (k, m.get(k)))
        sessions = ["mt-%d" % i for i in range(3)]
        for s in sessions:
            st, v = turn(c0, s, b"Hello there. ", 4)
            expect(st == "done", "%s on n0: %s %r" % (s, st, v))
        m = metrics(p0)
        expect(m["lind_leases_held"] == 3 and m["lind_sessions_resident"] == 3,
               "n0 serves 3 sessions: leases_held %r, sessions_resident %r" %
               (m["lind_leases_held"], m["lind_sessions_resident"]))
        expect(m["lind_leases_taken_total"] == 3, "leases taken: %r" % m["lind_leases_taken_total"])
        expect(m["lind_store_saves_total"] == 3, "saves: %r" % m["lind_store_saves_total"])
        # n1 asked for a session n0 holds: moved, counted on n1.
        st, v = turn(c1, sessions[0], b"Mine now? ", 4)
        expect(st == "moved" and v == "n0", "n1 on n0's session: %s %r" % (st, v))
        m1 = metrics(p1)
        expect(m1["lind_moved_total"] == 1 and m1["lind_leases_held"] == 0,
               "n1 after moved: moved %r, leases_held %r" % (m1["lind_moved_total"], m1["lind_leases_held"]))
        # if_tokens that do not match: conflict, reason if_tokens.
        ev = c0.final(c0.send("generate", session=sessions[1], text="x", max_tokens=2, if_tokens=1))
        expect(ev["event"] == "error" and ev["code"] == "conflict", "if_tokens 1: %r" % ev)
        # The lease of mt-2 taken from under n0 (as another node would once
        # it expired): n0's next save there is refused, conflict (lease).
        psql(db, "UPDATE lind_leases SET owner = 'elsewhere' WHERE name = '%s'" % sessions[2])
        st, v = turn(c0, sessions[2], b"Still mine? ", 4)
        expect(st == "conflict", "a turn on a lease taken from under n0: %s %r" % (st, v))
        # mt-1 written behind n0's back (its version moved on): conflict, reason version.
        psql(db, "UPDATE lind_sessions SET version = version + 1 WHERE name = '%s'" % sessions[1])
        st, v = turn(c0, sessions[1], b"Unchanged? ", 4)
        expect(st == "conflict", "a turn on a session written elsewhere: %s %r" % (st, v))
        m = metrics(p0)
        for k, want in (('lind_conflicts_total{reason="if_tokens"}', 1),
                        ('lind_conflicts_total{reason="lease"}', 1),
                        ('lind_conflicts_total{reason="version"}', 1),
                        ("lind_lease_lapses_total", 1),
                        ("lind_store_saves_total", 3), ("lind_store_save_failures_total", 0)):
            expect(m[k] == want, "n0: %s is %r, not %r" % (k, m[k], want))
        # Both copies dropped: the lapsed lease forgotten, the other given
        # back; n0 holds mt-0 alone, its one resident session.
        wait_metric(p0, "lind_leases_held", lambda x: x == 1, "n0 keeps only mt-0's lease")
        m = metrics(p0)
        expect(m["lind_sessions_resident"] == 1, "n0 resident: %r" % m["lind_sessions_resident"])
        # n1's short lease: renewed while its session stays resident.
        st, v = turn(c1, "mt-n1", b"Hello. ", 2)
        expect(st == "done", "mt-n1 on n1: %s %r" % (st, v))
        wait_metric(p1, "lind_lease_renewals_total", lambda x: x >= 2, "n1 renews its lease")
        expect(metrics(p1)["lind_leases_held"] == 1, "n1 holds one lease")
        # Every lind connection terminated: the next turns reconnect.
        expect(terminate_lind(dbname) >= 2, "no connection terminated")
        for s in sessions[:2]:
            st, v = turn(c0, s, b"Again. ", 2)
            expect(st == "done", "%s on n0 after the connections were terminated: %s %r" % (s, st, v))
        m = metrics(p0)
        expect(m["lind_store_reconnects_total"] >= 1, "n0 reconnects: %r" % m["lind_store_reconnects_total"])
        expect(m["lind_store_saves_total"] == 5, "saves: %r" % m["lind_store_saves_total"])
        expect(m['lind_store_errors_total{kind="io"}'] == 0, "n0 io errors: %r" %
               m['lind_store_errors_total{kind="io"}'])
        # The database down: n1 (--db-reconnect 300) fails a new session's
        # load with io, counted; the database back, n1 serves it.
        before = metrics(p1)['lind_store_errors_total{kind="io"}']
        pg_stop()
        try:
            st, v = turn(c1, "mt-down", b"Anyone? ", 2)
            expect(st == "io", "a load with the database down: %s %r" % (st, v))
            m1 = metrics(p1)   # served with the database down, without sessions_stored
            expect("lind_sessions_stored" not in m1 and "lind_sessions_resident" in m1,
                   "/metrics with the database down: %r" % sorted(m1)[:8])
        finally:
            pg_start()
        expect(m1['lind_store_errors_total{kind="io"}'] >= before + 1, "n1 io errors: %r -> %r" %
               (before, m1['lind_store_errors_total{kind="io"}']))
        st, v = turn(c1, "mt-down", b"Anyone? ", 2)
        expect(st == "done", "the database back: %s %r" % (st, v))
        c0.close()
        c1.close()
    finally:
        stop_all([n0, n1])

@scase
def scale_gone_pg():
    dbname = "scale_gone"
    db = URI % dbname
    limit = str(min(int(600000 * SLOW), 3600000))
    # --response-ttl 0: no retention sweep, whose DELETE would wait for the
    # same lock (and hold the first store connection while it waits).
    n0 = node("gn0", db, "g0", int(600000 * SLOW),
              ["--http", "127.0.0.1:0", "--db-lock-timeout", limit, "--db-statement-timeout", limit,
               "--response-ttl", "0"])
    locker = None
    try:
        port = http_port(n0, 60)
        locker = subprocess.Popen([os.path.join(PGBIN, "psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                                   "-d", db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        locker.stdin.write(b"BEGIN;\nLOCK TABLE lind_sessions IN SHARE ROW EXCLUSIVE MODE;\nSELECT 'locked';\n")
        locker.stdin.flush()
        expect(locker.stdout.readline().strip() == b"locked", "the lock on lind_sessions was not taken")
        body = json.dumps({"prompt": "Hi", "max_tokens": 1}).encode()
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        # The lease is taken (lind_leases); the turn runs; its commit (the
        # INSERT of the new session's row) waits. Any other wait would not do:
        # the client must hang up after its request reached the compute thread.
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                   "AND application_name = 'lind' AND wait_event_type = 'Lock' "
                   "AND query LIKE 'INSERT INTO lind_sessions%'")
        deadline = time.time() + 120 * SLOW
        while psql(db, waiting) == "0":
            expect(time.time() < deadline, "the answer's commit does not wait for the lock")
            time.sleep(0.05)
        c.close()
        deadline = time.time() + 120 * SLOW
        while "status=499" not in n0.log():
            expect(time.time() < deadline, "the front door did not see its client gone")
            time.sleep(0.05)
        locker.stdin.write(b"COMMIT;\n")
        locker.stdin.close()
        expect(locker.wait(timeout=120 * SLOW) == 0, "psql holding the lock failed")
        locker = None
        try:
            wait_metric(port, "lind_turns_dropped_total", lambda x: x >= 1, "the abandoned answer's session")
        except AssertionError as e:
            raise AssertionError("%s; the node's log ends: %r" % (e, n0.log()[-1500:]))
        cl = Client(n0.sock)
        left = [x["session"] for x in cl.call("list")["sessions"]]
        cl.close()
        expect(left == [], "sessions left by a client gone during its commit: %r" % left)
        expect(psql(db, "SELECT count(*) FROM lind_sessions") == "0", "the session is in the database")
    finally:
        if locker:
            locker.kill()
            locker.wait()
        stop_all([n0])


HAPROXY_CFG = """global
    maxconn 512
defaults
    mode http
    timeout connect {connect}ms
    timeout client {slow}ms
    timeout server {slow}ms
    # no redispatch: a session sent to another node meanwhile would be taken
    # there, and then again by the node its hash goes to once the dead one
    # is down, waiting on the first one's renewed lease; the client retries
    retries 1
frontend lind
    bind 127.0.0.1:{port}
    default_backend nodes
backend nodes
    balance hdr(X-Lind-Session)
    hash-type consistent
    option httpchk GET /health
    http-check expect status 200
    # a dead node refuses the connection at once: the first refusal marks it
    # down (observe layer4); a slow answer from a busy live one must not
    # (its sessions would move and wait for its lease, which it renews)
    timeout check {check}ms
    default-server inter {inter}ms fastinter {fast}ms fall 2 rise 2 observe layer4 error-limit 1 on-error mark-down
{servers}
"""


def free_port():
    """A loopback port nobody listens on now (HAProxy takes no port 0)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_turn(port, session, key, body, timeout):
    """POST /v1/completions through the balancer: (status, json or None);
    status 0 for a connection that failed or broke."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", body=body,
                  headers={"Content-Type": "application/json", "X-Lind-Session": session,
                           "Idempotency-Key": key})
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, None
    except (OSError, http.client.HTTPException):
        return 0, None
    finally:
        c.close()


@scase
def scale_balancer_pg():
    """Three nodes behind HAProxy (docs/SCALE.md, "Behind a load balancer"):
    the client knows only the balancer, which hashes X-Lind-Session onto the
    nodes; one node is SIGKILLed under load. Its sessions rehash to the
    others, which wait out its leases (--lease-wait) and continue from the
    last commit; a request that failed (502, or a broken connection) is
    sent again with its Idempotency-Key, so each turn is applied once."""
    import shutil
    exe = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if not exe:
        raise Skip("haproxy is not installed (Debian package haproxy; make deps)")
    db = URI % "scale_balancer"
    lease = min(3600000, int(2000 * SLOW))
    extra = ["--http", "127.0.0.1:0", "--lease-wait", str(min(3600000, int(60000 * SLOW)))]
    ids = ["n0", "n1", "n2"]
    nodes = []
    proxy = None
    lock = threading.Lock()
    sessions = ["lb-%02d" % i for i in range(12)]
    acked = {s: [] for s in sessions}   # (prompt, response json) per acknowledged turn, in order
    failed = [0]                        # requests that failed and were sent again
    errors = []
    stop = threading.Event()
    kill = {"t": None, "held": set(), "resume": None}
    try:
        nodes = [node("lb%d" % i, db, ids[i], lease, extra) for i in range(3)]
        ports = [http_port(n, 60) for n in nodes]
        port = free_port()
        d = os.path.join(os.path.dirname(nodes[0].dir), "balancer")
        os.makedirs(d, exist_ok=True)
        cfg = os.path.join(d, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(HAPROXY_CFG.format(
                port=port, connect=int(1000 * SLOW), slow=int(120000 * SLOW), inter=int(500 * SLOW),
                check=int(10000 * SLOW), fast=int(100 * SLOW),
                servers="\n".join("    server %s 127.0.0.1:%d check" % (ids[i], ports[i]) for i in range(3))))
        plog = open(os.path.join(d, "haproxy.log"), "wb")
        proxy = subprocess.Popen([exe, "-f", cfg, "-db"], stdout=plog, stderr=subprocess.STDOUT)
        plog.close()
        deadline = time.time() + 60 * SLOW
        while True:   # the balancer answers once its port is bound and a node is up
            expect(proxy.poll() is None, "haproxy exited: %s" % open(os.path.join(d, "haproxy.log")).read())
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5 * SLOW) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            expect(time.time() < deadline, "haproxy did not answer /health")
            time.sleep(0.05)

        def worker(s):
            k = 0
            while not stop.is_set():
                prompt = "[%s turn %d] " % (s, k)
                body = json.dumps({"prompt": prompt, "max_tokens": 4, "seed": 7, "temperature": 0})
                key = "%s-%d" % (s, k)
                tries = 0
                while True:
                    st, j = http_turn(port, s, key, body, 120 * SLOW)
                    if st == 200:
                        break
                    if st not in (0, 502, 503) or tries >= 40:
                        with open(os.path.join(d, "haproxy.log"), errors="replace") as f:
                            hl = [l.strip() for l in f if " is DOWN" in l or " is UP" in l]
                        with lock:
                            errors.append("%s turn %d: status %d %r after %d retries (haproxy: %r)" %
                                          (s, k, st, j, tries, hl[-4:]))
                        stop.set()
                        return
                    tries += 1
                    with lock:
                        failed[0] += 1
                    time.sleep(0.05 * min(tries, 10))   # pacing the retries; no outcome depends on it
                with lock:
                    acked[s].append((prompt, j))
                    if kill["t"] and s in kill["held"] and kill["resume"] is None:
                        kill["resume"] = time.time() - kill["t"]
                k += 1

        threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in sessions]
        for t in threads:
            t.start()

        def wait_for(cond, what):
            deadline = time.time() + 300 * SLOW
            while not cond():
                expect(not errors, "; ".join(errors[:3]))
                expect(time.time() < deadline, what)
                time.sleep(0.05)

        wait_for(lambda: all(len(acked[s]) >= 2 for s in sessions), "every session 2 turns before the kill")
        # The node holding the most sessions (resident there) dies.
        held = []
        for n in nodes:
            c = Client(n.sock)
            held.append({s for s in sessions if c.call("info", session=s).get("resident")})
            c.close()
        victim = max(range(3), key=lambda i: len(held[i]))
        expect(held[victim], "no node holds a session: %r" % held)
        with lock:
            before = {s: len(acked[s]) for s in sessions}
            kill["held"] = held[victim]
        nodes[victim].proc.send_signal(signal.SIGKILL)
        kill["t"] = time.time()
        nodes[victim].proc.wait()
        nodes[victim].proc = None
        wait_for(lambda: all(len(acked[s]) >= before[s] + 2 for s in sessions),
                 "every session 2 more turns after the kill")
        stop.set()
        for t in threads:
            t.join(timeout=300 * SLOW)
        expect(not errors, "; ".join(errors[:3]))
        live = [nodes[i] for i in range(3) if i != victim]
        lost = dup = 0
        for s in sessions:
            owners = []
            for n in live:
                c = Client(n.sock)
                ev = c.call("info", session=s)
                c.close()
                expect(ev["event"] == "result" or ev.get("code") == "moved", "info %s: %r" % (s, ev))
                if ev.get("resident"):
                    owners.append((n, ev))
            expect(len(owners) == 1, "%s resident on %d live nodes" % (s, len(owners)))
            ev = owners[0][1]
            ins = b"".join(bytes(e["text"]) for e in ev["transcript"] if e["role"] == "in")
            for prompt, j in acked[s]:
                n = ins.count(prompt.encode())
                lost += n == 0
                dup += n > 1
            # The session's tokens: the last acknowledged turn's count, and
            # each turn's count the one before plus what it fed and made.
            last = acked[s][-1][1]
            expect(ev["tokens"] == last["lind"]["session_tokens"],
                   "%s: %d tokens stored, the last acknowledged turn says %d" %
                   (s, ev["tokens"], last["lind"]["session_tokens"]))
            for (_, a), (_, b) in zip(acked[s], acked[s][1:]):
                u = b["usage"]
                expect(b["lind"]["session_tokens"] == a["lind"]["session_tokens"] + u["prompt_tokens"] +
                       u["completion_tokens"], "%s: a turn counted twice or lost: %r then %r" %
                       (s, a["lind"], b["lind"]))
        turns = sum(len(v) for v in acked.values())
        with open(os.path.join(d, "haproxy.log"), errors="replace") as f:
            downs = [l.strip() for l in f if " is DOWN" in l]
        print("NOTE scale_balancer_pg: %d sessions, %d turns acknowledged, %d requests failed and retried, "
              "%d lost, %d duplicated; killed %s holding %d sessions; resume latency %.2f s "
              "(lease %d ms, SLOW %g); nodes marked down: %d" %
              (len(sessions), turns, failed[0], lost, dup, ids[victim], len(kill["held"]), kill["resume"],
               lease, SLOW, len(downs)), flush=True)
        expect(len(downs) == 1 and ids[victim] in downs[0], "haproxy marked down: %r" % downs)
        expect(lost == 0 and dup == 0, "%d acknowledged turns lost, %d applied twice" % (lost, dup))
        expect(failed[0] <= 4 * len(sessions), "%d failed requests for %d sessions" % (failed[0], len(sessions)))
    finally:
        stop.set()
        if proxy:
            proxy.terminate()
            proxy.wait(timeout=60 * SLOW)
        stop_all(nodes)


# PgPair's guardian: argv pg_ctl, directory, data directories. Waits for
# its stdin to close, then stops the servers there (immediate; as the
# servers' user) and removes the directory.
GUARD = r"""
import os, shutil, signal, subprocess, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
sys.stdin.buffer.read()
uid, gid = int(os.environ.get("LIND_PG_UID", "-1")), int(os.environ.get("LIND_PG_GID", "-1"))
def as_pg():
    if os.geteuid() == 0 and uid > 0:
        os.setgroups([]); os.setgid(gid); os.setuid(uid)
for d in sys.argv[3:]:
    if os.path.exists(os.path.join(d, "postmaster.pid")):
        subprocess.run([sys.argv[1], "-D", d, "-m", "immediate", "-w", "stop"], preexec_fn=as_pg,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
shutil.rmtree(sys.argv[2], ignore_errors=True)
"""


class PgPair:
    """A primary and a synchronous standby of its own (streaming
    replication), both on Unix sockets only, in one directory under /tmp
    (the servers' user must reach it), run as that user: the primary with
    wal_level replica and synchronous_commit on; the standby made by
    pg_basebackup -R, streaming as application_name standby1; then the
    primary's synchronous_standby_names set to 'standby1' (ALTER SYSTEM,
    reload) and the standby seen streaming as `sync`. The standby's own
    synchronous_standby_names is empty: once promoted it has no standby,
    and one naming an absent standby would make every commit wait."""
    def __init__(self, dbname, sync=True):
        self.sync = sync
        self.dir = tempfile.mkdtemp(prefix="lind-pgha-")
        if os.geteuid() == 0 and PGUID > 0:
            os.chown(self.dir, PGUID, PGGID)
        self.ports = [int(PGPORT) + 2, int(PGPORT) + 3]
        self.data = [os.path.join(self.dir, "primary"), os.path.join(self.dir, "standby")]
        self.up = [False, False]
        self.dbname = dbname
        # A guardian, as tests/pgserver.h's: when this process ends, however
        # it ends (its end of the pipe closes), both servers are stopped and
        # the directory removed.
        self.guard = subprocess.Popen([sys.executable, "-c", GUARD, os.path.join(PGBIN, "pg_ctl"),
                                       self.dir] + self.data, stdin=subprocess.PIPE,
                                      preexec_fn=os.setpgrp)
        try:
            self._make()
        except BaseException:
            self.stop()
            raise

    def run(self, prog, *args):
        r = subprocess.run([os.path.join(PGBIN, prog)] + list(args), preexec_fn=as_pg,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600 * SLOW)
        expect(r.returncode == 0, "%s %s: %r" % (prog, " ".join(args), r.stdout[-800:]))
        return r.stdout.decode(errors="replace")

    def conf(self, i, text):
        with open(os.path.join(self.data[i], "postgresql.auto.conf"), "a") as f:
            f.write(text)

    def start(self, i):
        self.run("pg_ctl", "-D", self.data[i], "-l", self.data[i] + ".log", "-w", "-t",
                 str(int(600 * SLOW)), "start")
        self.up[i] = True

    def uri(self, i, db=None):
        return "postgresql:///%s?host=%s&port=%d&user=lind" % (db or self.dbname, self.dir, self.ports[i])

    def multi_uri(self):
        """Both servers, the writable one chosen at every connect."""
        return ("postgresql:///%s?host=%s,%s&port=%d,%d&user=lind&target_session_attrs=read-write"
                % (self.dbname, self.dir, self.dir, self.ports[0], self.ports[1]))

    def _make(self):
        self.run("initdb", "-D", self.data[0], "-U", "lind", "-A", "trust", "-E", "UTF8", "--locale=C", "-N")
        with open(os.path.join(self.data[0], "pg_hba.conf"), "a") as f:
            f.write("local replication lind trust\n")
        self.conf(0, "listen_addresses = ''\nunix_socket_directories = '%s'\nport = %d\n"
                     "wal_level = replica\nmax_wal_senders = 4\nmax_replication_slots = 4\n"
                     "synchronous_commit = on\n" % (self.dir, self.ports[0]))
        self.start(0)
        psql(self.uri(0, "postgres"), 'CREATE DATABASE "%s"' % self.dbname)
        self.run("pg_basebackup", "-d", "host=%s port=%d user=lind application_name=standby1"
                 % (self.dir, self.ports[0]), "-D", self.data[1], "-R", "-X", "stream", "-c", "fast")
        os.chmod(self.data[1], 0o700)
        self.conf(1, "port = %d\nsynchronous_standby_names = ''\n"
                     "primary_conninfo = 'host=%s port=%d user=lind application_name=standby1'\n"
                     % (self.ports[1], self.dir, self.ports[0]))
        self.start(1)
        # Synchronous from here on (before, the standby's absence would
        # have made the primary's commits wait for it).
        psql(self.uri(0, "postgres"), "ALTER SYSTEM SET synchronous_standby_names = '%s'"
             % ("standby1" if self.sync else ""))
        psql(self.uri(0, "postgres"), "SELECT pg_reload_conf()")
        deadline = time.time() + 120 * SLOW
        q = ("SELECT state || ' ' || sync_state FROM pg_stat_replication"
             " WHERE application_name = 'standby1'")
        while psql(self.uri(0, "postgres"), q) != "streaming " + ("sync" if self.sync else "async"):
            expect(time.time() < deadline, "the standby is not streaming synchronously: %r"
                   % psql(self.uri(0, "postgres"), q))
            time.sleep(0.05)

    def crash(self, i):
        self.run("pg_ctl", "-D", self.data[i], "-m", "immediate", "-w", "stop")
        self.up[i] = False

    def promote(self, i):
        self.run("pg_ctl", "-D", self.data[i], "-w", "-t", str(int(600 * SLOW)), "promote")

    def stop(self):
        self.guard.stdin.close()
        self.guard.wait(timeout=600 * SLOW)
        self.up = [False, False]


@scase
def scale_standby_pg():
    """Two nodes on a primary with a synchronous standby through a libpq
    multi-host URI (target_session_attrs=read-write), 16 sessions under
    load; the primary crashed mid-load (immediate stop) and, once turns fail
    with io, the standby promoted: the nodes reconnect to it by themselves,
    clients retry their failed turns with the same request ids, and the new
    primary holds every acknowledged turn once, the streams those of one
    uninterrupted node."""
    pair = PgPair("scale_standby", sync=not os.environ.get("LIND_STANDBY_ASYNC"))
    nodes = []
    try:
        lease = int(30000 * SLOW)   # no lease lapses during the failover
        extra = ["--store-conns", "2", "--db-reconnect", "300", "--db-wait", str(int(60 * SLOW))]
        nodes = [node("sb%d" % i, pair.multi_uri(), "s%d" % i, lease, extra) for i in range(2)]
        where = {"s0": nodes[0].sock, "s1": nodes[1].sock}
        sessions = ["sb-%02d" % i for i in range(16)]
        acked = {s: [] for s in sessions}       # (text, output, done event), in order
        reqs = {s: [] for s in sessions}
        errors = []
        fails = {}          # code -> count of failed attempts retried
        retried = set()     # (session, request id) sent more than once
        conflicted = set()  # those of them answered conflict
        msgs = []
        first_after = []    # done times of turns whose acknowledged attempt began after the kill
        done = [0]
        replayed = [0]      # retries answered with the recorded result (committed before)
        t_kill = [None]     # the primary's kill: sent
        t_dead = [None]     # and done (pg_ctl stop -m immediate returned)
        receiver = [None]   # the standby's WAL receiver while paused
        cv = threading.Condition()
        stop = threading.Event()

        def client(k):
            conns = {nid: Client(where[nid], timeout=600 * SLOW) for nid in where}
            try:
                for rnd in range(400):
                    if stop.is_set():
                        break
                    for i, s in enumerate(sessions):
                        if i % 8 != k:
                            continue
                        text = ("%s turn %d. " % (s, rnd)).encode()
                        seed = 100 + i if rnd == 0 else None
                        rid = "%s/%d" % (s, rnd)
                        target = "s%d" % (i % 2)
                        deadline = time.time() + 120 * SLOW
                        while True:
                            sent = time.time()
                            ev, toks = rturn(conns[target], s, text, rid, max_tokens=4, seed=seed)
                            if ev["event"] == "done":
                                with cv:
                                    acked[s].append((text, b"".join(toks), ev))
                                    if ev.get("replayed"):
                                        replayed[0] += 1
                                        # `conflict` says the turn was not saved
                                        expect((s, rid) not in conflicted, "%s %s was answered conflict"
                                               " (not saved), yet its retry found it committed" % (s, rid))
                                    reqs[s].append((text, 4, seed))
                                    if t_dead[0] is not None and sent > t_dead[0]:
                                        first_after.append(time.time())
                                    done[0] += 1
                                    cv.notify_all()
                                break
                            expect(ev["event"] == "error", "unexpected final %r" % ev)
                            if ev["code"] == "moved":
                                m = OWNER.search(ev["message"])
                                expect(m and m.group(1) in where, "moved: %r" % ev["message"])
                                target = m.group(1)
                                continue
                            # io while the database fails over (conflict should a
                            # lease lapse): nothing acknowledged; the same request
                            # id again, applied at most once.
                            expect(ev["code"] in ("io", "conflict"), "%s %s: %r" % (s, rid, ev))
                            expect(time.time() < deadline, "%s %s kept failing: %r" % (s, rid, ev))
                            with cv:
                                fails[ev["code"]] = fails.get(ev["code"], 0) + 1
                                if ev["code"] == "conflict":
                                    conflicted.add((s, rid))
                                msgs.append("%.3f %s: %s" % (time.time() - (t_kill[0] or 0), ev["code"], ev["message"]))
                                retried.add((s, rid))
                                cv.notify_all()
                            time.sleep(0.05)
            except Exception as e:   # reported by the main thread
                errors.append(repr(e))
            finally:
                for c in conns.values():
                    c.close()
                with cv:
                    cv.notify_all()

        th = [threading.Thread(target=client, args=(k,)) for k in range(8)]

        def wait_for(cond, what):
            with cv:
                ok = cv.wait_for(lambda: cond() or errors or not any(t.is_alive() for t in th),
                                 timeout=600 * SLOW)
            expect(not errors, "%s: %s" % (what, errors[:3]))
            expect(ok and cond(), "%s: did not happen" % what)

        try:
            for t in th:
                t.start()
            wait_for(lambda: done[0] >= 32, "turns before the failover")
            # The standby's WAL receiver paused: the primary's commits wait for
            # it (synchronous), so turns are in their COMMIT when the primary
            # dies, flushed there and unacknowledged. (LIND_STANDBY_ASYNC=1,
            # a demonstration and not part of the suite: no synchronous
            # standby; commits go on being acknowledged meanwhile, and the
            # WAL receiver is killed with what it had not read.)
            receiver[0] = int(psql(pair.uri(1, "postgres"), "SELECT pid FROM pg_stat_wal_receiver"))
            os.kill(receiver[0], signal.SIGSTOP)
            with cv:
                at_stop = done[0]
            if pair.sync:
                deadline = time.time() + 120 * SLOW
                q = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                while int(psql(pair.uri(0, "postgres"), q)) < 2:
                    expect(time.time() < deadline, "no commit waits for the paused standby")
                    time.sleep(0.02)
                with cv:
                    expect(done[0] <= at_stop + 8, "%d turns acknowledged with the standby paused"
                           % (done[0] - at_stop))
            else:
                wait_for(lambda: done[0] >= at_stop + 8, "turns acknowledged with the standby paused")
            with cv:
                t_kill[0] = time.time()
            pair.crash(0)
            with cv:
                t_dead[0] = time.time()
                at_kill = done[0]
            if pair.sync:
                os.kill(receiver[0], signal.SIGCONT)   # it reads what the walsender had sent
                receiver[0] = None
            else:
                os.kill(receiver[0], signal.SIGKILL)
                receiver[0] = None
                deadline = time.time() + 120 * SLOW   # the standby's postmaster restarts it
                while True:
                    try:
                        if psql(pair.uri(1, "postgres"), "SELECT pg_is_in_recovery()") == "t":
                            break
                    except AssertionError:
                        pass
                    expect(time.time() < deadline, "the standby did not come back")
                    time.sleep(0.05)
            # The nodes' reconnects (300 ms) give up while there is no
            # writable server: turns fail with io. Then the promotion.
            wait_for(lambda: fails.get("io", 0) >= 2, "turns failing with io while no server is writable")
            t_promote = time.time()
            pair.promote(1)
            t_promoted = time.time()
            wait_for(lambda: done[0] >= at_kill + 32 and first_after, "turns after the promotion")
        finally:
            if receiver[0]:
                try:
                    os.kill(receiver[0], signal.SIGCONT)
                except OSError:
                    pass
            stop.set()
            for t in th:
                t.join()
        expect(not errors, "clients: %s" % errors[:3])
        new = pair.uri(1)
        expect(psql(new, "SELECT pg_is_in_recovery()") == "f", "the standby was not promoted")
        c = Client(nodes[0].sock)
        total = sum(len(v) for v in acked.values())
        lost = dup = 0
        for s in sessions:   # counted first, to say how many if any
            ev = c.call("info", session=s)
            expect(ev["event"] == "result", "info %s: %r" % (s, ev))
            ins = re.findall(rb"sb-\d+ turn \d+\. ",
                             b"".join(bytes(e["text"]) for e in ev["transcript"] if e["role"] == "in"))
            lost += sum(t not in ins for t, _, _ in acked[s])
            dup += len(ins) - len(set(ins))
        expect(lost == 0 and dup == 0, "%d of %d acknowledged turns lost, %d duplicated"
               % (lost, total, dup))
        for s in sessions:
            expect(stored(c, s) == expected([(t, o) for t, o, _ in acked[s]]),
                   "%s: the store does not hold exactly the acknowledged turns" % s)
        c.close()
        rows = dict(line.split("|") for line in
                    psql(new, "SELECT name, tokens FROM lind_sessions ORDER BY name").splitlines())
        for s in sessions:
            want = acked[s][-1][2]["session_tokens"]
            expect(int(rows.get(s, -1)) == want, "%s: %s tokens on the new primary, the last"
                   " acknowledged turn left %d" % (s, rows.get(s), want))
            # Each acknowledged turn added exactly its tokens to the one before
            # (a turn lost or applied twice would break the chain).
            ev = [e for _, _, e in acked[s]]
            for a, b in zip(ev, ev[1:]):
                expect(b["session_tokens"] == a["session_tokens"] + b["tokens_in"] + b["tokens_out"],
                       "%s: the acknowledged turns' tokens do not add up: %r" %
                       (s, [(e["tokens_in"], e["tokens_out"], e["session_tokens"]) for e in ev]))
        n_turns = int(psql(new, "SELECT count(*) FROM lind_turns"))
        expect(n_turns == sum(min(32, len(v)) for v in acked.values()), "lind_turns holds %d results" % n_turns)
        for m in [m for m in msgs if " conflict: " in m][:2]:
            print("NOTE scale_standby_pg: a conflict retried: %s" % m[:500], flush=True)
        if os.environ.get("LIND_SCALE_VERBOSE"):
            print("NOTE scale_standby_pg: failed attempts: %s" % "; ".join(msgs[:12]), flush=True)
        print("NOTE scale_standby_pg: %d turns acknowledged (%d after the kill), %d turns retried"
              " (%d failed attempts: %s; %d retries answered replayed), lost 0, duplicated 0;"
              " primary killed -> first turn"
              " committed on the new primary %.2f s (promotion started %.2f s after the kill and"
              " took %.2f s)"
              % (total, total - at_kill, len(retried), sum(fails.values()),
                 ", ".join("%s %d" % kv for kv in sorted(fails.items())), replayed[0],
                 min(first_after) - t_kill[0], t_promote - t_kill[0], t_promoted - t_promote),
              flush=True)
    finally:
        stop_all(nodes)
        pair.stop()
    # The streams equal those of one node serving each session throughout.
    ref = Server("sbref", extra=TR).start()
    try:
        for s in sessions:
            outs = replay(ref, s, reqs[s])
            expect(outs == [o for _, o, _ in acked[s]], "%s: the stream differs from one node's" % s)
    finally:
        ref.stop()


finish()
