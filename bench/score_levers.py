#!/usr/bin/env python3
"""The levers on the final score, swept on a sample the final score never reads.

The dev split: the default corpus opened with `holdout_frac` 0.10 holds out the 5% the final score reads (the held-out
files of the default run are ranked first by the same hash) and the next 5%. A candidate trains on that corpus's
training split, which holds neither, and is scored on the second 5% only (81 files, 1.66 MB): the dev units. Bits/byte
after N steps are a pure function of the plan, so they hold on a busy machine; the seconds printed do not.

  python bench/score_levers.py train CAND --steps 900 --out W.safetensors   # CAND: as in bench/sweep_defaults.py
  python bench/score_levers.py score W.safetensors [--stride 64] [--every 4] [--adapt top|all] [--lr 1e-3]

`score` prints the static figure and, with `--adapt`, the adaptive one: `top` is the kit's (`score.adaptive_bits`: a
copy of the coda and head trained with Adam after each group of `--windows` windows), `all` trains a copy of every
parameter the same way (a full backward per group; the kit does not offer it: it costs three forwards, not one).
`--every K` scores every K-th dev unit (a quarter with 4).
"""

import argparse, copy, json, math, sys, time
from pathlib import Path
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from dormouse.config import cfg_from_dict, cfg_to_dict
from dormouse.data import corpus_for, load_corpus
from dormouse.numerics import run_scope
from dormouse.parts import build_parts
from dormouse.score import (Adapt, _bits, _rows, _streams, adaptive_bits, byte_bits, codes_for, ratio_se,
                            windows)
from dormouse.step import pre_batches, run_probes, train_step
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from sweep_defaults import make_cfg, schedule  # noqa: E402  (the candidates and the schedule of the defaults sweep)

DEV_FRAC = 0.10  # the dev corpus's held-out fraction: the final score's 5%, then the dev units


def dev_units(corpus) -> list[tuple]:
    "The dev corpus's held-out files that the default corpus does not hold out: (name, offset, bytes)."
    test = {f["path"] for f in load_corpus("", 0.05, 128).manifest["files"] if f["split"] == "held"}
    return [(f["path"], f["offset"], f["bytes"]) for f in corpus.manifest["files"]
            if f["split"] == "held" and f["path"] not in test]


def train(a) -> None:
    name, cfg = make_cfg(a.cand, a.threads, steps=a.steps, holdout_frac=DEV_FRAC, **schedule(a.steps))
    corpus = corpus_for(cfg)
    assert not set(u[0] for u in dev_units(corpus)) & {f["path"] for f in corpus.manifest["files"]
                                                       if f["split"] == "train"}
    t0, losses = time.time(), []
    with run_scope(cfg.threads, "cpu"):
        parts = build_parts(cfg)
        run_probes(parts, corpus, cfg, device="cpu", log=lambda m: None)
        for s in range(cfg.steps):
            losses.append(train_step(parts, corpus, cfg, s, probe_batches=pre_batches(cfg), device="cpu")["loss"])
    save_file({**{f"model.{k}": v.contiguous() for k, v in parts.model.state_dict().items()},
               "tables.weight": parts.tables.weight.contiguous()}, a.out,
              metadata={"cfg": json.dumps(cfg_to_dict(cfg))})
    print(json.dumps({"cand": a.cand, "out": a.out, "steps": cfg.steps, "train_s": round(time.time() - t0, 1),
                      "last100_bpb": round(sum(losses[-100:]) / len(losses[-100:]) / math.log(2), 4)}), flush=True)


def all_adaptive(model, tables, units, window, stride, depth, codes, adapt: Adapt) -> list:
    "Bits of every byte from a copy of the whole model trained (Adam) on each unit's bytes once scored."
    streams, out = _streams(units), [np.zeros(len(b)) for b in units]
    for u, b in enumerate(units):
        mine = copy.deepcopy(model)
        opt = torch.optim.Adam(mine.parameters(), lr=adapt.lr, foreach=False)
        jobs = [(u, w) for w in windows(len(b), window, stride)]
        for i in range(0, len(jobs), adapt.windows):
            chunk = jobs[i:i + adapt.windows]
            x, y, mc = _rows(streams, codes, chunk, adapt.windows, window, "cpu")
            with torch.no_grad():
                feats = tables.lookup(x)
            bits = _bits(mine(x, depth, feats, match=mc), y)
            keep = torch.zeros(bits.shape, dtype=torch.bool)
            for r, (_, (start, lo, hi)) in enumerate(chunk):
                keep[r, lo - start:hi - start] = True
                out[u][lo:hi] = bits[r, lo - start:hi - start].detach().numpy()
            opt.zero_grad(set_to_none=True)
            bits[keep].mean().backward()
            opt.step()
    return out


def score(a) -> None:
    with safe_open(a.path, "pt") as f:
        cfg = cfg_from_dict(json.loads(f.metadata()["cfg"]))
    corpus = corpus_for(cfg)
    sd = load_file(a.path)
    units = dev_units(corpus)[::a.every]
    texts = [bytes(corpus.data[o:o + n]) for _, o, n in units]
    stride = a.stride or cfg.seq_len
    t0 = time.time()
    with run_scope(a.threads, "cpu"):
        parts = build_parts(cfg)
        parts.model.load_state_dict({k[6:]: v for k, v in sd.items() if k.startswith("model.")})
        parts.tables.weight.copy_(sd["tables.weight"])
        parts.model.eval()
        m = cfg.model
        codes = codes_for(corpus, texts, m.match_orders, m.match_train and bool(m.match_orders),
                          [o for _, o, _ in units])
        how = (parts.model, parts.tables, texts, cfg.seq_len, stride, m.depth, codes)
        adapt = Adapt(lr=a.lr, windows=a.windows)
        if a.adapt == "top":
            static, adaptive = adaptive_bits(*how, adapt)
        else:
            static = byte_bits(*how)
            adaptive = all_adaptive(*how, adapt) if a.adapt == "all" else None
    n = [len(t) for t in texts]
    row = {"path": a.path, "units": len(units), "bytes": sum(n), "stride": stride, "s": round(time.time() - t0, 1)}
    for what, bits in (("static", static), (f"adaptive_{a.adapt}", adaptive)):
        if bits is not None:
            per = [float(b.sum()) for b in bits]
            row[what] = round(sum(per) / sum(n), 4)
            row[what + "_se_files"] = round(ratio_se(per, n, math.inf), 4)
    if a.adapt:
        row.update(lr=a.lr, windows=a.windows)
    print(json.dumps(row), flush=True)
    if a.record:  # the row under its name in the result file the chapters print from
        out = Path(__file__).parent / "results" / "score_levers.json"
        got = json.loads(out.read_text()) if out.exists() else {"rows": {}}
        got["rows"][a.record] = {**row, "date": time.strftime("%Y-%m-%d")}
        out.write_text(json.dumps(got, indent=1) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("cand")
    t.add_argument("--steps", type=int, default=900)
    t.add_argument("--threads", type=int, default=1, help="bits do not depend on it (AUTO,STRICT); 1 lets two run")
    t.add_argument("--out", required=True)
    s = sub.add_parser("score")
    s.add_argument("path")
    s.add_argument("--stride", type=int, default=0, help="0: the window, as the final score")
    s.add_argument("--every", type=int, default=1, help="score every K-th dev unit")
    s.add_argument("--adapt", choices=["", "top", "all"], default="")
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--windows", type=int, default=16)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--record", default="", help="also write the row under this name in bench/results/score_levers.json")
    a = ap.parse_args(argv)
    {"train": train, "score": score}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
