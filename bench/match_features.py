#!/usr/bin/env python3
"""The next lever, measured before it is built: match features, the byte that followed the last earlier occurrence
of the current k bytes in the same file.

Not a kit feature (yet): a prototype beside the kit, so the lever can be priced before it changes the plan, the model,
the data, the score, the replay and generation. Held-out source code repeats itself at ranges far beyond the model's
128-byte window (identifiers, imports, whole blocks); xz's window is megabytes. For each order k in --orders, every
position p of every file gets one code: the byte after the most recent q < p in the same file whose k bytes ending at
q equal the k bytes ending at p (256 when there is none). On the default corpus's held-out files, order 8 has a match
at 62% of positions and it is the next byte 86% of the time; order 16: 39% and 91%; order 32: 19% and 95%.

The model is the default `DormouseModel` (keyed init, n-gram tables, `build_parts`), and each order adds an
embedding of its code to the loop's input (zeros at init) and, with --gate, a learned scalar added to the logit of
the byte its code names. It trains `TrainCfg`'s schedule for --steps with a plain loop on `fit`'s batches (batch i+1
for step i: one warm-up probe batch) and is scored like `dormouse.score.score` (sliding windows of seq_len, stride
half of it, each held-out file a stream from the start byte, its codes computed from that stream alone) on the keyed
held-out sample of --score-bytes, the sample the defaults sweep (the score chapter) scored its rows on.

  PYTHONPATH=$PWD MKL_CBWR=AUTO,STRICT python bench/match_features.py --orders 4 8 16 32 --gate --steps 1800
  PYTHONPATH=$PWD MKL_CBWR=AUTO,STRICT python bench/match_features.py --orders --steps 1800   # no match features
"""

import argparse, json, math, time
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from dormouse.config import TrainCfg
from dormouse.data import _batch_index, load_corpus, score_sample
from dormouse.model import N_VOCAB
from dormouse.numerics import run_scope
from dormouse.parts import build_parts
from dormouse.rng import splitmix64
from dormouse.score import START_BYTE, windows
from dormouse.step import lr_at

PRIME = np.uint64(0x100000001B3)
NONE = 256  # the code of a position whose k bytes never occurred earlier in its file


def match_codes(raw: np.ndarray, starts: np.ndarray, orders: list[int]) -> np.ndarray:
    "Codes [len(orders), len(raw)]: the byte after the last earlier same-file occurrence of the k bytes ending here."
    n = len(raw)
    fid = np.zeros(n, dtype=np.uint64)
    fid[starts[1:]] = 1
    fid = np.cumsum(fid)
    first = np.asarray(starts, dtype=np.int64)[fid.astype(np.int64)]
    pos = np.arange(n, dtype=np.int64)
    poly, k = {1: raw.astype(np.uint64) + np.uint64(1)}, 1
    while k < max(orders):  # polynomial hash of the k bytes ending at p, by doubling
        shifted = np.zeros(n, dtype=np.uint64)
        shifted[k:] = poly[k][:-k]
        poly[2 * k] = shifted * (PRIME ** np.uint64(k)) + poly[k]
        k *= 2
    out = np.full((len(orders), n), NONE, dtype=np.int64)
    for oi, k in enumerate(orders):
        if k not in poly:
            raise SystemExit(f"--orders: {k} is not a power of two")
        key = splitmix64(poly[k] ^ splitmix64(fid + np.uint64(0x9E37)))  # the same k bytes in the same file
        whole = pos - k + 1 >= first  # the k bytes lie inside the file
        key[~whole] = splitmix64(pos[~whole].astype(np.uint64) ^ np.uint64(0xABCDEF))
        o = np.argsort(key, kind="stable")  # equal keys in position order: each one's predecessor is the last match
        same = key[o[1:]] == key[o[:-1]]
        cur, prev = o[1:][same], o[:-1][same]
        ok = whole[cur]
        out[oi, cur[ok]] = raw[prev[ok] + 1]
    return out


class MatchModel(nn.Module):
    "The default model with each order's code embedded into its input and, with `gate`, a logit bonus for the code."

    def __init__(self, base: nn.Module, n_orders: int, d: int, gate: bool):
        super().__init__()
        self.base = base
        self.match_emb = nn.Parameter(torch.zeros(n_orders, NONE + 1, d))
        self.gate = nn.Parameter(torch.zeros(n_orders)) if gate else None

    def forward(self, x, depth, ngram, codes):
        b = self.base
        h = F.embedding(x, b.emb) + b.ngram_proj(ngram)
        for o in range(codes.shape[0]):
            h = h + F.embedding(codes[o], self.match_emb[o])
        h = b.prelude(h)
        for _ in range(depth):
            h = b.core(h)
        logits = b.head(b.norm(b.coda(h)))
        if self.gate is not None:
            for o in range(codes.shape[0]):
                logits = logits + self.gate[o] * F.one_hot(codes[o], NONE + 1)[..., :NONE].to(logits.dtype)
        return logits


def train(mm, parts, corpus, raw, codes, cfg) -> list[float]:
    "The plain loop on fit's batches: AdamW on the model, the tables' own sparse step."
    opt = torch.optim.AdamW(mm.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                            foreach=False)
    losses, t0 = [], time.time()
    for s in range(cfg.steps):
        k = (s + 1) * cfg.batch + np.arange(cfg.batch, dtype=np.int64)
        idx = _batch_index(k, cfg.seq_len, corpus.n_train, cfg.data_order, cfg.seed)
        xy = torch.from_numpy(raw[idx].astype(np.int64))
        x, y = xy[:, :-1], xy[:, 1:]
        logits = mm(x, cfg.model.depth, parts.tables.lookup(x), codes[:, idx[:, :-1]])
        loss = F.cross_entropy(logits.reshape(-1, N_VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in mm.parameters() if p.grad is not None], cfg.grad_clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, s)
        opt.step()
        parts.tables.step()
        losses.append(loss.item())
        if s % 200 == 0:
            print(f"step {s}: {loss.item() / math.log(2):.3f} bits/byte, {time.time() - t0:.0f} s", flush=True)
    return losses


@torch.no_grad()
def score_units(mm, parts, corpus, sample, orders, cfg) -> tuple[float, int]:
    "(bits, bytes) over the sample: sliding windows, each unit a stream from the start byte, its own codes."
    window, tot, nb = cfg.seq_len, 0.0, 0
    mm.eval()
    for _, off, n in sample.units:
        stream = np.frombuffer(bytes([START_BYTE]) + bytes(corpus.data[off:off + n]), dtype=np.uint8)
        codes = torch.from_numpy(match_codes(stream, np.array([0]), orders)) if orders else None
        for start, lo, hi in windows(n, window, cfg.seq_len // 2):
            piece = torch.from_numpy(stream[start:start + window + 1].astype(np.int64))[None]
            x, y = piece[:, :-1], piece[:, 1:]
            c = codes[:, None, start:start + x.shape[1]] if orders else torch.zeros(0, *x.shape, dtype=torch.int64)
            lp = F.log_softmax(mm(x, cfg.model.depth, parts.tables.lookup(x), c).float(), -1).gather(-1, y[..., None])
            tot += float(-lp[0, lo - start:hi - start, 0].double().sum()) / math.log(2)
            nb += hi - lo
    return tot, nb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orders", type=int, nargs="*", default=[4, 8, 16, 32], help="powers of two; none: no features")
    ap.add_argument("--gate", action="store_true", help="also a learned logit bonus for each order's byte")
    ap.add_argument("--steps", type=int, default=TrainCfg().steps)
    ap.add_argument("--threads", type=int, default=1, help="the bits do not depend on it (MKL_CBWR=AUTO,STRICT)")
    ap.add_argument("--score-bytes", type=int, default=1 << 20, help="the keyed held-out sample scored")
    a = ap.parse_args(argv)
    start = max(50, round(0.15 * a.steps))  # the sweep's schedule: 1,800 steps -> TrainCfg's 270 / 1,530
    cfg = TrainCfg(threads=a.threads, steps=a.steps, decay_start=start, decay_steps=max(1, a.steps - start))
    corpus = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
    raw = np.frombuffer(bytes(corpus.data), dtype=np.uint8)
    t = time.time()
    starts = np.array([f["offset"] for f in corpus.manifest["files"]]) if corpus.manifest else np.array([0])
    codes = torch.from_numpy(match_codes(raw, starts, a.orders)) if a.orders else torch.zeros(0, len(raw)).long()
    t_codes = time.time() - t
    with run_scope(cfg.threads, "cpu"):
        parts = build_parts(cfg)
        mm = MatchModel(parts.model, len(a.orders), cfg.model.d_model, a.gate)
        t = time.time()
        losses = train(mm, parts, corpus, raw, codes, cfg)
        t_train = time.time() - t
        sample = score_sample(corpus, a.score_bytes)
        bits, nb = score_units(mm, parts, corpus, sample, a.orders, cfg)
    print(json.dumps({"orders": a.orders, "gate": a.gate, "steps": a.steps, "codes_s": round(t_codes, 1),
                      "train_s": round(t_train, 1), "score_bpb": round(bits / nb, 4), "score_bytes": nb,
                      "train_bpb_last100": round(sum(losses[-100:]) / len(losses[-100:]) / math.log(2), 4)}))


if __name__ == "__main__":
    main()
