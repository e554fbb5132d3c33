"""tests/test_http_openai_npm.py — conformance of the HTTP front door with a
real client: the `openai` package from the npm registry (the official
JavaScript/TypeScript client), driven by node against `lind serve --http`.

The package is installed at run time into
${XDG_CACHE_HOME:-~/.cache}/lind-npm-openai (reused when present), as
tests/test_tokenizer_npm.py does for its packages. Checked: completions and
chat, each non-streaming and streaming (the client's own SSE parser), with a
bearer token; the streamed text equals the non-streamed one and the text the
msgpack socket gives for the same turn; usage and finish_reason as the client
types them; models.list and models.retrieve (NotFoundError for another id); a
refused request surfaces as the client's BadRequestError with lind's error
code and the field as `param` (top_p 0, temperature 3, n 17, a penalty of 3, logit_bias,
top_logprobs 30, tools, response_format); n, logprobs, penalties and logit_bias on chat and completions
(streamed and not); the Responses API: create, retrieve, input items, a previous_response_id chain
fed only its new input, a stream, delete; a bad token as AuthenticationError. What apps rely on: two
conversations sent with one `user` stay apart and each continues its own
history; parallel requests of one user all succeed; two requests without
`seed` differ and two with one seed agree; fields lind ignores come back in
X-Lind-Ignored.

Prints SKIP with the reason when node/npm is missing or the registry cannot be
reached. Environment: LIND_BUILD (build directory, default build)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Client, Server, case, expect, finish, Skip, TMP, http_port  # noqa: E402
from openai_npm import install, run_driver  # noqa: E402


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
const m = await client.models.retrieve("default");
out.model = { id: m.id, created: m.created, object: m.object };
try {
  await client.models.retrieve("no-such-model");
  out.model_missing = null;
} catch (e) {
  out.model_missing = { cls: e.constructor.name, status: e.status, code: e.code, param: e.param };
}
// Two conversations of one user, each continued from its whole history (as
// a stateless app does), and three parallel requests of that user.
const user = "app-user-1";
out.convs = [];
for (const q of ["Who built the ark", "Tell me of Moses"]) {
  const m1 = [{ role: "user", content: q }];
  const { data: a, response: ra } = await client.chat.completions
    .create({ model: "default", messages: m1, max_tokens: 12, seed: 4, user }).withResponse();
  const m2 = [...m1, { role: "assistant", content: a.choices[0].message.content }, { role: "user", content: "And then" }];
  const { data: b, response: rb } = await client.chat.completions
    .create({ model: "default", messages: m2, max_tokens: 12, seed: 4, user }).withResponse();
  out.convs.push({ s1: ra.headers.get("x-lind-session"), s2: rb.headers.get("x-lind-session"),
                   t1: a.lind.session_tokens, t2: b.lind.session_tokens, u2: b.usage });
}
const par = await Promise.allSettled([1, 2, 3].map((i) => client.completions.create(
  { model: "default", prompt: "Psalm " + i, max_tokens: 60, user })));
out.parallel = par.map((p) => p.status === "fulfilled" ? "ok" : String(p.reason?.status));
// Fresh randomness without seed, reproducible with one.
const rnd = { model: "default", prompt: "And it came to pass", max_tokens: 64, temperature: 1 };
const r1 = await client.completions.create(rnd), r2 = await client.completions.create(rnd);
const s1 = await client.completions.create({ ...rnd, seed: 99 }), s2 = await client.completions.create({ ...rnd, seed: 99 });
out.random = { a: r1.choices[0].text, b: r2.choices[0].text, s1: s1.choices[0].text, s2: s2.choices[0].text };
out.edges = {};
for (const [k, v] of [["top_p", 0], ["temperature", 3], ["n", 17], ["frequency_penalty", 3], ["max_tokens", 0],
                      ["logit_bias", { "x": 1 }], ["top_logprobs", 30],
                      ["response_format", { type: "json_schema", json_schema: { name: "x", schema: { anyOf: [] } } }],
                      ["tools", [{ type: "function", function: { name: "f", parameters: {} } }]]]) {
  try {
    await client.chat.completions.create({ model: "default", messages: msgs, [k]: v });
    out.edges[k] = null;
  } catch (e) {
    out.edges[k] = { cls: e.constructor.name, status: e.status, param: e.param };
  }
}
const { response: ig } = await client.chat.completions
  .create({ model: "default", messages: msgs, max_tokens: 2, metadata: { app: "x" }, store: false }).withResponse();
out.ignored = ig.headers.get("x-lind-ignored");
try {
  await new OpenAI({ baseURL: base + "/v1", apiKey: "not-the-token", maxRetries: 0 }).models.list();
  out.unauth = null;
} catch (e) {
  out.unauth = { cls: e.constructor.name, status: e.status };
}
// n, logprobs, the penalties and logit_bias through the client.
const samp = { model: "default", messages: msgs, max_tokens: 8, logprobs: true, top_logprobs: 2,
               presence_penalty: 0.5, frequency_penalty: 0.5, logit_bias: { "65": 3 } };
const nc = await client.chat.completions.create({ ...samp, n: 3, seed: 21 });
out.nchat = nc.choices.map((c) => ({ index: c.index, text: c.message.content,
                                     lp: c.logprobs.content.map((e) => [e.token, e.logprob, e.top_logprobs.length]) }));
const one = await client.chat.completions.create({ ...samp, seed: 22 });
out.nchat_one = one.choices[0].message.content;
const ntexts = ["", "", ""];
for await (const ch of await client.chat.completions.create({ ...samp, n: 3, seed: 21, stream: true }))
  for (const c of ch.choices) ntexts[c.index] += c.delta?.content ?? "";
out.nchat_stream = ntexts;
const nco = await client.completions.create({ model: "default", prompt: "Once upon a time", max_tokens: 6, n: 2,
                                              logprobs: 3, seed: 5 });
out.ncomp = nco.choices.map((c) => ({ text: c.text, tokens: c.logprobs.tokens,
                                      top: c.logprobs.top_logprobs.map((d) => Object.keys(d).length) }));
// The Responses API: create, retrieve, input items, a chain, a stream, delete.
const rs1 = await client.responses.create({ model: "default", input: "Hello", instructions: "Be brief.",
                                           max_output_tokens: 8, temperature: 0.5 });
out.rs1 = { id: rs1.id, object: rs1.object, status: rs1.status, text: rs1.output_text, usage: rs1.usage,
           tokens: rs1.lind.session_tokens, instructions: rs1.instructions };
const got = await client.responses.retrieve(rs1.id);
out.rs1get = { id: got.id, text: got.output[0].content[0].text };
const items = await client.responses.inputItems.list(rs1.id);
out.items = items.data.map((i) => ({ role: i.role, text: i.content[0].text }));
const rs2 = await client.responses.create({ model: "default", input: [{ role: "user", content: "More" }],
                                           previous_response_id: rs1.id, max_output_tokens: 6, temperature: 0 });
out.rs2 = { prev: rs2.previous_response_id, text: rs2.output_text, usage: rs2.usage, tokens: rs2.lind.session_tokens };
const evs = [];
let stext = "", sdone = null, sfinal = null;
for await (const ev of await client.responses.create({ model: "default", input: [{ role: "user", content: "More" }],
                                                      previous_response_id: rs1.id, max_output_tokens: 6,
                                                      temperature: 0, stream: true })) {
  evs.push(ev.type);
  if (ev.type === "response.output_text.delta") stext += ev.delta;
  if (ev.type === "response.output_text.done") sdone = ev.text;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") sfinal = ev.response.output_text;
}
out.rstream = { evs, text: stext, done: sdone, final: sfinal };
await client.responses.del(rs2.id);
try {
  await client.responses.retrieve(rs2.id);
  out.rs2gone = null;
} catch (e) {
  out.rs2gone = { cls: e.constructor.name, status: e.status };
}
console.log(JSON.stringify(out));
"""


why = install()
result = None
if not why:
    token = "conformance-token-123"
    tf = os.path.join(TMP, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    S = Server("openai", extra=["--http", "0", "--http-token-file", tf]).start()
    port = http_port(S)
    result = run_driver(DRIVER_JS, ["http://127.0.0.1:%d" % port, token], 300)
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


@case
def model_by_id():
    need()
    m = result["model"]
    expect(m["id"] == "default" and m["object"] == "model" and m["created"] > 0, "models.retrieve: %r" % m)
    x = result["model_missing"]
    expect(x and x["cls"] == "NotFoundError" and x["status"] == 404 and x["code"] == "model_not_found",
           "an unknown model: %r" % x)


@case
def one_user_two_conversations():
    need()
    a, b = result["convs"]
    expect(len({a["s1"], a["s2"], b["s1"], b["s2"]}) == 4 and "app-user-1" not in (a["s1"], b["s1"]),
           "each response its own session, none named by the user: %r %r" % (a, b))
    for c in (a, b):
        # The second turn continued its own stored history: fed only the new message.
        expect(c["u2"]["prompt_tokens"] <= len("And then\n") + 1 and
               c["t2"] == c["t1"] + c["u2"]["prompt_tokens"] + c["u2"]["completion_tokens"],
               "history not continued: %r" % c)
    expect(result["parallel"] == ["ok"] * 3, "parallel requests of one user: %r" % result["parallel"])


@case
def randomness():
    need()
    r = result["random"]
    expect(r["a"] != r["b"], "two requests without seed gave one text: %r" % r["a"])
    expect(r["s1"] == r["s2"], "one seed gave two texts: %r" % r)


@case
def edges_and_ignored_fields():
    need()
    for k, e in result["edges"].items():
        expect(e and e["cls"] == "BadRequestError" and e["status"] == 400 and e["param"] == k,
               "%s refused by name: %r" % (k, e))
    # `store` is honoured (store: false keeps nothing: docs/HTTP.md, Retention), so only
    # `metadata` is reported as ignored.
    expect(result["ignored"] == "metadata", "X-Lind-Ignored %r" % result["ignored"])


@case
def n_logprobs_penalties_logit_bias():
    need()
    nc = result["nchat"]
    expect([c["index"] for c in nc] == [0, 1, 2], "three choices: %r" % nc)
    expect(nc[1]["text"] == result["nchat_one"], "choice 1 is seed + 1's answer: %r vs %r" %
           (nc[1]["text"], result["nchat_one"]))
    expect(result["nchat_stream"] == [c["text"] for c in nc], "streamed choices %r" % result["nchat_stream"])
    for c in nc:
        expect("".join(t for t, _, _ in c["lp"]) == c["text"] and all(lp <= 0 and k == 2 for _, lp, k in c["lp"]),
               "logprobs of %r" % c)
    nco = result["ncomp"]
    expect(len(nco) == 2 and all("".join(c["tokens"]) == c["text"] and c["top"] == [3] * 6 for c in nco),
           "completions n 2, logprobs 3: %r" % nco)


@case
def responses_api():
    need()
    r1, g = result["rs1"], result["rs1get"]
    expect(r1["object"] == "response" and r1["id"].startswith("resp-") and r1["instructions"] == "Be brief.",
           "create %r" % r1)
    expect(g == {"id": r1["id"], "text": r1["text"]}, "retrieve %r vs %r" % (g, r1))
    expect(result["items"] == [{"role": "user", "text": "Hello"}], "input items %r" % result["items"])
    r2 = result["rs2"]
    expect(r2["prev"] == r1["id"] and r2["tokens"] == r1["tokens"] + r2["usage"]["input_tokens"] +
           r2["usage"]["output_tokens"], "the chain fed only its new input: %r %r" % (r1, r2))
    s = result["rstream"]
    expect(s["evs"][0] == "response.created" and "response.output_text.done" in s["evs"] and
           s["evs"][-1] in ("response.completed", "response.incomplete"), "events %r" % s["evs"])
    expect(s["text"] == s["done"] == s["final"] == r2["text"], "streamed %r vs %r" % (s, r2["text"]))
    expect(result["rs2gone"] == {"cls": "NotFoundError", "status": 404}, "deleted: %r" % result["rs2gone"])


finish()
