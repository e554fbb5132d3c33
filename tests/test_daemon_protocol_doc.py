"""tests/test_daemon_protocol_doc.py — the example session in docs/PROTOCOL.md
("Examples you can replay") is what the shipped model and this daemon do.

Takes the example client (the first ```python block of that section) and the
recorded run (the ``` block after it) out of the document, serves
models/default on a fresh database, runs the client exactly as written, and
compares its output with the recording entry by entry: every request and its
bytes, and every event with all its fields, except values that differ from
run to run (timings: `ms`, `created_ms`, `updated_ms`, `uptime_s`, `step_ms`,
`save_ms`; the model's `path`). A recorded "<- ..." stands for a run of
token events; `{...}` for any map.

The example's cancel races its generate's first step. A run where the
generate got to sample before the cancel arrived is repeated (at most 3
runs); if the race is lost every time (a loaded machine), the last run is
compared with the counts that follow from the cancelled generate's tokens
left open: its token events are skipped, its `done` must count exactly the
tokens sent, and the later `stats` counters (`tokens_in`, `tokens_out`,
`steps`, `batch_hist`) are not compared. `--print` prints the actual run in the document's form, to update the
recording when the model or the protocol changes.
"""
import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("LIND_BUILD", "build")
LIND = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
LIND = os.path.join(LIND, "lind")
DOC = os.path.join(ROOT, "docs", "PROTOCOL.md")
# Time bounds: seconds times SLOW, as in tests/daemon_harness.py (LIND_TEST_TIME_SCALE).
SLOW = max(1.0, float(os.environ.get("LIND_TEST_TIME_SCALE") or 1)) * \
    (5 if os.environ.get("LIND_SANITIZED") == "1" else 1)
VOLATILE = {"ms", "created_ms", "updated_ms", "uptime_s", "step_ms", "save_ms", "path"}
ANY = "\0any-map"


def doc_blocks():
    text = open(DOC).read()
    sec = text.find("## Examples you can replay")
    if sec < 0:
        raise ValueError("docs/PROTOCOL.md has no 'Examples you can replay' section")
    rest = text[sec:]
    m = re.search(r"```python\n(.*?)```", rest, re.S)
    if not m:
        raise ValueError("no ```python block in the examples section")
    code = m.group(1)
    m2 = re.search(r"```\n(.*?)```", rest[m.end():], re.S)
    if not m2:
        raise ValueError("no recorded run (a ``` block) after the example client")
    return code, m2.group(1)


def entries(text):
    """[(dir, body)] from '-> ...' / '<- ...' lines and their indented continuations."""
    out = []
    for line in text.splitlines():
        if line.startswith("-> ") or line.startswith("<- "):
            out.append([line[:2], line[3:]])
        elif line.startswith(" ") and out:
            out[-1][1] += " " + line.strip()
        elif line.strip():
            raise ValueError("unexpected line in the recorded run: %r" % line)
    return [(d, b.strip()) for d, b in out]


def parse_request(body):
    req, _, hexpart = body.partition("bytes:")
    return ast.literal_eval(req.strip()), "".join(hexpart.split())


def parse_event(body):
    if body == "...":
        return "..."
    return ast.literal_eval(body.replace("{...}", repr(ANY)))


def same(doc, act, key=None):
    if key in VOLATILE or doc == ANY:
        return True
    if isinstance(doc, dict):
        return (isinstance(act, dict) and set(doc) == set(act)
                and all(same(doc[k], act[k], k) for k in doc))
    if isinstance(doc, list):
        return isinstance(act, list) and len(doc) == len(act) and all(
            same(a, b) for a, b in zip(doc, act))
    return doc == act and type(doc) == type(act)


RACED_STATS = {"tokens_in", "tokens_out", "steps", "batch_hist"}


def compare(recorded, actual, raced=None):
    """None if the actual run matches the recording, else what differs.
    raced: the id of a cancelled generate that sampled before its cancel."""
    d = entries(recorded)
    a = entries(actual)
    if raced is not None:
        sent = sum(1 for dd, b in a if dd == "<-" and parse_event(b).get("id") == raced
                   and parse_event(b).get("event") == "token")
        a = [(dd, b) for dd, b in a if not (dd == "<-" and parse_event(b).get("id") == raced
                                              and parse_event(b).get("event") == "token")]
    i = j = 0
    while i < len(d):
        dd, body = d[i]
        if j >= len(a):
            return "the run ended before the recording's %s %s" % (dd, body[:200])
        ad, abody = a[j]
        if dd != ad:
            return "recorded %s %s, got %s %s" % (dd, body[:200], ad, abody[:200])
        if dd == "->":
            (rq, rb), (aq, ab) = parse_request(body), parse_request(abody)
            if rq != aq or (rb and rb != ab):
                return "request differs: recorded %r %s, sent %r %s" % (rq, rb, aq, ab)
            i += 1
            j += 1
            continue
        ev = parse_event(body)
        if ev == "...":
            # A run of token events (possibly none) of the request before.
            while j < len(a) and a[j][0] == "<-" and parse_event(a[j][1]).get("event") == "token":
                j += 1
            i += 1
            continue
        act = parse_event(abody)
        if raced is not None and isinstance(ev, dict) and ev.get("id") == raced and \
                ev.get("event") == "done" and isinstance(act, dict):
            if act.get("tokens_out") != sent or \
                    act.get("session_tokens") != ev.get("session_tokens", 0) + sent:
                return "the raced cancel's done does not count its %d tokens: %r" % (sent, act)
            ev = dict(ev, tokens_out=sent, session_tokens=act.get("session_tokens"))
        if raced is not None and isinstance(ev, dict) and "batch_hist" in ev and isinstance(act, dict):
            ev = dict(ev, **{k: act.get(k) for k in RACED_STATS if k in ev})
        if not same(ev, act):
            return "event differs:\n  recorded %r\n  actual   %r" % (ev, act)
        i += 1
        j += 1
    if j < len(a):
        return "the run goes on past the recording: %s %s" % (a[j][0], a[j][1][:200])
    return None


def run_once(code, tmp):
    sock = os.path.join(tmp, "lind.sock")
    db = os.path.join(tmp, "lind.db")
    for p in (db, db + "-wal", db + "-shm"):
        if os.path.exists(p):
            os.unlink(p)
    log = open(os.path.join(tmp, "server.log"), "wb")
    srv = subprocess.Popen([LIND, "serve", "--model", os.path.join(ROOT, "models", "default"),
                            "--socket", sock, "--db", db, "--backend", "cpu"],
                           stdout=log, stderr=log)
    try:
        deadline = time.time() + 60 * SLOW
        while True:
            if srv.poll() is not None:
                raise RuntimeError("lind serve exited with %d" % srv.returncode)
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(sock)
                s.close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("lind serve did not start")
                time.sleep(0.05)
        r = subprocess.run(["/usr/bin/python3", "-c", code, sock], capture_output=True,
                           text=True, timeout=120 * SLOW)
        if r.returncode != 0:
            raise RuntimeError("the example client failed: %s" % r.stderr[-2000:])
        return r.stdout
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60 * SLOW)
        log.close()


def cancel_raced(actual):
    """The id of the cancelled generate if it sampled tokens, else None."""
    es = entries(actual)
    for d, body in es:
        if d == "->" and parse_request(body)[0].get("op") == "cancel":
            target = parse_request(body)[0].get("target")
            for d2, b2 in es:
                if d2 == "<-":
                    ev = parse_event(b2)
                    if ev.get("id") == target and ev.get("event") == "token":
                        return target
    return None


def wrap(line, width=100):
    """One entry over lines of at most `width`, broken between fields (where
    entries() joins them back with one space); request bytes on their own."""
    line, _, hexpart = line.partition("  bytes: ")
    line = re.sub(r"(\d+\.\d\d)\d+", r"\1", line)     # timings: two decimals do
    parts = line.split(", '")
    out, cur = [], parts[0]
    for p in parts[1:]:
        if len(cur) + 3 + len(p) > width:
            out.append(cur + ",")
            cur = "    '" + p
        else:
            cur += ", '" + p
    out.append(cur)
    if hexpart:
        hexes = hexpart.split()
        cur = "   bytes:"
        for h in hexes:
            if len(cur) + 3 > width - 6:
                out.append(cur)
                cur = "         "
            cur += " " + h
        out.append(cur)
    return out


def elide_tokens(actual):
    """The document's form: each run of token events as its first one and
    '<- ...', long entries wrapped."""
    out, run = [], 0
    for line in actual.splitlines():
        tok = line.startswith("<- ") and "'event': 'token'" in line
        run = run + 1 if tok else 0
        if run == 2:
            out.append("<- ...")
        elif run < 2:
            out += wrap(line)
    return "\n".join(out) + "\n"


def main():
    if not os.access(LIND, os.X_OK):
        print("FAIL setup: %s is not built" % LIND)
        return 1
    try:
        code, recorded = doc_blocks()
        entries(recorded)
    except (ValueError, SyntaxError) as e:
        print("FAIL protocol_doc_parsed: %s" % e)
        return 1
    print("PASS protocol_doc_parsed")
    tmp = tempfile.mkdtemp(prefix="lind-protodoc-")
    try:
        for attempt in range(3):
            actual = run_once(code, tmp)
            raced = cancel_raced(actual)
            if raced is None:
                break
            print("NOTE run %d: the cancel arrived after the generate's first step; again" % (attempt + 1))
        if "--print" in sys.argv:
            sys.stdout.write(elide_tokens(actual))
            return 0
        why = compare(recorded, actual, raced)
        if why:
            print("FAIL protocol_doc_example_replays: docs/PROTOCOL.md's recorded run is not what"
                  " the shipped model does now (%s to print the actual run): %s"
                  % ("python3 tests/test_daemon_protocol_doc.py --print", why))
            return 1
        print("PASS protocol_doc_example_replays")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


sys.exit(main())
