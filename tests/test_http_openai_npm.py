"""tests/test_http_openai_npm.py — conformance of the HTTP front door with a
real client: the `openai` package from the npm registry (the official
JavaScript/TypeScript client), driven by node against `lind serve --http`.

The package is installed at run time into
${XDG_CACHE_HOME:-~/.cache}/lind-npm-openai (reused when present), as
tests/test_tokenizer_npm.py does for its packages. Checked: completions and
chat, each non-streaming and streaming (the client's own SSE parser), with a
bearer token; the streamed text equals the non-streamed one and the text the
msgpack socket gives for the same turn; usage and finish_reason as the client
types them; models.list; a refused request surfaces as the client's
BadRequestError with lind's error code; a bad token as AuthenticationError.

Prints SKIP with the reason when node/npm is missing or the registry cannot be
reached. Environment: LIND_BUILD (build directory, default build)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Server, case, expect, finish, Skip, TMP, SLOW  # noqa: E402

CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                     "lind-npm-openai")
PACKAGE = "openai@4.104.0"

DRIVER_JS = r"""
// node driver.mjs OPENAI_INDEX_MJS BASE_URL KEY: every call below, as one JSON line.
const [mod, base, key] = process.argv.slice(2);
const { default: OpenAI } = await import(mod);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
const out = {};
const cp = { model: "default", prompt: "Once upon a time", max_tokens: 24, seed: 3 };
const c = await client.completions.create(cp);
out.completion = { id: c.id, text: c.choices[0].text, finish: c.choices[0].finish_reason, usage: c.usage };
let text = "", finish = null, n = 0;
for await (const ch of await client.completions.create({ ...cp, stream: true })) {
  n++;
  text += ch.choices[0]?.text ?? "";
  if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
}
out.completion_stream = { text, finish, chunks: n };
const msgs = [{ role: "system", content: "Answer." }, { role: "user", content: "Who built the ark" }];
const chat = await client.chat.completions.create({ model: "default", messages: msgs, max_tokens: 20, seed: 8 });
out.chat = { text: chat.choices[0].message.content, role: chat.choices[0].message.role,
             finish: chat.choices[0].finish_reason, usage: chat.usage, object: chat.object };
text = ""; finish = null; let usage = null, role = null;
const stream = await client.chat.completions.create({ model: "default", messages: msgs, max_tokens: 20, seed: 8,
                                                      stream: true, stream_options: { include_usage: true } });
for await (const ch of stream) {
  if (ch.usage) usage = ch.usage;
  const d = ch.choices[0]?.delta;
  if (d?.role) role = d.role;
  text += d?.content ?? "";
  if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
}
out.chat_stream = { text, finish, usage, role };
const models = await client.models.list();
out.models = models.data.map((m) => m.id);
try {
  await client.completions.create({ model: "default", prompt: "a", max_tokens: -1 });
  out.bad = null;
} catch (e) {
  out.bad = { cls: e.constructor.name, status: e.status, code: e.code, type: e.type, param: e.param };
}
try {
  await new OpenAI({ baseURL: base + "/v1", apiKey: "not-the-token", maxRetries: 0 }).models.list();
  out.unauth = null;
} catch (e) {
  out.unauth = { cls: e.constructor.name, status: e.status };
}
console.log(JSON.stringify(out));
"""


def install():
    """None, or why the package is not there."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node/npm not installed (make deps installs nodejs)"
    want = os.path.join(CACHE, "node_modules", "openai", "index.mjs")
    if os.path.exists(want):
        return None
    os.makedirs(CACHE, exist_ok=True)
    try:
        r = subprocess.run(["npm", "install", "--prefix", CACHE, "--no-audit", "--no-fund", PACKAGE],
                           capture_output=True, text=True, timeout=600 * SLOW)
    except subprocess.TimeoutExpired:
        return "npm install timed out (registry unreachable?)"
    if r.returncode != 0 or not os.path.exists(want):
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        return "npm install failed (registry unreachable?): " + tail[0]
    return None


why = install()
result = None
if not why:
    token = "conformance-token-123"
    tf = os.path.join(TMP, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    S = Server("openai", extra=["--http", "0", "--http-token-file", tf]).start()
    deadline = time.time() + 30 * SLOW
    port = None
    while port is None and time.time() < deadline:
        m = re.search(r"HTTP on [0-9.]+:(\d+)", S.log())
        port = int(m.group(1)) if m else None
    driver = os.path.join(TMP, "driver.mjs")
    with open(driver, "w") as f:
        f.write(DRIVER_JS)
    r = subprocess.run(["node", driver, os.path.join(CACHE, "node_modules", "openai", "index.mjs"),
                        "http://127.0.0.1:%d" % port, token], capture_output=True, text=True, timeout=300 * SLOW)
    if r.returncode == 0:
        result = json.loads(r.stdout.strip().splitlines()[-1])
    else:
        result = {"error": (r.stderr or r.stdout)[-1500:]}
    c = Client(S.sock)
    toks = []
    c.final(c.send("generate", session="twin", text="Once upon a time", max_tokens=24, seed=3), toks)
    socket_text = b"".join(toks).decode("utf-8", errors="replace")
    c.close()
    S.stop()


def need():
    if why:
        raise Skip(why)
    expect("error" not in result, "the driver failed: %s" % result.get("error"))


@case
def completions_non_streaming():
    need()
    c = result["completion"]
    expect(c["id"].startswith("resp-") and c["finish"] == "length", "completion %r" % c)
    expect(c["usage"]["completion_tokens"] == 24, "usage %r" % c["usage"])
    expect(c["text"] == socket_text, "openai client text %r != socket %r" % (c["text"], socket_text))


@case
def completions_streaming():
    need()
    s = result["completion_stream"]
    expect(s["text"] == result["completion"]["text"] and s["finish"] == "length" and s["chunks"] > 2,
           "stream %r" % s)


@case
def chat_non_streaming():
    need()
    c = result["chat"]
    expect(c["object"] == "chat.completion" and c["role"] == "assistant" and c["finish"] == "length",
           "chat %r" % c)
    expect(c["usage"]["completion_tokens"] == 20 and c["usage"]["prompt_tokens"] > 0, "usage %r" % c)


@case
def chat_streaming_with_usage():
    need()
    s = result["chat_stream"]
    expect(s["text"] == result["chat"]["text"], "chat stream %r != %r" % (s["text"], result["chat"]["text"]))
    expect(s["role"] == "assistant" and s["finish"] == "length", "stream %r" % s)
    expect(s["usage"] == result["chat"]["usage"], "usage %r vs %r" % (s["usage"], result["chat"]["usage"]))


@case
def models_and_errors():
    need()
    expect(result["models"] == ["default"], "models %r" % result["models"])
    b = result["bad"]
    expect(b and b["cls"] == "BadRequestError" and b["status"] == 400 and b["param"] == "max_tokens"
           and b["type"] == "invalid_request_error", "bad request as the client sees it: %r" % b)
    u = result["unauth"]
    expect(u and u["cls"] == "AuthenticationError" and u["status"] == 401, "bad token: %r" % u)


finish()
