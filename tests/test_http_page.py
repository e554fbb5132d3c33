"""tests/test_http_page.py — the chat page (`GET /`, docs/HTTP.md "The chat
page") and the read-only sessions endpoints it lists and reopens
conversations with (`GET /v1/sessions`, `GET /v1/sessions/{name}`).

The page is driven in a real browser: headless Chromium through
chromedriver's WebDriver REST API (JSON over plain urllib; no selenium).
Without chromium and chromedriver (`make deps` installs them) the browser
case prints SKIP with the reason. Every wait polls a DOM condition under a
deadline times SLOW; nothing passes or fails on a sleep."""
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Server, Skip, case, expect, finish, ROOT, SLOW, http_port  # noqa: E402

TOKEN = "page-test-token-0123456789"
PAGE = os.path.join(ROOT, "daemon", "chat_page.html")


def http(port, method, path, body=None, token=TOKEN, headers=None, timeout=60):
    """(status, headers, body bytes) of one request to the daemon."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout * SLOW) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


S = Server("http-page")
tokfile = os.path.join(S.dir, "token")
with open(tokfile, "w") as f:
    f.write(TOKEN + "\n")
S.extra = ["--http", "0", "--http-token-file", tokfile]
S.start()
PORT = http_port(S)


def info(name):
    c = Client(S.sock)
    try:
        return c.call("info", session=name)
    finally:
        c.close()


def names():
    c = Client(S.sock)
    try:
        return [s["session"] for s in c.call("list")["sessions"]]
    finally:
        c.close()


@case
def page_is_served_without_token_and_is_the_file():
    with open(PAGE, "rb") as f:
        want = f.read()
    st, hd, body = http(PORT, "GET", "/", token=None)
    expect(st == 200 and body == want, "GET / without a token: %d, %d bytes (the file has %d)" % (st, len(body),
                                                                                                 len(want)))
    expect(hd.get("Content-Type", "").startswith("text/html"), "content type %r" % hd.get("Content-Type"))
    csp = hd.get("Content-Security-Policy", "")
    expect("default-src 'none'" in csp and "connect-src 'self'" in csp, "CSP %r" % csp)
    # Nothing outside the page: no URL of another origin in it.
    expect(not re.search(rb"(src|href)\s*=\s*[\"']?(https?:)?//", body), "the page loads an external asset")
    st, _, body = http(PORT, "HEAD", "/", token=None)
    expect(st == 200 and body == b"", "HEAD /: %d %r" % (st, body[:80]))
    st, hd, _ = http(PORT, "POST", "/", body={}, token=None)
    expect(st == 405, "POST /: %d" % st)
    # The API it calls still wants the token.
    st, _, _ = http(PORT, "GET", "/v1/sessions", token=None)
    expect(st == 401, "GET /v1/sessions without the token: %d" % st)


@case
def sessions_list_and_transcript_over_http():
    name = "page test/é 1"   # a name a URL must %-encode
    st, _, body = http(PORT, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                                               "max_tokens": 8, "seed": 3},
                       headers={"X-Lind-Session": name.encode().decode("latin-1")})
    expect(st == 200, "chat on a named session: %d %r" % (st, body[:300]))
    reply = json.loads(body)["choices"][0]["message"]["content"]
    st, _, body = http(PORT, "GET", "/v1/sessions")
    expect(st == 200, "GET /v1/sessions: %d %r" % (st, body[:200]))
    lst = json.loads(body)
    expect(lst["object"] == "list", "list object %r" % lst.get("object"))
    mine = [s for s in lst["data"] if s["session"] == name]
    expect(len(mine) == 1 and mine[0]["origin"] == "http" and mine[0]["tokens"] > 0, "listed: %r" % mine)
    expect(sorted(s["session"] for s in lst["data"]) == sorted(names()), "the list is the socket's")
    enc = urllib.request.quote(name, safe="")
    st, _, body = http(PORT, "GET", "/v1/sessions/" + enc)
    expect(st == 200, "GET /v1/sessions/{name}: %d %r" % (st, body[:200]))
    j = json.loads(body)
    sock = info(name)
    expect(j["object"] == "session" and j["session"] == name and j["tokens"] == sock["tokens"],
           "session %r against the socket's %r" % (j, sock["tokens"]))
    tr = [(t["role"], t["text"]) for t in j["transcript"]]
    expect(tr == [(t["role"], t["text"].decode("utf-8", "replace")) for t in sock["transcript"]],
           "transcript %r against the socket's %r" % (tr, sock["transcript"]))
    expect(tr[0][0] == "in" and "Hello" in tr[0][1] and tr[-1] == ("out", reply), "transcript %r, reply %r" % (tr, reply))
    for path, code in (("/v1/sessions/no-such-session", 404), ("/v1/sessions/a%00b", 404),
                       ("/v1/sessions/" + "x" * 129, 404)):
        st, _, body = http(PORT, "GET", path)
        expect(st == code, "GET %s: %d %r" % (path[:40], st, body[:200]))
    st, _, _ = http(PORT, "DELETE", "/v1/sessions/" + enc)
    expect(st == 405, "DELETE is not served here: %d" % st)
    expect(name in names(), "the session is still there")


# ---- the browser -------------------------------------------------------------------------------

def chromium_binary():
    for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or ""):
        if p and os.access(p, os.X_OK):
            return p
    return None


ELEMENT = "element-6066-11e4-a52e-4f735466cecf"   # WebDriver's key of an element reference


class Browser:
    """Headless Chromium under chromedriver, spoken to over WebDriver's REST API."""

    def __init__(self, workdir):
        self.dir = workdir
        self.profile = os.path.join(workdir, "profile")
        os.makedirs(self.profile, exist_ok=True)
        self.log = open(os.path.join(workdir, "chromedriver.log"), "ab")
        port = free_port()
        # Chromium's helpers outlive their parents; as a subreaper this
        # process inherits them and reaps them in close() (pid 1 of a
        # container may never do it).
        try:
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            pass
        self.driver = subprocess.Popen([shutil.which("chromedriver"), "--port=%d" % port], stdout=self.log,
                                       stderr=self.log)
        self.base = "http://127.0.0.1:%d" % port
        self.sid = None
        try:
            self.begin()
        except BaseException:
            self.close()   # no browser or driver left behind
            raise

    def begin(self):
        deadline = time.time() + 60 * SLOW
        while True:
            try:
                if self.call("GET", "/status", timeout=5)["value"].get("ready"):
                    break
            except (OSError, RuntimeError):
                pass
            if time.time() > deadline or self.driver.poll() is not None:
                raise RuntimeError("chromedriver did not come up")
            time.sleep(0.1)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--user-data-dir=" + self.profile, "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-breakpad", "--disable-crash-reporter",
                "--window-size=1200,900"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium_binary(), "args": args}}}}
        self.sid = self.call("POST", "/session", caps, timeout=120)["value"]["sessionId"]

    def call(self, method, path, body=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout * SLOW) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError("WebDriver %s %s: %d %s" % (method, path, e.code, e.read()[:400]))

    def s(self, method, path, body=None, timeout=60):
        return self.call(method, "/session/%s%s" % (self.sid, path), body, timeout)["value"]

    def go(self, url):
        self.s("POST", "/url", {"url": url}, timeout=120)

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        return self.s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css, text, clear=False):
        e = self.find(css)
        if clear:
            self.s("POST", "/element/%s/clear" % e, {})
        self.s("POST", "/element/%s/value" % e, {"text": text})

    def click(self, css):
        self.s("POST", "/element/%s/click" % self.find(css), {})

    def wait(self, script, what, timeout=120, *args):
        """The first truthy value of script, polled until timeout (times SLOW)."""
        deadline = time.time() + timeout * SLOW
        last = None
        while time.time() < deadline:
            last = self.js(script, *args)
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError("%s (after %.0f s; the page's status: %r)" % (
            what, timeout * SLOW, self.js("return document.getElementById('status').textContent")))

    def close(self):
        try:
            if self.sid:
                self.call("DELETE", "/session/" + self.sid, timeout=30)
        except Exception:
            pass
        if self.driver.poll() is None:
            self.driver.terminate()
            try:
                self.driver.wait(timeout=10 * SLOW)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait()
        # Any browser process left of this profile (each by its pid), then
        # the helpers this process inherited (not the daemon: its Popen waits).
        for pid in self.pids(lambda cmd, ppid: ("--user-data-dir=" + self.profile).encode() in cmd):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        keep = {p.pid for p in (S.proc, self.driver) if p}
        deadline = time.time() + 10 * SLOW
        while time.time() < deadline:
            left = [p for p in self.pids(lambda cmd, ppid: ppid == os.getpid()) if p not in keep]
            for pid in left:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            if not left:
                break
            time.sleep(0.05)
        self.log.close()

    @staticmethod
    def pids(match):
        """The processes for which match(cmdline bytes, parent pid) holds."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
                with open("/proc/%s/stat" % pid, "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if match(cmd, ppid):
                out.append(int(pid))
        return out


# The page's API calls, as it made them (its fetch wrapped).
WATCH_FETCH = """
window.lindCalls = [];
const f = window.fetch;
window.fetch = async (u, o) => {
  const r = await f(u, o);
  window.lindCalls.push({url: String(u), body: o && o.body, session: o && o.headers && o.headers['X-Lind-Session'],
                         type: r.headers.get('content-type') || ''});
  return r;
};
"""

LAST_ANSWER = """
const a = document.querySelectorAll('#messages .msg.assistant');
const m = a[a.length - 1];
return m && a.length == arguments[0] && m.dataset.state != 'streaming' ?
       [m.dataset.state, m.querySelector('.text').textContent, (m.querySelector('.meta') || {}).textContent || ''] : null;
"""


@case
def chat_in_the_browser_survives_a_restart_and_forks():
    global PORT
    if not chromium_binary() or not shutil.which("chromedriver"):
        raise Skip("needs chromium and chromedriver (Debian packages chromium, chromium-driver: make deps)")
    b = Browser(S.dir)
    try:
        url = "http://127.0.0.1:%d/" % PORT
        b.go(url)
        b.wait("return document.readyState == 'complete' && document.getElementById('send') != null", "page loaded")
        b.type("#token", TOKEN)
        b.click("#refresh")
        b.type("#max_tokens", "24", clear=True)
        b.type("#seed", "7")
        b.click("#new")
        name = b.js("return document.getElementById('current').textContent")
        expect(name.startswith("web-"), "a new conversation is a named session: %r" % name)
        b.js(WATCH_FETCH)
        b.type("#input", "In the beginning")
        b.click("#send")
        st, first, _ = b.wait(LAST_ANSWER, "the streamed reply", 120, 1)
        expect(st == "done" and first, "first reply %r %r" % (st, first))
        calls = [c for c in b.js("return window.lindCalls") if c["url"] == "/v1/chat/completions"]
        expect(len(calls) == 1 and json.loads(calls[0]["body"]).get("stream") is True and
               calls[0]["type"].startswith("text/event-stream") and calls[0]["session"] == name,
               "the reply came as server-sent events on the named session: %r" % calls)
        i1 = info(name)
        out1 = [t["text"].decode("utf-8", "replace") for t in i1["transcript"] if t["role"] == "out"]
        expect(out1 == [first], "the page shows what the session holds: %r against %r" % (first, out1))
        # The conversation is in the list.
        b.wait("return document.querySelector('#sessions li[data-session=\"' + arguments[0] + '\"]')",
               "the new conversation listed", 60, name)

        # The daemon restarts on the same store (and port: the page's origin,
        # and so its stored token and answer ids, stay the same).
        S.stop()
        S.extra = ["--http", str(PORT), "--http-token-file", tokfile]
        S.start()
        expect(http_port(S, starts=2) == PORT, "restarted on port %d" % PORT)
        b.go(url)
        b.wait("return document.querySelector('#sessions li[data-session=\"' + arguments[0] + '\"]')",
               "the conversation listed after the restart", 60, name)
        b.click('#sessions li[data-session="%s"]' % name)
        got = b.wait(LAST_ANSWER, "the conversation reopened", 60, 1)
        expect(got[1] == first, "reopened answer %r, was %r" % (got[1], first))
        expect("resp-" in got[2], "the reopened answer can be forked (its id remembered): %r" % got[2])
        user = b.js("return document.querySelector('#messages .msg.user .text').textContent")
        expect(user == "In the beginning", "reopened message %r" % user)

        b.type("#input", "And the earth")
        b.click("#send")
        st, second, _ = b.wait(LAST_ANSWER, "the continued reply", 120, 2)
        expect(st == "done" and second, "second reply %r %r" % (st, second))
        i2 = info(name)
        ins = b"".join(t["text"] for t in i2["transcript"] if t["role"] == "in")
        expect(i2["tokens"] > i1["tokens"] and b"And the earth" in ins,
               "continued on the same session: %d -> %d tokens, fed %r" % (i1["tokens"], i2["tokens"], ins))
        expect(ins.count(b"In the beginning") == 1, "nothing re-fed: %r" % ins)
        webs = [n for n in names() if n.startswith("web-")]
        expect(webs == [name], "one conversation, not a new one: %r" % webs)

        # Fork from the first answer: the branch goes on from that state;
        # the conversation stays as it is.
        resp1 = re.search(r"resp-[0-9a-f]{16}", got[2]).group(0)
        b.click('#messages .msg.assistant[data-index="1"] .fork')
        b.type("#input", "Fork message")
        b.click("#send")
        st, third, meta = b.wait(LAST_ANSWER, "the fork's reply", 120, 2)
        expect(st == "done", "fork reply %r %r" % (st, meta))
        resp3 = re.search(r"resp-[0-9a-f]{16}", meta).group(0)
        i3 = info(resp3)
        expect("transcript" in i3, "info of the fork %s: %r (meta %r)" % (resp3, i3, meta))
        ins3 = b"".join(t["text"] for t in i3["transcript"] if t["role"] == "in")
        expect(b"Fork message" in ins3 and b"And the earth" not in ins3, "the fork's transcript %r" % ins3)
        expect(i3["tokens"] > info(resp1)["tokens"] and info(name)["tokens"] == i2["tokens"],
               "the fork grew from %s (%d tokens) to %d; the conversation stays at %d (now %d)" % (
                   resp1, info(resp1)["tokens"], i3["tokens"], i2["tokens"], info(name)["tokens"]))
        expect(third == [t["text"].decode("utf-8", "replace") for t in i3["transcript"] if t["role"] == "out"][-1],
               "the fork's reply is the session's")
    finally:
        b.close()


S.stop()
finish()
