#!/usr/bin/python3
"""tools/rwkv7_fixtures.py — the committed RWKV-7 parity fixtures.

Writes, under OUTDIR (tests/fixtures/rwkv7), one directory per fixture:

  <name>/model/RWKV-x070-<name>.pth   a random x070 model in BlinkDL's .pth
                                      layout (tools/rwkv7_ref.py make_pth)
  <name>/model/rwkv_vocab_v20230424.txt
                                      a small World vocabulary (a copy of
                                      tests/fixtures/tokenizer/world_small.txt,
                                      266 ids: the model's vocab is larger)
  <name>/tokens.i32    512 random token ids, int32 LE (fed from the zero state)
  <name>/logits.f32    512 x vocab float32 LE: row t = logits after tokens[0..t],
                       computed in float64 by tools/rwkv7_ref.py on the stored
                       (rounded) weights
  <name>/fixture.json  shape, seed, and how far plausible mistakes move the
                       logits (each mistake must move some fixture's logits
                       by more than 10x the C test's tolerance)

Fixtures (odd head counts, every storage type, LoRA widths that differ per
kind and per model):
  a_f32    C 48 = 3 heads x 16, 2 layers, ffn 160, LoRA w/a/v/g 16/8/8/24,
           vocab 280, FloatStorage, a plain dict
  b_bf16   C 40 = 5 heads x 8, 3 layers, ffn 128, LoRA 8/12/4/16, vocab 300,
           BFloat16Storage, an OrderedDict with _metadata (a BUILD opcode)
  c_f16    C 32 = 1 head x 32, 1 layer, ffn 96, LoRA 4/4/4/8, vocab 272,
           HalfStorage

It also writes the seeds of tests/fuzz_pth.c under tests/fuzz_seeds/fuzz_pth/
(a 0 flag byte, then a file torch.save wrote):
  x070_tiny     a whole x070 model (C 4, 2 heads, 1 layer, f32), the
                driver's valid base for its patch mode
  ordered_bf16  an OrderedDict with _metadata (BUILD), BFloat16Storage
  f16_shared    two f16 views of one storage (offset, shared persistent id)
  patch_base    flag byte 2 and no patches: the base itself, in patch mode

    usage: tools/rwkv7_fixtures.py [OUTDIR]     (default tests/fixtures/rwkv7)
"""
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rwkv7_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POSITIONS = 512
TOL = 1e-5   # the C test's
VARIANTS = ["kk_after_ka", "bonus_raw_k", "no_vres", "lnx_eps", "new_s"]
FIXTURES = [
    dict(name="a_f32", vocab=280, C=48, H=3, layers=2, ffn=160, dw=16, da=8, dv=8, dg=24, dtype="f32", seed=71,
         ordered=False),
    dict(name="b_bf16", vocab=300, C=40, H=5, layers=3, ffn=128, dw=8, da=12, dv=4, dg=16, dtype="bf16", seed=72,
         ordered=True),
    dict(name="c_f16", vocab=272, C=32, H=1, layers=1, ffn=96, dw=4, da=4, dv=4, dg=8, dtype="f16", seed=73,
         ordered=False),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "rwkv7")
    caught = {}
    for fx in FIXTURES:
        d = os.path.join(out, fx["name"])
        md = os.path.join(d, "model")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(md)
        pth = os.path.join(md, "RWKV-x070-%s.pth" % fx["name"])
        rwkv7_ref.make_pth(pth, fx["vocab"], fx["C"], fx["H"], fx["layers"], fx["ffn"], fx["dw"], fx["da"], fx["dv"],
                           fx["dg"], DTYPES[fx["dtype"]], fx["seed"], fx["ordered"])
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "world_small.txt"),
                    os.path.join(md, "rwkv_vocab_v20230424.txt"))
        toks = np.random.RandomState(fx["seed"]).randint(0, fx["vocab"], POSITIONS).astype("<i4")
        toks.tofile(os.path.join(d, "tokens.i32"))
        sd = rwkv7_ref.load(pth)
        ref = rwkv7_ref.logits(sd, toks)
        ref.numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
        moves = {}
        for v in VARIANTS:
            if v == "no_vres" and fx["layers"] < 2:
                continue
            e, _ = rwkv7_ref.rel_err(rwkv7_ref.logits(sd, toks, v), ref)
            moves[v] = float("%.3g" % e)
            caught[v] = max(caught.get(v, 0.0), e)
        meta = dict(fx, positions=POSITIONS, tolerance=TOL, variant_moves=moves, pth_sha256=sha(pth),
                    made_by="tools/rwkv7_fixtures.py")
        with open(os.path.join(d, "fixture.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
        print(fx["name"], "written; mistakes move the logits by", moves)
    for v in VARIANTS:   # every mistake must show in some fixture by far more than the tolerance
        if caught.get(v, 0.0) < 10 * TOL:
            sys.exit("variant %s moves no fixture's logits by 10x the tolerance (%.2e)" % (v, caught.get(v, 0.0)))


def fuzz_seeds():
    import collections
    import tempfile
    out = os.path.join(ROOT, "tests", "fuzz_seeds", "fuzz_pth")
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp()

    def seed(name, write, flag=0):
        path = os.path.join(tmp, name + ".pth")
        write(path)
        with open(path, "rb") as f, open(os.path.join(out, name), "wb") as o:
            o.write(bytes([flag]) + f.read())

    seed("x070_tiny", lambda p: rwkv7_ref.make_pth(p, 8, 4, 2, 1, 4, 1, 1, 1, 1, torch.float32, seed=5))

    def ordered(p):
        d = collections.OrderedDict([("emb.weight", torch.arange(4.0).reshape(2, 2).bfloat16()),
                                     ("blocks.0.att.r_k", torch.ones(1, 2))])
        d._metadata = collections.OrderedDict([("", {"version": 1})])
        torch.save(d, p)
    seed("ordered_bf16", ordered)

    def shared(p):
        base = torch.arange(6.0).half()
        torch.save({"a": base[2:], "b": base[:3].view(3, 1)}, p)
    seed("f16_shared", shared)
    with open(os.path.join(out, "patch_base"), "wb") as o:
        o.write(bytes([2]))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
    fuzz_seeds()
