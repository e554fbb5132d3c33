"""tests/test_daemon_faults.py — the daemon under fault injection
(`make test-faults`; docs/DAEMON.md, "Fault injection").

Drives build-asan/lind-faults (lind with tests/fault_shim.c linked in, under
AddressSanitizer + LeakSanitizer + UBSan; started by tests/daemon_harness.py's
Server, driven by its Client) through one fixed workload over the
socket — two connections, four sessions: appends and greedy generates, a
fork, an export and an import, a delete, list, info, stats — once per N of a
sweep, with
  - the N-th allocation failing (counted from the moment the daemon listens;
    a seeded sample of those positions), or
  - the N-th allocation from main() on failing (a seeded sample of the
    start-up positions: model load, store open, threads), or
  - the N-th store write (SQLite xWrite/xSync/xTruncate) failing with an I/O
    error (every xSync and xTruncate; of each run of xWrite calls the first,
    second, last and one at random), or with "disk full" (the first and last
    xWrite of each run): see sweep_plan().
Each run must:
  - never crash: no signal death, no sanitizer report (a leak included);
    a daemon whose start-up failed exits with status 1 and a message naming
    what failed;
  - answer every request with its final event: success, or an error with a
    specific code and a message (`io`, `internal`, `insufficient_storage`
    after a "disk full": that write's, and turns refused until the disk
    has room again; `not_found`/`exists`
    only where an earlier failure made that the right answer), or, when
    memory ran out on the loop thread, an `internal` error on id 0 or a
    close the daemon logs; never a malformed event, never silence;
  - stop on SIGTERM with status 0;
  - lose no acknowledged turn: a normal (unarmed) daemon restarted on the
    same database must hold, for every session, what the fault-free
    reference run held after the session's last acknowledged operation —
    token count, transcript and the exported bytes — or, where a failed
    operation came after it, possibly the state that operation would have
    committed (a failed commit may or may not have reached the disk). A
    session whose acknowledged history left the reference's (an operation
    failed, a later one was acknowledged) must hold the token count its
    last answer reported and end with the text it streamed.
The sweep is fixed by LIND_FAULTS_SEED (default 1) and printed as NOTE lines.
LIND_FAULTS_ONLY=alloc:N (or start:N, write:N, full:N) repeats one run; a
failed run keeps its database and logs (the FAIL line names the
directory). Outside `make test-faults` (LIND_FAULTS_DAEMON=1) it SKIPs.
"""
import os
import re
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_harness as H  # noqa: E402
from daemon_harness import SLOW  # noqa: E402   time bounds: seconds times SLOW (LIND_TEST_TIME_SCALE)

LIND = os.path.join(os.path.dirname(H.LIND), "lind-faults")
SEED = int(os.environ.get("LIND_FAULTS_SEED", "1"))
ONLY = os.environ.get("LIND_FAULTS_ONLY", "")
# How many allocation positions are tried (the store-write positions are all tried).
SERVE_ALLOC_RUNS = int(os.environ.get("LIND_FAULTS_ALLOC_RUNS", "120"))
START_ALLOC_RUNS = int(os.environ.get("LIND_FAULTS_START_RUNS", "16"))
WRITES_PER_RUN = int(os.environ.get("LIND_FAULTS_WRITES_PER_RUN", "1"))
ANSWER_SECONDS = 20          # a request may take this long (times SLOW) under ASan before it counts as unanswered
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "AddressSanitizer:DEADLYSIGNAL", "SUMMARY: UndefinedBehaviorSanitizer")


def say(line):
    print(line, flush=True)


if not (os.environ.get("LIND_FAULTS_DAEMON") == "1" or ONLY):
    say("SKIP daemon_fault_sweep: run by `make test-faults` (on build-asan/lind-faults)")
    H.finish()
if not os.access(LIND, os.X_OK):
    say("FAIL setup: %s is not built (make test-faults builds it)" % LIND)
    H.failures += 1
    H.finish()

# The runs' directories: in memory where it can be (SQLite syncs on every commit).
TMP = tempfile.mkdtemp(prefix="lind-dfaults-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)


class Unanswered(Exception):
    pass


class Closed(Unanswered):
    """The server closed the connection before the final event."""


class ConnError(Exception):
    """An error on id 0 (about the connection, not one request), then the
    connection closes."""
    def __init__(self, code, message):
        Exception.__init__(self, "%s: %s" % (code, message))
        self.code, self.message = code, message


def daemon(d, faults):
    """A started lind-faults (H.Server) on d's database (kept across
    restarts) with the faults armed (LIND_FAULT_* variables; none from the
    caller's environment), its output in a log of its own (d/log-N.txt) and
    its report in d/report.txt; and whether it serves (False: it exited
    first)."""
    env = {k: None for k in os.environ if k.startswith("LIND_FAULT_")}
    env.update(faults)
    env["LIND_FAULT_REPORT"] = os.path.join(d, "report.txt")
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1"
    env["LIND_CPU_THREADS"] = "1"     # fewer threads: allocation order varies less
    dm = H.Server(d, lind=LIND, env=env, logpath=os.path.join(d, "log-%d.txt" % len(os.listdir(d))))
    return dm, dm.start(may_fail=True) is not None


def stop(dm):
    """SIGTERM; the exit status, or why there is none (killed then)."""
    try:
        dm.stop(check=False)
    except subprocess.TimeoutExpired:
        dm.stop(signal.SIGKILL)
        return "hung: no exit within %.0f s of SIGTERM" % (60 * SLOW)
    return dm.returncode


def counts(d):
    """The fault shim's report of the daemon that last ran on d."""
    with open(os.path.join(d, "report.txt")) as f:
        w = f.read().split()
    return {w[i]: w[i + 1] if w[i] == "kinds" else int(w[i + 1]) for i in range(0, len(w), 2)}


def connect(dm):
    """An H.Client whose reads wait ANSWER_SECONDS, and never ask the
    daemon anything the test did not (its allocations are counted)."""
    return H.Client(dm.sock, timeout=ANSWER_SECONDS, ask_progress=False)


def call(c, op, **f):
    """(final event, bytes of the token events) of a request on Client c.
    Raises Unanswered when the connection ends or times out before the
    final event, ConnError when the daemon answered on id 0 instead."""
    toks = []
    sent, why = False, None
    try:
        rid = c.send(op, **f)
        sent = True
        ev = c.final(rid, toks)
    except (OSError, EOFError, ValueError) as e:   # ValueError: a malformed event
        why = e
    if not sent:
        # A connection the daemon refused (out of memory accepting it) is
        # answered on id 0 and closed, maybe before this send: its answer
        # is still there to read.
        try:
            c.s.settimeout(1.0)
            c.up.feed(c.s.recv(1 << 16))
        except OSError:
            pass
        c.pending += list(c.up)
    # An error on id 0 read before the final event (kept aside by final()):
    # the request was not run.
    for e0 in c.pending:
        if isinstance(e0, dict) and e0.get("id") == 0 and e0.get("event") == "error":
            raise ConnError(e0.get("code"), e0.get("message", ""))
    if why is None:
        return ev, b"".join(toks)
    if not sent:
        raise Unanswered("%s: sending failed: %s" % (op, why))
    if isinstance(why, EOFError):
        raise Closed("%s: the connection closed before its final event" % op)
    if isinstance(why, socket.timeout):
        raise Unanswered("%s: no answer within %.0f s" % (op, ANSWER_SECONDS * SLOW))
    raise Unanswered("%s: %s" % (op, why))


# ---- the workload ------------------------------------------------------------
# (connection, op, session, fields). Mutating operations name the session they
# change; the import's data is the reference run's export of b, so the
# workload is the same whatever failed before it.
G = dict(temperature=0.0)
WORKLOAD = [
    (0, "hello", None, {}),
    (0, "append", "a", dict(text=b"In the beginning God created ")),
    (0, "generate", "a", dict(text=b"", max_tokens=8, **G)),
    (1, "generate", "b", dict(text=b"And the earth was", max_tokens=6, **G)),
    (0, "fork", "c", dict(session="a", to="c")),
    (1, "generate", "c", dict(text=b" and", max_tokens=5, **G)),
    (0, "export", None, dict(session="b")),
    (1, "import", "d", dict(session="d")),
    (0, "generate", "d", dict(text=b"\n", max_tokens=4, **G)),
    (1, "delete", "b", dict(session="b")),
    (0, "list", None, {}),
    (1, "info", None, dict(session="a")),
    (0, "append", "a", dict(text=b"the heaven")),
    (1, "generate", "a", dict(text=b" and", max_tokens=6, **G)),
    (0, "stats", None, {}),
]
NAMES = ["a", "b", "c", "d"]
ABSENT = "absent"


def request_fields(op, sess, f, ref_export):
    r = dict(f)
    if op in ("append", "generate"):
        r["session"] = sess
    if op == "import":
        r["data"] = ref_export
    return r


def snapshot(c, name):
    """(tokens, transcript, export bytes) of a session, or ABSENT."""
    ev, _ = call(c, "info", session=name)
    if ev["event"] == "error":
        if ev["code"] == "not_found":
            return ABSENT
        raise AssertionError("info %s: %s %s" % (name, ev["code"], ev.get("message")))
    ex, _ = call(c, "export", session=name)
    if ex["event"] == "error":
        raise AssertionError("export %s: %s %s" % (name, ex["code"], ex.get("message")))
    tr = tuple((e["role"], bytes(e["text"])) for e in ev["transcript"])
    return (ev["tokens"], tr, bytes(ex["data"]))


def sanitizer_report(text):
    return next((m for m in SANITIZER_MARKS if m in text), None)


def run_reference():
    """The fault-free run, twice: once as the workload alone (counting the
    allocations and writes the sweep ranges over), once with a snapshot of
    every changed session after each operation."""
    out = {}
    for with_snaps in (False, True):
        d = tempfile.mkdtemp(dir=TMP, prefix="ref-")
        dm, served = daemon(d, {})
        if not served:
            raise AssertionError("reference daemon failed: " + dm.log(2000))
        conns = [connect(dm), connect(dm)]
        obs = connect(dm) if with_snaps else None
        snaps = {}       # (name, k): snapshot after the name's k-th change
        kth = {n: 0 for n in NAMES}
        snaps.update({(n, 0): ABSENT for n in NAMES})
        answers = []
        export_b = out.get("export_b")
        for ci, op, sess, f in WORKLOAD:
            ev, toks = call(conns[ci], op, **request_fields(op, sess, f, export_b))
            if ev["event"] == "error":
                raise AssertionError("reference run: %s failed: %s %s" % (op, ev["code"], ev.get("message")))
            if op == "export":
                export_b = bytes(ev["data"])
            answers.append((ev, toks))
            if sess is not None:
                kth[sess] += 1
                if obs:
                    snaps[(sess, kth[sess])] = snapshot(obs, sess)
        for c in conns + ([obs] if obs else []):
            c.close()
        rc = stop(dm)
        text = dm.log(None)
        if rc != 0 or sanitizer_report(text):
            raise AssertionError("reference daemon exited with %s: %s" % (rc, text[-3000:]))
        if not with_snaps:
            out["counts"] = counts(d)
            out["export_b"] = export_b
            out["answers"] = answers
        else:
            out["snaps"] = snaps
            if [a[1] for a in answers] != [a[1] for a in out["answers"]]:
                raise AssertionError("the two reference runs streamed different tokens")
    return out


REF = None


def check_run(kind, n):
    """One run with one fault armed; returns (fired, problems list)."""
    d = tempfile.mkdtemp(dir=TMP, prefix="%s-%d-" % (kind, n))
    env = {"alloc": {"LIND_FAULT_ALLOC": str(n)},
           "start": {"LIND_FAULT_ALLOC": str(n), "LIND_FAULT_ALLOC_FROM": "start"},
           "write": {"LIND_FAULT_WRITE": str(n)},
           "full": {"LIND_FAULT_WRITE": str(n), "LIND_FAULT_WRITE_ERR": "full"}}[kind]
    problems = []
    dm, served = daemon(d, env)
    # Per session: the daemon's committed view (a possibility key) and the
    # set of keys it may hold on disk. Keys: ("ref", k) = the reference's
    # snapshot after its k-th change; ("div", tokens, out) = diverged, known
    # by the last answer; "any" = unknown (a failed commit on a diverged base).
    view = {s: ("ref", 0) for s in NAMES}
    poss = {s: {("ref", 0)} for s in NAMES}
    kth = {s: 0 for s in NAMES}
    answered = 0
    unanswered = None
    closed_by_server = []

    def absent(name):
        """Whether the daemon's committed view of a session is that it does
        not exist: True, False or None (unknown)."""
        key = view[name]
        if key == "any":
            return None
        if key[0] == "ref":
            return REF["snaps"][(name, key[1])] == ABSENT
        if key[0] == "same":
            return REF["snaps"][(key[1], key[2])] == ABSENT
        return key[0] == "absent"

    if served:
        try:
            conns = [connect(dm), connect(dm)]
        except OSError as e:
            problems.append("connecting: %s" % e)
            conns = None
        for i, (ci, op, sess, f) in enumerate(WORKLOAD if conns else []):
            fields = request_fields(op, sess, f, REF["export_b"])
            try:
                try:
                    ev, toks = call(conns[ci], op, **fields)
                except ConnError as e:
                    # Out of memory taking the connection or decoding the
                    # request: said on id 0, the connection closes, the
                    # request was not run. Go on with a new connection.
                    if "out of memory" not in e.message:
                        raise Unanswered("unexpected connection-level error %s" % e)
                    conns[ci].close()
                    conns[ci] = connect(dm)
                    ev, toks = {"event": "error", "code": "internal", "message": e.message}, b""
                except Closed as e:
                    # Out of memory queuing answers on the loop thread: the
                    # daemon closes the connection and logs why (checked
                    # below); the request may or may not have run.
                    closed_by_server.append("request %d (%s): %s" % (i, op, e))
                    if sess is not None:   # a turn cut by the close is saved as cancelled: unknown
                        view[sess] = "any"
                    conns[ci].close()
                    conns[ci] = connect(dm)
                    ev, toks = {"event": "error", "code": "internal", "message": str(e)}, b""
            except (Unanswered, OSError) as e:
                unanswered = "request %d (%s) got no final event: %s" % (i, op, e)
                break
            answered += 1
            ref_ev, ref_toks = REF["answers"][i]
            if sess is not None:
                kth[sess] += 1
            k = kth[sess] if sess else None
            src = fields.get("session") if op == "fork" else None
            if ev["event"] == "error":
                code, msg = ev.get("code"), ev.get("message", "")
                if not msg:
                    problems.append("request %d (%s): error %s without a message" % (i, op, code))
                # The session the request needs to exist (fork: its source).
                need = src if op == "fork" else fields.get("session") if op in ("export", "info", "delete") else None
                if code in ("io", "internal", "insufficient_storage"):   # a disk full: refused turns too
                    if sess is not None and view[sess] == "any":
                        poss[sess].add("any")
                    elif sess is not None:   # may or may not have reached the disk
                        base_ok = view[sess] == ("ref", k - 1) and (src is None or view[src] == ("ref", kth[src]))
                        poss[sess].add(("absent",) if op == "delete" else ("ref", k) if base_ok else "any")
                elif code == "not_found" and need and absent(need) is not False:
                    pass
                elif code == "exists" and op in ("fork", "import") and absent(sess) is not True:
                    pass
                else:
                    problems.append("request %d (%s): unexpected error %s: %s" % (i, op, code, msg))
                continue
            # Acknowledged.
            if op == "export" and view["b"] == ("ref", kth["b"]) and bytes(ev["data"]) != REF["export_b"]:
                problems.append("request %d: export of b differs from the reference's" % i)
            if op == "list":
                names = sorted(x["session"] for x in ev["sessions"])
                for s in NAMES:
                    gone = absent(s)
                    if gone is not None and gone == (s in names):
                        problems.append("request %d: list %s %s; the acknowledged history says %s"
                                        % (i, "has" if s in names else "lacks", s, "absent" if gone else "present"))
            if sess is None:
                continue
            if op == "import":
                new = ("ref", k)
            elif op == "fork":
                sv = view[src]
                new = ("ref", k) if sv == ("ref", kth[src]) else ("same", src, sv[1]) if sv[0] == "ref" else sv
            elif op == "delete":
                new = ("absent",)
            elif view[sess] == ("ref", k - 1):
                new = ("ref", k)
                if toks != ref_toks:
                    problems.append("request %d (%s %s): streamed %r, the reference %r" % (i, op, sess, toks, ref_toks))
            else:
                new = ("div", ev["session_tokens"], toks)
            view[sess] = new
            poss[sess] = {new}
        for c in conns or []:
            c.close()
    if unanswered and answered == 0:
        # Start-up failed after the socket was bound (the store thread could
        # not start, say): then the daemon exits by itself.
        try:
            dm.proc.wait(timeout=10 * SLOW)
            served = False
        except subprocess.TimeoutExpired:
            pass
    if unanswered and served:
        problems.append(unanswered)
    rc = stop(dm)
    text = dm.log(None)
    fired = "lind-fault: failing" in text
    rep = sanitizer_report(text)
    if rep:
        problems.append("sanitizer report (%s):\n%s" % (rep, text[-6000:]))
    elif not served:
        # A start-up failure: status 1 and a message saying what failed: a
        # log line (TIME error KIND msg=...) once the log is open, a plain
        # "lind serve:" line before.
        lines = [l for l in text.splitlines()
                 if l.startswith("lind serve:") or re.match(r"^\S+Z error [a-z_]+ msg=", l)]
        if rc != 1 or not lines:
            problems.append("start-up ended with status %s and no message: %s" % (rc, text[-1500:]))
        # and the database it may have begun must still serve (below)
    elif rc != 0:
        problems.append("the daemon exited with %s (expected 0 after SIGTERM): %s" % (rc, text[-3000:]))
    if closed_by_server and "out of memory queuing" not in text:
        problems.append("%s, and the daemon logged no reason" % closed_by_server[0])
    if answered == 0 and served and not problems:
        problems.append("no request was answered")
    # Restart unarmed on the same database: nothing acknowledged is lost.
    vd, vserved = daemon(d, {})
    if not vserved:
        problems.append("restart without faults failed: %s" % vd.log(2000))
        return fired, problems, d
    c = connect(vd)
    for s in NAMES:
        try:
            got = snapshot(c, s)
        except (AssertionError, Unanswered) as e:
            problems.append("after restart: %s" % e)
            continue
        ok = False
        for key in poss[s]:
            if key == "any":
                ok = True
            elif key[0] == "ref":
                ok = got == REF["snaps"][(s, key[1])]
            elif key[0] == "absent":
                ok = got == ABSENT
            elif key[0] == "same":
                r = REF["snaps"][(key[1], key[2])]
                ok = got == r if r == ABSENT else got != ABSENT and got[:2] == r[:2]
            else:
                _, tokens, out = key
                ok = got != ABSENT and got[0] == tokens and (
                    not out or any(r == "out" for r, _ in got[1]) and
                    [t for r, t in got[1] if r == "out"][-1].endswith(out))
            if ok:
                break
        if not ok:
            desc = "absent" if got == ABSENT else "%d tokens" % got[0]
            problems.append("after restart session %s is %s, not what its acknowledged history allows %s"
                            % (s, desc, sorted(map(str, poss[s]))))
    c.close()
    rc2 = stop(vd)
    t2 = vd.log(None)
    if rc2 != 0 or sanitizer_report(t2):
        problems.append("the restarted daemon exited with %s: %s" % (rc2, t2[-3000:]))
    return fired, problems, d


def sweep_plan(counts):
    """Which N are tried. Store writes: every xSync and xTruncate, and of
    each run of xWrite calls (one commit's pages, or a checkpoint's) the
    first, the second, the last and WRITES_PER_RUN more at random, failing
    with an I/O error; the first and last of each run again with disk full.
    Allocations: a seeded sample while serving, and one at start-up."""
    rnd = random.Random(SEED)
    kinds = counts["kinds"] if counts["kinds"] != "-" else ""
    plan, full = [], []
    i = 0
    while i < len(kinds):
        if kinds[i] != "w":
            plan.append(("write", i + 1))
            i += 1
            continue
        j = i
        while j + 1 < len(kinds) and kinds[j + 1] == "w":
            j += 1
        run = list(range(i + 1, j + 2))
        pick = set(run[:2] + run[-1:])
        rest = [n for n in run if n not in pick]
        pick |= set(rnd.sample(rest, min(WRITES_PER_RUN, len(rest))))
        plan += [("write", n) for n in sorted(pick)]
        full += sorted({run[0], run[-1]})
        i = j + 1
    plan += [("full", n) for n in full]
    serve, start = counts["allocs_serve"], counts["allocs_start"]
    plan += [("alloc", n) for n in sorted(rnd.sample(range(1, serve + 1), min(SERVE_ALLOC_RUNS, serve)))]
    plan += [("start", n) for n in sorted(rnd.sample(range(1, start + 1), min(START_ALLOC_RUNS, start)))]
    return plan


def compress(ns):
    out, i = [], 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        out.append(str(ns[i]) if i == j else "%d-%d" % (ns[i], ns[j]))
        i = j + 1
    return ",".join(out)


def main():
    global REF
    failures = 0
    t0 = time.time()
    try:
        REF = run_reference()
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        say("FAIL reference_run: %s (line %d)" % (repr(e)[:1500], tb.lineno))
        return 1
    c = REF["counts"]
    say("PASS reference_run")
    say("NOTE workload: %d allocations at start-up, %d while serving, %d store writes (%d xSync,"
        " %d xTruncate)" % (c["allocs_start"], c["allocs_serve"], c["writes"], c["kinds"].count("s"),
                            c["kinds"].count("t")))
    if ONLY:
        kind, n = ONLY.split(":")
        plan = [(kind, int(n))]
    else:
        plan = sweep_plan(c)
    by_kind = {}
    for kind, n in plan:
        by_kind.setdefault(kind, []).append(n)
    for kind in ("write", "full", "alloc", "start"):
        if kind in by_kind:
            say("NOTE %s N tried (seed %d): %s" % (kind, SEED, compress(by_kind[kind])))
    fired_total = {}
    for kind, ns in by_kind.items():
        bad, quiet = [], []
        for n in ns:
            fired, problems, d = check_run(kind, n)
            fired_total[kind] = fired_total.get(kind, 0) + fired
            if not fired:
                quiet.append(n)
            if problems:
                bad.append(n)
                say("FAIL %s_%d: %s (repeat: LIND_BUILD=build-asan LIND_FAULTS_ONLY=%s:%d"
                    " /usr/bin/python3 tests/test_daemon_faults.py; files in %s)"
                    % (kind, n, "; ".join(problems)[:4000], kind, n, d))
                failures += 1
            else:
                subprocess.call(["rm", "-rf", d])
        if quiet:
            say("NOTE %s: no fault fired at N = %s (the run made fewer such calls)" % (kind, compress(quiet)))
        if not bad:
            say("PASS %s_faults: %d runs, a fault fired in %d" % (kind, len(ns), fired_total.get(kind, 0)))
        if not ONLY and fired_total.get(kind, 0) == 0:
            say("FAIL %s_faults: no fault fired in %d runs" % (kind, len(ns)))
            failures += 1
    say("NOTE %d runs in %.0f s" % (len(plan), time.time() - t0))
    if not failures:
        subprocess.call(["rm", "-rf", TMP])
    return 1 if failures else 0


try:
    rc = main()
finally:
    shutil.rmtree(H.TMP, ignore_errors=True)   # the harness's own directory (the runs' are in TMP)
sys.exit(rc)
