#!/usr/bin/python3
"""tools/mixers_measure.py — the measurements of the mixer table
(docs/MIXERS.md), run by tools/mixers_table.sh.

    mixers_measure.py quality ROW...   held-out bits/byte: whole text in one session, in fresh
                                       128-token segments, and after 100,000 generated tokens
    mixers_measure.py prefix ROW...    bits/byte of the held-out text's first 128 … 32768 bytes
    mixers_measure.py speed ROW...     lind bench-step, one CPU thread: µs/token at batch 1,
                                       tokens/s at batch 64; state bytes (lind info)
    mixers_measure.py cost             window (w) and linformer (N) cost as they grow, on
                                       random-weight models of the table's shape
    mixers_measure.py table            bench/results/mixers.md from bench/results/mixers.json

Every command line and its full output go to bench/results/mixers_raw.txt
(appended, with the time and /proc/loadavg: the machine is shared), the
parsed figures to bench/results/mixers.json (merged, so rows can be measured
separately)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
LIND = os.environ.get("LIND", os.path.join(ROOT, "build", "lind"))
HELD = os.path.join(ROOT, "data", "kjv", "heldout.txt")
RES = os.path.join(ROOT, "bench", "results")
RAW = os.path.join(RES, "mixers_raw.txt")
JS = os.path.join(RES, "mixers.json")
SEG = 128            # the training window (tools/mixers_table.sh CTX)
AFTER = 100000       # tokens generated before the held-out text
GEN_SEED = 1
ENV = dict(os.environ, LIND_CPU_THREADS="1")


def load():
    try:
        with open(JS) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save(db, key):
    """Write db[key] into the file as it is now (other keys, and a row's
    other fields, as another process left them: runs may overlap), atomically."""
    cur = load()
    if isinstance(cur.get(key), dict) and key != "_cost":
        cur[key].update(db[key])     # fields this run measured; the others kept
    else:
        cur[key] = db[key]
    tmp = JS + ".tmp%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(cur, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, JS)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(args):
    """Run lind; log the command and output; (returncode, stdout+stderr)."""
    t0 = time.time()
    la = loadavg()
    p = subprocess.run(args, capture_output=True, text=True, env=ENV, cwd=ROOT)
    out = p.stdout + p.stderr
    with open(RAW, "a") as f:
        f.write("### %s  load %s -> %s  %.1f s  LIND_CPU_THREADS=1\n$ %s\n%s(exit %d)\n\n"
                % (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t0)), la, loadavg(),
                   time.time() - t0, " ".join(args), out, p.returncode))
    return p.returncode, out


def field(out, key):
    m = re.search(r"^%s:\s+([-0-9.e+]+)" % re.escape(key), out, re.M)
    return float(m.group(1)) if m else None


def model_dir(row):
    return os.path.join("models", row)


def info(row, d):
    rc, out = run([LIND, "info", "--model", model_dir(row), "--backend", "cpu"])
    d["params"] = int(field(out, "parameters"))
    d["state_bytes"] = int(re.search(r"state_bytes:\s+(\d+)", out).group(1))
    d["mixers"] = re.search(r"^mixers:\s+(\S+)", out, re.M).group(1)
    d["model_file_bytes"] = os.path.getsize(os.path.join(ROOT, model_dir(row), "model.safetensors"))
    with open(os.path.join(ROOT, model_dir(row), "final.json")) as f:
        fin = json.load(f)
    d["train_seconds"] = fin["train_seconds"]
    d["train_steps"] = fin["steps"]
    d["torch_heldout_windows"] = fin["heldout_bpb_windows"]


def quality(rows):
    db = load()
    for row in rows:
        d = db.setdefault(row, {})
        info(row, d)
        base = [LIND, "score", "--model", model_dir(row), "--backend", "cpu"]
        rc, out = run(base + [HELD])
        d["heldout_stream"] = field(out, "bits_per_byte") if rc == 0 else None
        d["heldout_stream_note"] = "" if rc == 0 else out.strip().splitlines()[-1]
        rc, out = run(base + ["--segment", str(SEG), HELD])
        d["heldout_segments"] = field(out, "bits_per_byte") if rc == 0 else None
        rc, out = run(base + ["--after-generate", str(AFTER), "--seed", str(GEN_SEED), HELD])
        d["after_generate"] = field(out, "bits_per_byte") if rc == 0 else None
        d["after_generate_note"] = "" if rc == 0 else out.strip().splitlines()[-1]
        save(db, row)
        print(row, json.dumps(d), flush=True)


PREFIXES = (128, 512, 2048, 8192, 32768)


def prefix(rows):
    """Bits/byte of the held-out text's first n bytes, one session each:
    how a kind does as the stream grows past the 128-token training window."""
    with open(HELD, "rb") as f:
        held = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        for n in PREFIXES:
            with open(os.path.join(tmp, "first%d.txt" % n), "wb") as f:
                f.write(held[:n])
        for row in rows:
            db = load()
            d = db.setdefault(row, {})
            d["prefix"] = {}
            for n in PREFIXES:
                rc, out = run([LIND, "score", "--model", model_dir(row), "--backend", "cpu",
                               os.path.join(tmp, "first%d.txt" % n)])
                d["prefix"][str(n)] = field(out, "bits_per_byte") if rc == 0 else None
            save(db, row)
            print(row, d["prefix"], flush=True)


def bench(mdir, max_batch, warm, seconds=1.0):
    """{batch: (us/token wall, tokens/s wall, us/token per CPU-second)} from bench-step."""
    rc, out = run([LIND, "bench-step", "--model", mdir, "--backend", "cpu", "--max-batch", str(max_batch),
                   "--seconds", str(seconds), "--warm", str(warm)])
    if rc != 0:
        raise SystemExit("bench-step failed on %s:\n%s" % (mdir, out))
    wall, cpu = {}, {}
    part = out.split("per CPU-second")
    for line in part[0].splitlines():
        f = line.split()
        if len(f) == 8 and f[0].isdigit():
            wall[int(f[0])] = (float(f[2]), float(f[3]))
    for line in part[1].splitlines():
        f = line.split()
        if len(f) == 6 and f[0].isdigit():
            cpu[int(f[0])] = float(f[5])          # µs of CPU per token (cpu-us/token)
    return {b: (wall[b][0], wall[b][1], cpu.get(b)) for b in wall}


def speed(rows):
    db = load()
    for row in rows:
        d = db.setdefault(row, {})
        info(row, d)
        r = bench(model_dir(row), 64, 256)
        d["us_token_b1"], _, d["cpu_us_token_b1"] = r[1]
        _, d["tok_s_b64"], cpu64 = r[64]
        d["cpu_tok_s_b64"] = 1e6 / cpu64 if cpu64 else None
        d["speed_load"] = loadavg()
        save(db, row)
        print(row, json.dumps(d), flush=True)


def random_model(path, kind, keys):
    """The table's shape (d 128, 4 layers of `kind`, 4 heads × 32, d_ff 512),
    random weights, F16 2-D tensors as the trained models store them."""
    import torch
    import lindmodel
    cfg = {"vocab_size": 256, "d_model": 128, "n_layers": 4, "n_heads": 4, "d_head": 32, "d_ff": 512,
           "mixers": [kind] * 4, "norm_eps": 1e-5, "attn_eps": 1e-6}
    cfg.update(keys)
    torch.manual_seed(0)
    m = lindmodel.Model(cfg)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    lindmodel.save_safetensors(os.path.join(path, "model.safetensors"), m.export_tensors(), True)


def cost():
    db = load()
    out = db.setdefault("_cost", {})
    with tempfile.TemporaryDirectory() as tmp:
        for w in (32, 128, 512, 2048):
            p = os.path.join(tmp, "window_%d" % w)
            random_model(p, "window", {"window": w, "global": 4})
            rc, o = run([LIND, "info", "--model", p, "--backend", "cpu"])
            sb = int(re.search(r"state_bytes:\s+(\d+)", o).group(1))
            r = bench(p, 1, w + 8, 1.0)     # the ring full: every step attends to w + g keys
            out["window_w%d" % w] = {"w": w, "state_bytes": sb, "us_token_b1": r[1][0],
                                     "cpu_us_token_b1": r[1][2], "load": loadavg()}
            save(db, "_cost")
            print("window", w, out["window_w%d" % w], flush=True)
        for n in (128, 1024, 8192, 65536):
            p = os.path.join(tmp, "linformer_%d" % n)
            random_model(p, "linformer", {"proj_len": 32, "max_len": n})
            rc, o = run([LIND, "info", "--model", p, "--backend", "cpu"])
            sb = int(re.search(r"state_bytes:\s+(\d+)", o).group(1))
            r = bench(p, 1, min(n - 1, 1000), 1.0)
            out["linformer_N%d" % n] = {"N": n, "state_bytes": sb, "us_token_b1": r[1][0],
                                        "cpu_us_token_b1": r[1][2], "params": int(field(o, "parameters")),
                                        "model_file_bytes": os.path.getsize(os.path.join(p, "model.safetensors")),
                                        "load": loadavg()}
            save(db, "_cost")
            print("linformer", n, out["linformer_N%d" % n], flush=True)


def fmt(x, spec):
    return "—" if x is None else spec % x


def table():
    db = load()
    rows = [r for r in db if not r.startswith("_")]
    order = ["linear", "aft", "delta", "window", "aft_local", "aft_conv", "performer", "cosformer", "retnet",
             "linformer", "window_linear"]
    rows.sort(key=lambda r: order.index(r) if r in order else len(order))
    L = ["# Mixer kinds side by side (tools/mixers_table.sh)", "",
         "Generated by `tools/mixers_measure.py table` from bench/results/mixers.json; every command and its",
         "full output, with the time and the machine's load average, is in bench/results/mixers_raw.txt.",
         "Method and discussion: docs/MIXERS.md.", "",
         "| row | mixers | params | held-out bits/byte (one stream) | held-out, fresh 128-token segments "
         "| after 100,000 generated | µs/token batch 1 (CPU-µs) | tokens/s batch 64 (per CPU-s) | state bytes/session |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = db[r]
        hs = fmt(d.get("heldout_stream"), "%.4f")
        if d.get("heldout_stream") is None and d.get("heldout_stream_note"):
            hs = "refused (max length)"
        ag = fmt(d.get("after_generate"), "%.4f")
        if d.get("after_generate") is None and d.get("after_generate_note"):
            ag = "refused (max length)"
        L.append("| %s | %s | %s | %s | %s | %s | %s (%s) | %s (%s) | %s |" % (
            r, d.get("mixers", ""), fmt(d.get("params"), "%d"), hs, fmt(d.get("heldout_segments"), "%.4f"), ag,
            fmt(d.get("us_token_b1"), "%.0f"), fmt(d.get("cpu_us_token_b1"), "%.0f"),
            fmt(d.get("tok_s_b64"), "%.0f"), fmt(d.get("cpu_tok_s_b64"), "%.0f"),
            "{:,}".format(d["state_bytes"]) if d.get("state_bytes") else "—"))
    pre = [r for r in rows if db[r].get("prefix")]
    if pre:
        L += ["", "## Held-out bits/byte of the first n bytes, one session (training window: 128)", "",
              "| row | " + " | ".join("n = %d" % n for n in PREFIXES) + " |",
              "|---|" + "---|" * len(PREFIXES)]
        for r in pre:
            p = db[r]["prefix"]
            L.append("| %s | %s |" % (r, " | ".join(fmt(p.get(str(n)), "%.3f") for n in PREFIXES)))
    c = db.get("_cost", {})
    if c:
        L += ["", "## Cost as the window w or the Linformer length N grows (random weights, same shape)", "",
              "| model | state bytes/session | µs/token batch 1 (CPU-µs) | parameters | file bytes |",
              "|---|---|---|---|---|"]
        for k in sorted(c, key=lambda k: (k.split("_")[0], int(re.sub(r"\D", "", k.split("_")[1])))):
            e = c[k]
            L.append("| %s | {:,} | %.0f (%s) | %s | %s |".format(e["state_bytes"]) % (
                k.replace("_w", " w=").replace("_N", " N="), e["us_token_b1"],
                fmt(e.get("cpu_us_token_b1"), "%.0f"), fmt(e.get("params"), "%d"),
                fmt(e.get("model_file_bytes"), "%d")))
    with open(os.path.join(RES, "mixers.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("quality", "prefix", "speed", "cost", "table"):
        raise SystemExit(__doc__)
    os.makedirs(RES, exist_ok=True)
    {"quality": lambda: quality(sys.argv[2:]), "prefix": lambda: prefix(sys.argv[2:]),
     "speed": lambda: speed(sys.argv[2:]),
     "cost": cost, "table": table}[sys.argv[1]]()


if __name__ == "__main__":
    main()
