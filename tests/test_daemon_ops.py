"""tests/test_daemon_ops.py — running `lind serve` as an operator does
(issue 27, "A daemon that installs"):

  - SIGHUP reopens --log-file and the daemon goes on serving: after the file
    is renamed (as logrotate does) and SIGHUP sent, the next turns are
    logged in a new file at the path, none in the renamed one, and both old
    and new sessions and connections are served; with the log on stderr SIGHUP says so and serving goes
    on (it used to stop the daemon);
  - --config FILE: its keys (long options without '--') apply, '#' lines
    and blank lines are skipped, a flag takes true/false, a command-line
    option wins over the file; an unknown key, a bad value, a line without
    '=' and a missing file are refused at start (exit 2) naming the file,
    the line and the key;
  - every line the daemon writes — start, turns at level debug (a session
    name that needs quoting among them), HTTP answers, SIGHUP, the stop —
    to --log-file and to
    stderr has the one form TIME LEVEL KIND key=value... (logfmt), and so
    do a warning (an ignored lind_chat.json) and an error at start-up
    after the log is open;
  - systemd readiness: with NOTIFY_SOCKET (a path, or '@' for the abstract
    namespace) the daemon sends READY=1 with its MAINPID only once its
    socket accepts connections, and STOPPING=1 when SIGTERM arrives.

Runs the daemon from $LIND_BUILD (default build) on the shipped model.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Server, case, expect, finish, TMP, LIND, MODEL  # noqa: E402

# TIME LEVEL KIND key=value ... (daemon/reqlog.h)
VALUE = r'(?:"(?:[^"\\\x00-\x1f]|\\.)*"|[^\s"=\\]+)'
LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warn|info|debug) [a-z_]+'
                  r'(?: [a-z_]+=' + VALUE + r')+$')


def wait_for(cond, what, timeout=60):
    """Wait for an event (a file appearing, a line being written)."""
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError("waited %d s for %s" % (timeout, what))
        time.sleep(0.02)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def generate(c, session, text=b"And God said", n=5, **f):
    toks = []
    ev = c.final(c.send("generate", session=session, text=text, max_tokens=n, temperature=0.0, **f), toks)
    expect(ev["event"] == "done", "generate %s: %r" % (session, ev))
    return b"".join(toks)


def turn_lines(text, session):
    return [l for l in text.splitlines() if " info turn session=%s " % session in l]


def bad_lines(text):
    return [l for l in text.splitlines() if not LINE.match(l)]


@case
def sighup_reopens_the_log_and_serving_goes_on():
    log = os.path.join(TMP, "hup.log")
    s = Server("hup", extra=["--log-file", log]).start()
    try:
        c = Client(s.sock)
        first = generate(c, "a")
        expect(len(turn_lines(read(log), "a")) == 1, "turn a not logged: %r" % read(log))
        os.rename(log, log + ".1")
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP: reopened the log file" in read(log), "the reopened log's first line")
        expect(s.proc.poll() is None, "SIGHUP stopped the daemon")
        generate(c, "b")
        more = generate(c, "a")   # the session goes on from its state
        new, old = read(log), read(log + ".1")
        expect(len(turn_lines(new, "b")) == 1 and len(turn_lines(new, "a")) == 1,
               "turns after SIGHUP not in the new file: %r" % new)
        expect(not turn_lines(old, "b") and len(turn_lines(old, "a")) == 1,
               "turns after SIGHUP went to the renamed file: %r" % old)
        c2 = Client(s.sock)   # still accepting connections
        again = generate(c2, "a2")
        expect(again == first, "a fresh session after SIGHUP differs: %r vs %r" % (again, first))
        expect(len(more) > 0, "session a produced nothing after SIGHUP")
        c.close()
        c2.close()
    finally:
        s.stop()
    expect("stopped; every session saved" in read(log), "the stop is not in the reopened log")


@case
def sighup_with_the_log_on_stderr():
    s = Server("hup-stderr").start()
    try:
        c = Client(s.sock)
        generate(c, "x")
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP: the log is stderr" in s.log(), "the SIGHUP line")
        generate(c, "y")
        expect(s.proc.poll() is None, "SIGHUP stopped the daemon")
        c.close()
    finally:
        s.stop()


def conf(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


@case
def config_file_applies_and_flags_win():
    path = conf("good.conf", "# lind serve options\n\nmax-tokens = 7\n  log-level=debug  \n"
                "prompt-chunk = \"16\"\nignore-eos = true\nno-bos = false\n")
    s = Server("conf", extra=["--config", path]).start()
    try:
        c = Client(s.sock)
        ev = c.call("generate", session="m", text=b"x", max_tokens=8)
        expect(ev["event"] == "error" and ev["code"] == "limit" and "limit of 7" in ev["message"],
               "max-tokens = 7 not applied: %r" % ev)
        generate(c, "m", n=7)
        wait_for(lambda: turn_lines(s.log(), "m"), "the turn line")
        expect(" queue_ms=" in turn_lines(s.log(), "m")[0], "log-level=debug not applied: %r" % s.log())
        c.close()
    finally:
        s.stop()
    # the same file with --max-tokens on the command line: the flag wins
    s = Server("conf-flag", extra=["--config", path, "--max-tokens", "9"]).start()
    try:
        c = Client(s.sock)
        generate(c, "m", n=9)
        ev = c.call("generate", session="m", text=b"x", max_tokens=10)
        expect(ev["event"] == "error" and "limit of 9" in ev["message"], "the flag did not win: %r" % ev)
        c.close()
    finally:
        s.stop()


@case
def config_file_errors_name_file_line_and_key():
    cases = [
        ("unknown.conf", "max-tokens = 7\nfrobnicate = 3\n", ["unknown.conf line 2", "'frobnicate'"]),
        ("value.conf", "# c\nmax-batch = lots\n", ["value.conf line 2", "--max-batch", "lots"]),
        ("noeq.conf", "model models/default\n", ["noeq.conf line 1", "key = value"]),
        ("flag.conf", "ignore-eos = maybe\n", ["flag.conf line 1", "ignore-eos", "true or false"]),
        ("dash.conf", "--model = x\n", ["dash.conf line 1", "without its dashes"]),
        ("nested.conf", "config = other.conf\n", ["nested.conf line 1", "'config'"]),
    ]
    for name, text, want in cases:
        path = conf(name, text)
        r = subprocess.run([LIND, "serve", "--config", path, "--socket", os.path.join(TMP, "never.sock"),
                            "--db", os.path.join(TMP, "never.db")], capture_output=True, timeout=60)
        err = r.stderr.decode(errors="replace")
        expect(r.returncode == 2 and all(w in err for w in want), "%s: exit %d: %r" % (name, r.returncode, err))
    good = conf("ok.conf", "max-tokens = 7\n")
    r = subprocess.run([LIND, "serve", "--config", good, "--config", good], capture_output=True, timeout=60)
    expect(r.returncode == 2 and b"--config given twice" in r.stderr, "two --config: %d %r" % (r.returncode, r.stderr))
    missing = os.path.join(TMP, "missing.conf")
    r = subprocess.run([LIND, "serve", "--config", missing], capture_output=True, timeout=60)
    expect(r.returncode == 2 and missing.encode() in r.stderr and b"No such file" in r.stderr,
           "missing config: %d %r" % (r.returncode, r.stderr))


@case
def every_log_line_has_one_form():
    log = os.path.join(TMP, "form.log")
    mdir = os.path.join(TMP, "model-bad-chat")   # the shipped model with a lind_chat.json it ignores (a warning)
    os.makedirs(mdir, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        if not os.path.exists(os.path.join(mdir, f)):
            os.symlink(os.path.join(MODEL, f), os.path.join(mdir, f))
    with open(os.path.join(mdir, "lind_chat.json"), "w") as f:
        f.write('{"user": "no prompt \"here\""}')
    s = Server("form", model=mdir, extra=["--log-file", log, "--log-level", "debug", "--http", "0"]).start()
    try:
        wait_for(lambda: re.search(r"HTTP on [0-9.]+:(\d+)", read(log)), "the HTTP line")
        port = int(re.search(r"HTTP on [0-9.]+:(\d+)", read(log)).group(1))
        c = Client(s.sock)
        generate(c, "plain")
        generate(c, "with \"quotes\" and = signs")
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, method="POST",
                                     data=b'{"prompt": "And God", "max_tokens": 3, "user": "a b\\u0001"}',
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            expect(r.status == 200, "HTTP status %d" % r.status)
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP" in read(log), "the SIGHUP line")
        c.close()
    finally:
        s.stop()
    text = read(log)
    kinds = set(l.split(" ")[2] for l in text.splitlines() if l)
    expect({"start", "model", "turn", "http", "signal", "stop"} <= kinds, "kinds seen: %r\n%s" % (kinds, text))
    expect(" warn model msg=\"ignoring " in text, "the ignored template's warning: %s" % text)
    expect(not bad_lines(text), "lines not in the log's form: %r" % bad_lines(text))
    expect(len(turn_lines(text, '"with \\"quotes\\" and = signs"')) == 1, "a quoted session name: %s" % text)
    # stderr: the same form, and so is a failure at start after the log is open
    s = Server("form-stderr").start()
    Client(s.sock).close()
    s.stop()
    expect(not bad_lines(s.log()) and " info start " in s.log(), "stderr lines: %r" % s.log())
    busy = Server("form-stderr-fail", db=s.db, extra=["--socket", os.path.join(TMP, "other.sock")])
    s2 = Server("form-holder", db=s.db).start()
    try:
        rc = busy.start(expect_fail=True)
    finally:
        s2.stop()
    expect(rc == 1 and " error start msg=\"cannot open the store:" in busy.log() and not bad_lines(busy.log()),
           "a start-up failure: exit %r: %r" % (rc, busy.log()))


def notify_socket(addr):
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(addr)
    ns.settimeout(60)
    return ns


@case
def systemd_notify_ready_and_stopping():
    for kind in ("path", "abstract"):
        if kind == "path":
            addr = os.path.join(TMP, "notify.sock")
            env_value, bind_addr = addr, addr
        else:
            name = "lind-test-notify-%d" % os.getpid()
            env_value, bind_addr = "@" + name, "\0" + name
        ns = notify_socket(bind_addr)
        s = Server("notify-" + kind, env={"NOTIFY_SOCKET": env_value})
        env = dict(os.environ, NOTIFY_SOCKET=env_value)
        s.proc = subprocess.Popen(s.args(), stdout=open(s.logpath, "ab"), stderr=subprocess.STDOUT, env=env)
        try:
            msg = ns.recv(4096).decode()
            fields = dict(l.split("=", 1) for l in msg.split("\n") if "=" in l)
            expect(fields.get("READY") == "1" and fields.get("MAINPID") == str(s.proc.pid),
                   "%s: the first message: %r" % (kind, msg))
            c = Client(s.sock)   # ready means serving: the socket accepts at once
            generate(c, "n")
            c.close()
            s.proc.send_signal(signal.SIGTERM)
            msg = ns.recv(4096).decode()
            expect("STOPPING=1" in msg.split("\n"), "%s: after SIGTERM: %r" % (kind, msg))
            expect(s.proc.wait(timeout=60) == 0, "%s: exit status" % kind)
            s.proc = None
        finally:
            if s.proc:
                s.proc.kill()
                s.proc.wait()
            ns.close()


finish()
