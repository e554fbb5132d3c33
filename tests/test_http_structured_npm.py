"""tests/test_http_structured_npm.py — structured output (response_format
json_schema / json_object, the Responses API's text.format) through the
official `openai` npm client against `lind serve --http`, the way an app
uses it: 200 seeded generations (50 on a sanitized server) at temperature 1
(chat and completions, n > 1, streamed and not) whose output, when the turn ends with finish_reason
`stop`, parses and validates against the schema (a validator of the subset
is written here); a turn cut by max_tokens ends with `length` and its text
is still a valid JSON prefix; json_object gives an object; refusals are
400s naming the field and the keyword.

The package is installed as tests/test_http_openai_npm.py installs it (and
shares its cache). Prints SKIP when node/npm is missing or the registry
cannot be reached. Environment: LIND_BUILD (build directory, default build)."""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Server, case, expect, finish, Skip, SANITIZED, http_port  # noqa: E402
from openai_npm import install, run_driver  # noqa: E402


# Bounded documents: the shipped byte model (trained on the King James Bible)
# never writes a '"' of its own, so a free string would run to max_tokens,
# and in an array it repeats ", null" on and on; so no free string and no
# array here (test_core_jsonfsm covers them).
SCHEMA = {
    "type": "object",
    "properties": {
        "mood": {"enum": ["calm", "angry", "glad"]},
        "count": {"type": "integer"},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "tag": {"enum": ["a", "b", 7, None, [1, 2], {"k": "v"}]},
        "inner": {"type": "object", "properties": {"x": {"type": ["integer", "null"]}},
                  "required": ["x"], "additionalProperties": False},
    },
    "required": ["mood", "count", "ok"],
    "additionalProperties": False,
}

DRIVER_JS = r"""
// node driver.mjs OPENAI_INDEX_MJS BASE_URL SCHEMA_JSON QUARTERS: every call below, as one JSON line.
const [mod, base, schemaText, quartersText] = process.argv.slice(2);
const quarters = Number(quartersText);   // 4: 200 generations; 1: 50 (under a sanitizer)
const { default: OpenAI } = await import(mod);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "x", maxRetries: 0 });
const schema = JSON.parse(schemaText);
const rf = { type: "json_schema", json_schema: { name: "answer", strict: true, schema } };
const msgs = [{ role: "user", content: "Describe the day as JSON." }];
const out = { gens: [], short: [], objs: [], resp: [], refusals: {} };
async function chat(seed, stream, n, max_tokens, format) {
  const p = { model: "default", messages: msgs, temperature: 1, seed, n, max_tokens, response_format: format };
  if (!stream) {
    const r = await client.chat.completions.create(p);
    return r.choices.map((c) => ({ text: c.message.content, finish: c.finish_reason, index: c.index }));
  }
  const texts = Array(n).fill(""), fins = Array(n).fill(null);
  for await (const ch of await client.chat.completions.create({ ...p, stream: true }))
    for (const c of ch.choices) {
      texts[c.index] += c.delta?.content ?? "";
      if (c.finish_reason) fins[c.index] = c.finish_reason;
    }
  return texts.map((t, i) => ({ text: t, finish: fins[i], index: i }));
}
async function comp(seed, stream, n, max_tokens, format) {
  const p = { model: "default", prompt: "JSON:", temperature: 1, seed, n, max_tokens, response_format: format };
  if (!stream) {
    const r = await client.completions.create(p);
    return r.choices.map((c) => ({ text: c.text, finish: c.finish_reason, index: c.index }));
  }
  const texts = Array(n).fill(""), fins = Array(n).fill(null);
  for await (const ch of await client.completions.create({ ...p, stream: true }))
    for (const c of ch.choices) {
      texts[c.index] += c.text ?? "";
      if (c.finish_reason) fins[c.index] = c.finish_reason;
    }
  return texts.map((t, i) => ({ text: t, finish: fins[i], index: i }));
}
// 200 generations: 40 chat requests of n = 4 (half streamed), 20 completions of n = 2
const jobs = [];
for (let i = 0; i < 10 * quarters; i++) jobs.push(() => chat(1000 + i, i % 2 === 1, 4, 600, rf).then((g) => ["chat", i, g]));
for (let i = 0; i < 5 * quarters; i++) jobs.push(() => comp(2000 + i, i % 2 === 1, 2, 600, rf).then((g) => ["comp", i, g]));
for (let k = 0; k < jobs.length; k += 8) {
  const res = await Promise.all(jobs.slice(k, k + 8).map((f) => f()));
  for (const [kind, i, g] of res) for (const c of g) out.gens.push({ kind, i, ...c });
}
// the same seed twice gives the same text (streamed and not)
out.same = [(await chat(1001, false, 4, 600, rf)).map((c) => c.text), (await chat(1001, true, 4, 600, rf)).map((c) => c.text)];
// the other sampling paths: top-p (the row masked in place) and logprobs (the masked row read back)
out.paths = [];
for (let i = 0; i < 6; i++) {
  const r = await client.chat.completions.create({ model: "default", messages: msgs, temperature: 1, seed: 6000 + i,
    n: 2, max_tokens: 600, response_format: rf, ...(i % 2 ? { top_p: 0.9 } : { logprobs: true, top_logprobs: 2 }) });
  for (const c of r.choices)
    out.paths.push({ text: c.message.content, finish: c.finish_reason,
                     lp: c.logprobs ? c.logprobs.content.map((e) => [e.logprob, e.top_logprobs.length]) : null });
}
// cut short: max_tokens 6
for (let i = 0; i < 10; i++) for (const c of await chat(3000 + i, i % 2 === 1, 1, 6, rf)) out.short.push(c);
// json_object mode
for (let i = 0; i < 6; i++) for (const c of await comp(4000 + i, false, 1, 400, { type: "json_object" })) out.objs.push(c);
// the Responses API's text.format
for (let i = 0; i < 4; i++) {
  const r = await client.responses.create({ model: "default", input: "Describe the day.", temperature: 1, seed: 5000 + i,
    max_output_tokens: 600, text: { format: { type: "json_schema", name: "answer", schema, strict: true } } });
  out.resp.push({ text: r.output_text, status: r.status, format: r.text?.format?.type, name: r.text?.format?.name });
}
let stext = "", sfinal = null;
for await (const ev of await client.responses.create({ model: "default", input: "Describe the day.", temperature: 1,
    seed: 5100, max_output_tokens: 600, stream: true,
    text: { format: { type: "json_schema", name: "answer", schema, strict: true } } })) {
  if (ev.type === "response.output_text.delta") stext += ev.delta;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") sfinal = ev.response.status;
}
out.resp.push({ text: stext, status: sfinal, stream: true });
// refusals
const bad = {
  anyOf: ["chat", { type: "json_schema", json_schema: { name: "x", schema: { anyOf: [{ type: "string" }] } } }],
  pattern: ["comp", { type: "json_schema", json_schema: { name: "x", schema: { type: "object",
            properties: { s: { type: "string", pattern: "^a" } } } } }],
  required: ["chat", { type: "json_schema", json_schema: { name: "x", schema: { type: "object", required: ["q"] } } }],
  xml: ["chat", { type: "xml" }],
};
for (const [k, [kind, f]] of Object.entries(bad)) {
  try {
    await (kind === "chat" ? chat(1, false, 1, 5, f) : comp(1, false, 1, 5, f));
    out.refusals[k] = null;
  } catch (e) {
    out.refusals[k] = { cls: e.constructor.name, status: e.status, param: e.param, message: e.message };
  }
}
try {
  await client.responses.create({ model: "default", input: "x", text: { format: { type: "json_schema", name: "x",
    schema: { $ref: "#/defs/a" } } } });
  out.refusals.ref = null;
} catch (e) {
  out.refusals.ref = { cls: e.constructor.name, status: e.status, param: e.param, message: e.message };
}
try {
  await client.chat.completions.create({ model: "default", messages: msgs,
    tools: [{ type: "function", function: { name: "f", parameters: {} } }] });
  out.refusals.tools = null;
} catch (e) {
  out.refusals.tools = { cls: e.constructor.name, status: e.status, param: e.param, message: e.message };
}
console.log(JSON.stringify(out));
"""


def validate(s, v):
    """Whether v is valid under schema s (the subset lind serves)."""
    if s is True or s == {}:
        return True
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        ok = False
        for ty in types:
            ok |= (ty == "object" and isinstance(v, dict)) or (ty == "array" and isinstance(v, list)) or \
                (ty == "string" and isinstance(v, str)) or (ty == "boolean" and isinstance(v, bool)) or \
                (ty == "null" and v is None) or \
                (ty == "integer" and isinstance(v, int) and not isinstance(v, bool)) or \
                (ty == "number" and isinstance(v, (int, float)) and not isinstance(v, bool))
        if not ok:
            return False
    if "enum" in s and not any(v == e and type(v) is type(e) for e in s["enum"]):
        return False
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k, x in v.items():
            if k in props:
                if not validate(props[k], x):
                    return False
            elif s.get("additionalProperties") is False:
                return False
            elif isinstance(s.get("additionalProperties"), dict) and not validate(s["additionalProperties"], x):
                return False
        if any(r not in v for r in s.get("required", [])):
            return False
    if isinstance(v, list) and "items" in s:
        return all(validate(s["items"], x) for x in v)
    return True


def no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def parse(text):
    return json.loads(text, object_pairs_hook=no_duplicate_keys)


NUM_PREFIX = re.compile(r"-|-?(0|[1-9]\d*)(\.(\d+([eE]([+-]?\d*)?)?)?|[eE]([+-]?\d*)?)?")
NUM = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
LITS = ("true", "false", "null")


def valid_prefix(text):
    """Whether text is the start of some JSON document (a pushdown
    recognizer of RFC 8259, written for this test)."""
    st = [["doc", "value"]]
    mode, buf, esc, iskey = None, "", 0, False

    def value_done():
        st[-1][1] = "done" if st[-1][0] == "doc" else "after"

    def structural(ch):
        nonlocal mode, buf, iskey
        if ch in " \t\n\r":
            return True
        kind, state = st[-1]
        if state in ("value", "first"):
            if ch == "]" and state == "first":
                st.pop()
                value_done()
            elif ch == "{":
                st.append(["obj", "firstkey"])
            elif ch == "[":
                st.append(["arr", "first"])
            elif ch == '"':
                mode, iskey = "str", False
            elif ch == "-" or ch.isdigit():
                mode, buf = "num", ch
            elif ch in "tfn":
                mode, buf = "lit", ch
            else:
                return False
            return True
        if state == "done":
            return False
        if state in ("firstkey", "key"):
            if ch == "}" and state == "firstkey":
                st.pop()
                value_done()
                return True
            if ch != '"':
                return False
            mode, iskey = "str", True
            return True
        if state == "colon":
            if ch != ":":
                return False
            st[-1][1] = "value"
            return True
        # after a value in a container
        if ch == ",":
            st[-1][1] = "key" if kind == "obj" else "value"
            return True
        if (ch == "}" and kind == "obj") or (ch == "]" and kind == "arr"):
            st.pop()
            value_done()
            return True
        return False

    for ch in text:
        if mode == "str":
            if esc == 1:
                if ch == "u":
                    esc = 2
                elif ch in '"\\/bfnrt':
                    esc = 0
                else:
                    return False
            elif esc >= 2:
                if ch not in "0123456789abcdefABCDEF":
                    return False
                esc = 0 if esc == 5 else esc + 1
            elif ch == "\\":
                esc = 1
            elif ch == '"':
                mode = None
                if iskey:
                    st[-1][1] = "colon"
                else:
                    value_done()
            elif ord(ch) < 0x20:
                return False
            continue
        if mode == "num":
            if NUM_PREFIX.fullmatch(buf + ch):
                buf += ch
                continue
            if not NUM.fullmatch(buf):
                return False
            mode = None
            value_done()
        elif mode == "lit":
            if any(l.startswith(buf + ch) for l in LITS):
                buf += ch
                continue
            if buf not in LITS:
                return False
            mode = None
            value_done()
        if not structural(ch):
            return False
    return True


# 200 generations; 50 on a sanitized server (~10x slower), the same paths
GENS = 50 if SANITIZED else 200
why = install()
result = None
if not why:
    S = Server("structured", extra=["--http", "0", "--max-batch", "32"]).start()
    port = http_port(S)
    t0 = time.time()
    result = run_driver(DRIVER_JS, ["http://127.0.0.1:%d" % port, json.dumps(SCHEMA), str(GENS // 50)], 600)
    print("# driver ran %.1f s" % (time.time() - t0))
    S.stop()


def need():
    if why:
        raise Skip(why)
    expect("error" not in result, "the driver failed: %s" % result.get("error"))


@case
def two_hundred_generations_parse_and_validate():
    need()
    gens = result["gens"]
    expect(len(gens) == GENS, "%d generations, not %d" % (len(gens), GENS))
    stops = 0
    for g in gens:
        expect(g["finish"] in ("stop", "length"), "finish_reason %r" % g)
        if g["finish"] == "stop":
            stops += 1
            try:
                v = parse(g["text"])
            except ValueError as e:
                expect(False, "%s %d choice %d does not parse (%s): %r" % (g["kind"], g["i"], g["index"], e, g["text"]))
                continue
            expect(validate(SCHEMA, v), "does not validate: %r" % g["text"])
        else:
            expect(valid_prefix(g["text"]), "cut at length, not a JSON prefix: %r" % g["text"])
    print("# %d of %d generations ended (stop) within 600 tokens" % (stops, len(gens)))
    expect(stops >= GENS * 3 // 4, "only %d of %d ended with a document" % (stops, GENS))
    # n > 1: the choices of one request differ (each its own seed)
    first = [g["text"] for g in gens if g["kind"] == "chat" and g["i"] == 0]
    expect(len(set(first)) > 1, "n = 4 gave one text four times: %r" % first)


@case
def top_p_and_logprobs_paths():
    need()
    for c in result["paths"]:
        expect(c["finish"] == "stop" and validate(SCHEMA, parse(c["text"])), "top_p / logprobs: %r" % c)
        if c["lp"] is not None:
            # every sampled token was allowed: a finite logprob, never the mask's -1e30
            expect(all(lp > -1e20 for lp, _ in c["lp"]), "a masked token's logprob: %r" % c["lp"])


@case
def seeded_and_streamed_alike():
    need()
    a, b = result["same"]
    expect(a == b, "streamed %r != non-streamed %r" % (b, a))
    expect(a == [g["text"] for g in result["gens"] if g["kind"] == "chat" and g["i"] == 1],
           "same seed, same texts")


@case
def cut_short_is_length_and_a_prefix():
    need()
    for c in result["short"]:
        expect(c["finish"] == "length" and valid_prefix(c["text"]), "max_tokens 6: %r" % c)


@case
def json_object_gives_an_object():
    need()
    n = 0
    for c in result["objs"]:
        if c["finish"] == "stop":
            n += 1
            expect(isinstance(parse(c["text"]), dict), "not an object: %r" % c)
        else:
            expect(valid_prefix(c["text"]) and c["text"].lstrip()[:1] == "{", "not an object's start: %r" % c)
    print("# json_object: %d of %d ended with a document" % (n, len(result["objs"])))


@case
def responses_text_format():
    need()
    for r in result["resp"]:
        if r["status"] == "completed":
            expect(validate(SCHEMA, parse(r["text"])), "responses: %r" % r)
        else:
            expect(r["status"] == "incomplete" and valid_prefix(r["text"]), "responses: %r" % r)
    expect(sum(r["status"] == "completed" for r in result["resp"]) >= 3, "responses: %r" % result["resp"])
    # the response object echoes the format asked for
    for r in result["resp"][:4]:
        expect(r["format"] == "json_schema" and r["name"] == "answer", "text.format echoed: %r" % r)


@case
def refusals_name_field_and_keyword():
    need()
    for k, kw in (("anyOf", "'anyOf'"), ("pattern", "'pattern'"), ("required", "'q'"), ("xml", "'xml'")):
        e = result["refusals"][k]
        expect(e and e["cls"] == "BadRequestError" and e["status"] == 400 and e["param"] == "response_format"
               and kw in e["message"], "%s: %r" % (k, e))
    e = result["refusals"]["ref"]
    expect(e and e["status"] == 400 and e["param"] == "text" and "'$ref'" in e["message"], "text.format $ref: %r" % e)
    e = result["refusals"]["tools"]
    expect(e and e["status"] == 400 and e["param"] == "tools" and "tool calls" in e["message"], "tools: %r" % e)


@case
def prefix_checker_itself():
    """The test's own JSON-prefix check: takes prefixes, refuses non-prefixes."""
    doc = '{"mood": "calm", "count": -12, "ok": true, "tags": ["a", 7, null], "inner": {"x": 1.5e3}}'
    for i in range(len(doc) + 1):
        expect(valid_prefix(doc[:i]), "prefix %r refused" % doc[:i])
    for bad in ('{"a" 1', '[1,,', '{]', '}', '{"a":1}}', '[tx', '{"a":-x', '[1.e', '[01', '{"a":1,}', '"\\x'):
        expect(not valid_prefix(bad), "non-prefix %r taken" % bad)


finish()
