#!/usr/bin/python3
"""tools/train.py — train lind's default model on the KJV corpus and export it.

Trains the parallel form (tools/lindmodel.py) on random windows of the
training text, each window [BOS] + bytes with a fresh state, with AdamW and
a warmup + cosine learning-rate schedule, from a fixed seed. Writes into
OUT: config.json, model.safetensors (the tensors lind loads), train_log.csv
(step, seconds, learning rate, train and held-out bits/byte) and
train_steps.csv (every step's learning rate and batch
bits/byte; --lr-from replays it exactly) and final.json (the final figures).

The schedule (warmup, cosine) runs on steps, but on a busy shared machine
it runs on elapsed time whenever that is further along, so training always
ends within --time-budget; final.json says which happened.

    usage: tools/train.py --data data/kjv --out models/default [--steps N ...]
"""
import argparse
import json
import math
import os
import sys
import time

# A shared machine: OpenMP threads that spin while waiting for each other
# lose whole time slices to other processes (15-35 s per step instead of 4
# measured under load); sleeping waits keep two threads useful.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lindmodel  # noqa: E402

LN2 = math.log(2.0)


def windows(data, starts, T):
    """[BOS] + data[s : s+T-1] as input, data[s : s+T] as target."""
    idx = starts[:, None] + torch.arange(T)[None, :]
    y = data[idx]
    x = torch.cat([torch.zeros(len(starts), 1, dtype=torch.long), y[:, :-1]], 1)
    return x, y


@torch.no_grad()
def evaluate(model, data, T, n, batch=8):
    """Mean bits/byte over n evenly spaced windows of T bytes (BOS first)."""
    model.eval()
    starts = torch.linspace(0, len(data) - T - 1, n).long()
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        x, y = windows(data, starts[i:i + batch], T)
        logits = model(x)
        tot += torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1),
                                                 reduction="sum").item()
        cnt += y.numel()
    model.train()
    return tot / cnt / LN2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/kjv")
    ap.add_argument("--out", default="models/default")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--n-heads", type=int, default=6)
    ap.add_argument("--d-ff", type=int, default=768)
    ap.add_argument("--mixers", default="linear,aft,linear,aft")
    ap.add_argument("--kind-config", default="{}", metavar="JSON",
                    help="extra config keys, merged into config.json at the top level (the "
                         "mixer kinds' keys, docs/KINDS.md), e.g. '{\"window\": 64}'")
    ap.add_argument("--ctx", type=int, default=256, help="bytes per training window")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--chunk", type=int, default=16, help="AFT chunk length (speed only)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--final-windows", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--half", action="store_true",
                    help="store the 2-D tensors as F16 in model.safetensors (half the size)")
    ap.add_argument("--lr-from", metavar="CSV",
                    help="replay the per-step learning rates of an earlier run's train_steps.csv "
                         "(its step count, no time budget): the same seed then gives the same model")
    ap.add_argument("--time-budget", type=float, default=2580,
                    help="seconds; if set and the machine is slower than planned, the schedule "
                         "runs on elapsed time instead of steps so training ends within it")
    a = ap.parse_args()

    replay = None
    if a.lr_from:
        with open(a.lr_from) as f:
            replay = [float(line.split(",")[1]) for line in f.readlines()[1:]]
        a.steps, a.time_budget = len(replay), 0
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    train = torch.from_numpy(np.fromfile(os.path.join(a.data, "train.txt"), dtype=np.uint8).astype(np.int64))
    held = torch.from_numpy(np.fromfile(os.path.join(a.data, "heldout.txt"), dtype=np.uint8).astype(np.int64))

    mixers = a.mixers.split(",")
    assert len(mixers) == a.n_layers, "--mixers needs one entry per layer"
    cfg = {"vocab_size": 256, "d_model": a.d_model, "n_layers": a.n_layers, "n_heads": a.n_heads,
           "d_head": a.d_model // a.n_heads, "d_ff": a.d_ff, "mixers": mixers,
           "feature_map": "elu1", "token_shift": True, "norm_eps": 1e-5,
           "aft_variant": "decay", "attn_eps": 1e-6}
    cfg.update(json.loads(a.kind_config))
    model = lindmodel.Model(cfg)
    for blk in model.layers:
        if isinstance(blk.mixer, lindmodel.AftMixer):
            blk.mixer.chunk = a.chunk
    nparams = sum(p.numel() for p in model.parameters())
    print("params %d (%.2f MB fp32), %s" % (nparams, nparams * 4 / 1e6, json.dumps(cfg)), flush=True)

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and "embed" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    def progress(step, elapsed):
        """Fraction of training done: by steps, or by time when that is further."""
        p = step / a.steps
        if a.time_budget:
            p = max(p, elapsed / a.time_budget)
        return p

    def lr_at(step, p):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        p0 = a.warmup / a.steps
        q = min(1.0, max(0.0, (p - p0) / (1.0 - p0)))
        return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * q))

    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "train_log.csv"), "w")
    log.write("step,seconds,lr,train_bpb,heldout_bpb\n")
    t0 = time.time()
    run_loss, run_n, step, time_bound, per_step = 0.0, 0, 0, False, []
    for step in range(a.steps):
        p = progress(step, time.time() - t0)
        lr = replay[step] if replay else lr_at(step, p)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train) - a.ctx - 1, (a.batch,), generator=gen)
        x, y = windows(train, starts, a.ctx)
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bits = loss.item() / LN2
        per_step.append("%d,%r,%.4f\n" % (step + 1, lr, bits))
        run_loss += bits
        run_n += 1
        time_bound = time_bound or bool(a.time_budget and (time.time() - t0) / a.time_budget > (step + 1) / a.steps)
        last = step == a.steps - 1 or progress(step + 1, time.time() - t0) >= 1.0
        if (step + 1) % a.eval_every == 0 or last:
            hb = evaluate(model, held, a.ctx, a.eval_windows)
            el = time.time() - t0
            log.write("%d,%.1f,%.6f,%.4f,%.4f\n" % (step + 1, el, lr, run_loss / run_n, hb))
            log.flush()
            print("step %5d  %6.0fs  lr %.2e  train %.3f  heldout %.3f bits/byte"
                  % (step + 1, el, lr, run_loss / run_n, hb), flush=True)
            run_loss, run_n = 0.0, 0
        if last:
            break
    train_s = time.time() - t0

    with open(os.path.join(a.out, "train_steps.csv"), "w") as f:
        f.write("step,lr,train_bpb\n")
        f.writelines(per_step)
    tensors = model.export_tensors()
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    lindmodel.save_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a.half)
    final_hb = evaluate(model, held, a.ctx, a.final_windows)
    final = {"seed": a.seed, "steps": step + 1, "steps_planned": a.steps,
             "schedule": ("replayed from %s" % a.lr_from) if replay else
                         "elapsed time (machine slower than planned)" if time_bound else "steps",
             "time_budget_seconds": a.time_budget, "batch": a.batch, "ctx": a.ctx,
             "tokens_trained": (step + 1) * a.batch * a.ctx, "lr": a.lr, "min_lr": a.min_lr,
             "warmup": a.warmup, "weight_decay": a.wd, "params": nparams,
             "train_seconds": round(train_s, 1), "threads": a.threads,
             "weights_stored": "F16 (2-D tensors)" if a.half else "F32",
             "heldout_bpb_windows": round(final_hb, 4),
             "heldout_windows": "%d windows of %d bytes, each from a fresh state" % (a.final_windows, a.ctx),
             "model_bytes": os.path.getsize(os.path.join(a.out, "model.safetensors")),
             "torch": torch.__version__}
    with open(os.path.join(a.out, "final.json"), "w") as f:
        json.dump(final, f, indent=1)
        f.write("\n")
    print("done: %s" % json.dumps(final), flush=True)


if __name__ == "__main__":
    main()
