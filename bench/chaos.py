"""bench/chaos.py — a chaos campaign (docs/SCALE.md, "Chaos campaign"):
three `lind serve` nodes on one PostgreSQL, 48 sessions, 8 clients that
pick a node at random for every turn, follow `moved`, and retry every
failure (a refused connection, `io`, `conflict`, a node gone mid-answer)
with the same request id until the turn is acknowledged. Meanwhile, for
LIND_CHAOS_SECONDS (default 120), one event about every 2 s:

  kill     SIGKILL a node (mid-turn: clients are always busy), restart it
           with the same --node-id after 0-1 s
  freeze   SIGSTOP a node for twice the lease (a partition: its leases
           lapse, others take its sessions), then SIGCONT
  dbstop   the database crashed (immediate stop) and started again
  conns    every lind connection to the database terminated

Then every node is stopped, and the store is checked against what the
clients were told: every acknowledged turn is in its session's transcript
exactly once and in order, nothing else is (lost / duplicated counted),
the session token counts add up turn by turn, and every session's stream
is byte-identical to one uninterrupted node's serving the same requests
(the first turn seeded, sampling at temperature 0.8). The figures — events,
turns acknowledged, failed attempts by kind, replays, lost, duplicated,
and the resume latency (a kill to the next acknowledged turn of each
session the killed node had served last) — are printed as NOTE lines.

Not part of make test or CI: `make chaos` runs it through
build/tests/test_daemon_scale (which starts the private PostgreSQL server:
LIND_SCALE_SCRIPT=bench/chaos.py). LIND_CHAOS_SEED picks the events."""
import os
import random
import signal
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from daemon_harness import Server, Client, case, expect, finish, SLOW  # noqa: E402
from scale_harness import (URI, OWNER, TR, node, psql, pg_stop, pg_start, terminate_lind,  # noqa: E402
                           stored, expected, replay, rturn)

SECONDS = float(os.environ.get("LIND_CHAOS_SECONDS", "120"))
SEED = int(os.environ.get("LIND_CHAOS_SEED", "1"))
N_NODES, N_SESSIONS, N_CLIENTS = 3, 48, 8
DBNAME = "scale_chaos"


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


@case
def chaos_pg():
    psql(URI % "postgres", "CREATE DATABASE %s" % DBNAME)
    db = URI % DBNAME
    lease = int(2000 * SLOW)
    extra = ["--store-conns", "2", "--db-reconnect", str(int(30000 * SLOW)), "--db-wait", "600"]
    ids = ["n%d" % i for i in range(N_NODES)]
    nodes = [node("ch%d" % i, db, ids[i], lease, extra) for i in range(N_NODES)]
    by_id = dict(zip(ids, nodes))
    down = set()                  # node ids killed or frozen, not yet back
    lock = threading.Lock()
    sessions = ["ch-%d" % i for i in range(N_SESSIONS)]
    acked = {s: [] for s in sessions}      # (text, output, done event, node id, time)
    reqs = {s: [] for s in sessions}       # (text, max_tokens, seed): for the reference
    fails = {}
    replayed = [0]
    errors = []
    stop = threading.Event()
    rnd_main = random.Random(SEED)

    def fail(kind):
        with lock:
            fails[kind] = fails.get(kind, 0) + 1

    def client(k):
        rnd = random.Random(SEED * 1000 + k)
        conns = {}
        mine = [s for i, s in enumerate(sessions) if i % N_CLIENTS == k]
        n = 0
        try:
            while not stop.is_set() and not errors:
                for s in mine:
                    text = ("%s turn %d. " % (s, n)).encode()
                    rid = "%s/%d" % (s, n)
                    seed = 1000 + sessions.index(s) if n == 0 else None
                    hint = None
                    t0 = time.time()
                    while True:
                        expect(time.time() - t0 < 600 * SLOW, "%s never acknowledged" % rid)
                        with lock:
                            up = [i for i in ids if i not in down]
                        nid = hint if hint in up else rnd.choice(up or ids)
                        hint = None
                        try:
                            c = conns.get(nid)
                            if c is None:
                                c = conns[nid] = Client(by_id[nid].sock, timeout=600)
                            ev, toks = rturn(c, s, text, rid, seed=seed)
                        except (OSError, EOFError, ValueError):
                            conns.pop(nid, None)
                            fail("connection")
                            time.sleep(0.02)
                            continue
                        if ev["event"] == "done":
                            break
                        code = ev.get("code")
                        if code == "moved":
                            m = OWNER.search(ev["message"])
                            hint = m.group(1) if m else None
                            fail("moved")
                        else:
                            fail(code)
                        time.sleep(0.02)
                    with lock:
                        if ev.get("replayed"):
                            replayed[0] += 1
                        acked[s].append((text, b"".join(toks), ev, nid, time.time()))
                        reqs[s].append((text, 8, seed))
                n += 1
        except Exception as e:   # reported by the main thread
            errors.append("client %d: %r" % (k, e))
        finally:
            for c in conns.values():
                try:
                    c.close()
                except OSError:
                    pass

    events = {"kill": 0, "freeze": 0, "dbstop": 0, "conns": 0}
    kills = []                    # (time, node id, sessions it served last)
    th = [threading.Thread(target=client, args=(k,)) for k in range(N_CLIENTS)]
    t_begin = time.time()
    try:
        for t in th:
            t.start()
        while time.time() - t_begin < SECONDS and not errors:
            time.sleep(rnd_main.uniform(1.0, 3.0))
            what = rnd_main.choices(list(events), weights=[50, 15, 15, 20])[0]
            events[what] += 1
            if what in ("kill", "freeze"):
                nid = rnd_main.choice(ids)
                srv = by_id[nid]
                with lock:
                    down.add(nid)
                    last = [s for s in sessions if acked[s] and acked[s][-1][3] == nid]
                if what == "kill":
                    srv.proc.send_signal(signal.SIGKILL)
                    srv.proc.wait()
                    srv.proc = None
                    kills.append((time.time(), nid, last))
                    time.sleep(rnd_main.uniform(0, 1.0))
                    srv.start(timeout=600)   # the same --node-id: waits for its dead claim to expire
                else:
                    srv.proc.send_signal(signal.SIGSTOP)
                    time.sleep(2 * lease / 1000)
                    srv.proc.send_signal(signal.SIGCONT)
                with lock:
                    down.discard(nid)
            elif what == "dbstop":
                pg_stop()
                time.sleep(rnd_main.uniform(0, 1.0))
                pg_start()
            else:
                terminate_lind(DBNAME)
    finally:
        stop.set()
        for t in th:
            t.join()
    t_end = time.time()
    try:
        expect(not errors, "clients: %s" % errors[:3])
        c = Client(nodes[0].sock)
        total = sum(len(v) for v in acked.values())
        lost = dup = 0
        for s in sessions:
            ins = [bytes(e["text"]) for e in c.call("info", session=s)["transcript"] if e["role"] == "in"]
            ins = b"".join(ins)
            for text, _, _, _, _ in acked[s]:
                k = ins.count(text)
                lost += k == 0
                dup += max(0, k - 1)
        expect(lost == 0 and dup == 0, "%d of %d acknowledged turns lost, %d duplicated" % (lost, total, dup))
        for s in sessions:
            expect(stored(c, s) == expected([(t, o) for t, o, _, _, _ in acked[s]]),
                   "%s: the store does not hold exactly the acknowledged turns" % s)
            ev = [e for _, _, e, _, _ in acked[s]]
            for a, b in zip(ev, ev[1:]):
                expect(b["session_tokens"] == a["session_tokens"] + b["tokens_in"] + b["tokens_out"],
                       "%s: the acknowledged turns' tokens do not add up" % s)
        c.close()
        resume = []
        for t_kill, nid, last in kills:
            for s in last:
                after = [t for _, _, _, _, t in acked[s] if t > t_kill]
                if after:
                    resume.append(after[0] - t_kill)
        print("NOTE chaos_pg: %.0f s, %d nodes, %d sessions, %d clients; events: %s" %
              (t_end - t_begin, N_NODES, N_SESSIONS, N_CLIENTS,
               ", ".join("%s %d" % kv for kv in events.items())), flush=True)
        print("NOTE chaos_pg: %d turns acknowledged (%d answered by a replay of a committed turn),"
              " lost 0, duplicated 0; failed attempts retried: %s" %
              (total, replayed[0], ", ".join("%s %d" % kv for kv in sorted(fails.items())) or "none"),
              flush=True)
        if resume:
            print("NOTE chaos_pg: resume after a kill (to the next acknowledged turn of each session"
                  " the killed node served last, %d of them): median %.2f s, 90th %.2f s, max %.2f s" %
                  (len(resume), percentile(resume, 0.5), percentile(resume, 0.9), max(resume)), flush=True)
    finally:
        for n in nodes:
            if n.proc:
                n.stop()
    ref = Server("chref", extra=TR).start()
    try:
        for s in sessions:
            outs = replay(ref, s, reqs[s])
            expect(outs == [o for _, o, _, _, _ in acked[s]], "%s: the stream differs from one node's" % s)
    finally:
        ref.stop()
    print("NOTE chaos_pg: every session's stream byte-identical to one uninterrupted node's", flush=True)


finish()
