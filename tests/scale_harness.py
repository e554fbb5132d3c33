"""tests/scale_harness.py — what the multi-node cases share (tests/scale_nodes.py,
and the chaos campaign bench/chaos.py): the PostgreSQL server that
tests/test_daemon_scale.c started (LIND_PG_* variables), nodes on it, turns
that follow `moved`, and the checks of what the store holds against the
acknowledged turns and against one uninterrupted node."""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, Client, case, expect, SLOW  # noqa: E402

URI = os.environ.get("LIND_PG_URI", "")
OWNER = re.compile(r"leased by node '([^']*)'")
TR = ["--transcript-bytes", "1048576"]   # the whole history stays in the transcript

if not URI:
    print("SKIP scale_pg: LIND_PG_URI is not set (run build/tests/test_daemon_scale)")
    sys.exit(0)

# The server itself (tests/test_daemon_scale.c): to stop and start it.
PGDIR = os.environ.get("LIND_PG_DIR", "")
PGBIN = os.environ.get("LIND_PG_BINDIR", "")
PGPORT = os.environ.get("LIND_PG_PORT", "")
PGUID = int(os.environ.get("LIND_PG_UID", "-1"))
PGGID = int(os.environ.get("LIND_PG_GID", "-1"))
ONLY = [c for c in os.environ.get("LIND_SCALE_ONLY", "").split(",") if c]


def scase(fn):
    if ONLY and fn.__name__ not in ONLY:
        return fn
    return case(fn)


def as_pg():
    """In a child: become the server's user (PostgreSQL and PgBouncer refuse root)."""
    if os.geteuid() == 0 and PGUID > 0:
        os.setgroups([])
        os.setgid(PGGID)
        os.setuid(PGUID)


def pg_ctl(*args):
    r = subprocess.run([os.path.join(PGBIN, "pg_ctl"), "-D", os.path.join(PGDIR, "data")] + list(args),
                       preexec_fn=as_pg, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=600 * SLOW)
    expect(r.returncode == 0, "pg_ctl %s: %r" % (" ".join(args), r.stdout[-600:]))


def pg_stop():
    """Stop the server as a crash would (immediate: no checkpoint; clients'
    connections drop)."""
    pg_ctl("-m", "immediate", "-w", "stop")


def pg_start():
    pg_ctl("-l", os.path.join(PGDIR, "server.log"), "-w", "-t", str(int(600 * SLOW)), "-o",
           "-k %s -p %s -c listen_addresses=''" % (PGDIR, PGPORT), "start")


def psql(uri, sql):
    r = subprocess.run([os.path.join(PGBIN, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        "-d", uri, "-c", sql], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=600 * SLOW)
    expect(r.returncode == 0, "psql %s: %r" % (sql, r.stdout[-600:]))
    return r.stdout.decode().strip()


def terminate_lind(db):
    """pg_terminate_backend on every lind connection to database db: how many."""
    return int(psql(URI % db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                              " WHERE datname = current_database() AND application_name = 'lind'"))


def node(name, db, nid, lease_ms, extra=()):
    lease_ms = min(int(lease_ms), 3600000)   # the option's maximum (sanitizers scale SLOW past it)
    return Server(name, extra=["--node-id", nid, "--lease-ms", str(lease_ms)] + TR + list(extra),
                  db=db).start()


def turn(c, session, text, max_tokens, seed=None):
    """One generate: ("done", bytes) / ("moved", owner) / (code, message)."""
    f = {"session": session, "text": text, "max_tokens": max_tokens, "temperature": 0.8}
    if seed is not None:
        f["seed"] = seed
    toks = []
    ev = c.final(c.send("generate", **f), toks)
    if ev["event"] == "done":
        return "done", b"".join(toks)
    expect(ev["event"] == "error", "unexpected final %r" % ev)
    if ev["code"] == "moved":
        m = OWNER.search(ev["message"])
        expect(m, "a moved error names no owner: %r" % ev["message"])
        return "moved", m.group(1)
    return ev["code"], ev["message"]


def merged(entries):
    """Transcript entries with consecutive same-role entries joined."""
    out = []
    for role, text in entries:
        if not text:
            continue
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + text)
        else:
            out.append((role, text))
    return out


def stored(c, session):
    ev = c.call("info", session=session)
    expect(ev["event"] == "result", "info %s: %r" % (session, ev))
    return merged([(e["role"], bytes(e["text"])) for e in ev["transcript"]])


def expected(turns):
    """The transcript a list of acknowledged (text, output) turns leaves."""
    return merged([x for t, o in turns for x in (("in", t), ("out", o))])


def replay(ref, session, reqs):
    """Run the requests (text, max_tokens, seed) on one uninterrupted node:
    the outputs."""
    c = Client(ref.sock)
    outs = []
    for text, mt, seed in reqs:
        st, out = turn(c, session, text, mt, seed)
        expect(st == "done", "reference turn on %s: %s %r" % (session, st, out))
        outs.append(out)
    c.close()
    return outs


def stop_all(nodes):
    for n in nodes:
        if n.proc:
            n.stop()


def rturn(c, session, text, rid, max_tokens=8, seed=None):
    """One generate with a request id: (final event, token events' bytes)."""
    f = {"session": session, "text": text, "max_tokens": max_tokens, "temperature": 0.8,
         "request_id": rid}
    if seed is not None:
        f["seed"] = seed
    toks = []
    ev = c.final(c.send("generate", **f), toks)
    return ev, toks


def same_done(a, b, what):
    for k in ("event", "reason", "tokens_in", "tokens_out", "session_tokens", "fed_bytes"):
        expect(a.get(k) == b.get(k), "%s: %s %r first, %r on the retry" % (what, k, a.get(k), b.get(k)))
