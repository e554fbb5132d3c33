"""tests/test_daemon_max_length.py — a model with a maximum length served by
the daemon.

Some mixer kinds hold a session to a length fixed by construction (a causal
Linformer's max_len N; a cosFormer's horizon M): model_max_tokens(). The
daemon must stop such a session's turn at that length with `done` reason
`max_length` (everything fed before kept and committed, a later turn ending at
once the same way), and never let the step refuse a whole batch — another
session stepping beside it continues normally. Also the offline commands
on such a model (lind score's up-front refusal and --segment, bench-step)."""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_harness as dh  # noqa: E402

N = 40          # the Linformer's max_len: tokens a session may hold, BOS included
failures = 0


def report(name, ok, why=""):
    global failures
    print("PASS %s" % name if ok else "FAIL %s: %s" % (name, why), flush=True)
    failures += 0 if ok else 1


def write_safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = a.astype("<f4").tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_model(path):
    os.makedirs(path, exist_ok=True)
    d, H, dhd, kp, dff = 16, 2, 8, 4, 32
    cfg = {"vocab_size": 256, "d_model": d, "n_layers": 1, "norm_eps": 1e-5,
           "layers": [{"mixer": "linformer", "ffn": "gelu_mlp", "n_heads": H, "d_head": dhd,
                       "proj_len": kp, "max_len": N, "d_ff": dff}]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(5)

    def u(*shape, a=1.0):
        return a * rng.uniform(-1, 1, size=shape)
    t = {"embed.weight": u(256, d), "ln_f.weight": 1 + u(d, a=0.1), "ln_f.bias": u(d, a=0.1),
         "head.weight": u(256, d, a=0.75)}
    p = "layers.0."
    for ln in ("ln1", "ln2"):
        t[p + ln + ".weight"] = 1 + u(d, a=0.1)
        t[p + ln + ".bias"] = u(d, a=0.1)
    for w in ("wq", "wk", "wv", "wo"):
        t[p + "mixer." + w] = u(d, d, a=0.25)
    t[p + "mixer.proj_k"] = u(N, kp, a=0.5)
    t[p + "mixer.proj_v"] = u(N, kp, a=0.5)
    t[p + "ffn.w1"], t[p + "ffn.b1"] = u(dff, d, a=0.25), u(dff, a=0.1)
    t[p + "ffn.w2"], t[p + "ffn.b2"] = u(d, dff, a=0.18), u(d, a=0.1)
    write_safetensors(os.path.join(path, "model.safetensors"), t)


model = os.path.join(dh.TMP, "linformer")
write_model(model)
dh.MODEL = model
srv = dh.Server("ml").start()
try:
    c = dh.Client(srv.sock)
    # a long prompt and, in the same rounds, a short generate of another session
    r1 = c.send("generate", session="long", text="x" * 100, max_tokens=10)
    r2 = c.send("generate", session="short", text="ab", max_tokens=5)
    d1, d2 = c.final(r1), c.final(r2)
    report("turn_stops_at_max_length", d1.get("event") == "done" and d1.get("reason") == "max_length"
           and d1.get("session_tokens") == N + 1, d1)
    report("other_session_unaffected", d2.get("event") == "done" and d2.get("reason") == "length"
           and d2.get("tokens_out") == 5, d2)
    d3 = c.call("generate", session="long", text="more", max_tokens=3)
    report("later_turn_ends_at_once", d3.get("reason") == "max_length" and d3.get("tokens_out") == 0, d3)
    info = c.call("info", session="long")
    report("session_holds_what_was_fed", info.get("tokens") == N + 1, info)
    c.close()
    try:
        srv.stop()   # raises unless the exit status is 0
        report("server_clean_exit", True)
    except RuntimeError as e:
        report("server_clean_exit", False, e)
finally:
    if srv.proc and srv.proc.poll() is None:
        srv.proc.kill()

# The offline commands on the same model: `lind score` refuses a text longer
# than max_len up front, naming the limit and --segment; scores it in fresh
# segments of at most N tokens; `lind bench-step` restarts its sessions at N.
import subprocess  # noqa: E402
text = os.path.join(dh.TMP, "text.txt")
with open(text, "wb") as f:
    f.write(dh.text_of(300, seed=3))
p = subprocess.run([dh.LIND, "score", "--model", model, "--backend", "cpu", text], capture_output=True)
report("score_refuses_past_max_length", p.returncode == 1 and b"at most %d tokens per session" % N in p.stderr
       and b"--segment %d" % N in p.stderr, p.stderr)
p = subprocess.run([dh.LIND, "score", "--model", model, "--backend", "cpu", "--segment", str(N), text],
                   capture_output=True)
report("score_in_segments", p.returncode == 0 and b"segments: 8 of at most %d tokens" % N in p.stdout
       and b"bits_per_byte: " in p.stdout, p)
p = subprocess.run([dh.LIND, "score", "--model", model, "--backend", "cpu", "--segment", str(N + 1), text],
                   capture_output=True)
report("segment_longer_than_max_length", p.returncode == 1 and b"longer than the model's maximum length"
       in p.stderr, p.stderr)
p = subprocess.run([dh.LIND, "bench-step", "--model", model, "--backend", "cpu", "--max-batch", "2",
                    "--seconds", "0.05", "--warm", "100"], capture_output=True)
report("bench_step_restarts_at_max_length", p.returncode == 0 and b"sessions reset every %d tokens" % N
       in p.stdout and b"\n     2 " in p.stdout, p)
sys.exit(1 if failures else 0)
