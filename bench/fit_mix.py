#!/usr/bin/env python3
"""Fit the score's count mix (`dormouse.mix.MIX`) on the dev split, which the final score never reads.

A model of the default plan trained on the dev corpus (`bench/score_levers.py train ref --steps 1000`) scores the
dev units (static and adapting, in consecutive windows as the final score does); the count model counts them against
the dev corpus's training text; the mix's parameters are fitted by Adam to the static bits (every dev byte, full
batch), printed as a `Mix`, and checked: fitted on half the dev files and scored on the other half, and the rounded
constants scored on all of them.

  python bench/score_levers.py train ref --steps 1000 --threads 2 --out dev.safetensors   # about 3 minutes
  python bench/fit_mix.py dev.safetensors --bits dev_bits.npz   # about 12 minutes: the bits, the counts, three fits

Measured 2026-12-05 on the 1,000-step dev model (81 dev files, 1,655,155 bytes; the model 0.9645 static, 0.9454
adapting), mixed static across the halves / on all of them / adapting on all of them, --orders 16 (MIX): 0.8219 /
0.8197 / 0.8102. Earlier the same day, on an 1,800-step dev model at a stride of 64 (0.9123 static, 0.8923 adapting):
--orders 8: 0.8226 / 0.8217 / 0.8101; --orders 12: 0.8047 / 0.8040 / 0.7930; --orders 16: 0.7992 / 0.7984 / 0.7874.
"""
import argparse, json, sys, time
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file
import dormouse.mix as mx
from dormouse.config import cfg_from_dict
from dormouse.data import corpus_for
from dormouse.numerics import run_scope
from dormouse.parts import build_parts
from dormouse.score import ADAPT, adaptive_bits, codes_for
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from score_levers import dev_units  # noqa: E402


def nn_bits(path, bits_file):
    "Static and adaptive bits of every dev byte, from the dev model (cached in bits_file)."
    with safe_open(path, "pt") as f:
        cfg = cfg_from_dict(json.loads(f.metadata()["cfg"]))
    corpus = corpus_for(cfg)
    units = dev_units(corpus)
    texts = [bytes(corpus.data[o:o + n]) for _, o, n in units]
    try:
        z = np.load(bits_file)
        return corpus, texts, z["static"], z["adapt"]
    except (OSError, KeyError):
        pass
    sd = load_file(path)
    with run_scope(2, "cpu"):
        parts = build_parts(cfg)
        parts.model.load_state_dict({k[6:]: v for k, v in sd.items() if k.startswith("model.")})
        parts.tables.weight.copy_(sd["tables.weight"])
        m = cfg.model
        codes = codes_for(corpus, texts, m.match_orders, m.match_train, [o for _, o, _ in units])
        st, ad = adaptive_bits(parts.model, parts.tables, texts, cfg.seq_len, cfg.seq_len, m.depth, codes, ADAPT)
    st, ad = np.concatenate(st), np.concatenate(ad)
    np.savez(bits_file, static=st, adapt=ad)
    return corpus, texts, st, ad


def fit(feats, bits, idx, K, steps):
    "Adam on the mean mixed bits of the bytes idx: the count model's shape and the mixing logits."
    (p0, rows, b, ob) = feats
    prm = [torch.zeros(K, dtype=torch.float64, requires_grad=True) for _ in range(2)] + \
        [torch.zeros((K + 1) * mx.N_BUCKETS, dtype=torch.float64, requires_grad=True),
         torch.zeros(K + 1, dtype=torch.float64, requires_grad=True)]
    opt = torch.optim.Adam(prm, lr=0.05)
    pnn = torch.exp2(-torch.from_numpy(bits[idx]))
    for _ in range(steps):
        p_cm = p0[idx]
        for k in range(K):
            p_cm = mx.chain_step(p_cm, *(r[k][idx] for r in rows), torch.exp(prm[0][k]), torch.exp(prm[1][k]))
        w = torch.sigmoid(prm[2][b[idx]] + prm[3][ob[idx]])
        loss = -torch.log2(w * pnn + (1 - w) * p_cm).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    r = lambda t: tuple(float(f"{v:.4g}") for v in t.tolist())
    return mx.Mix(r(torch.exp(prm[0])), r(torch.exp(prm[1])), r(prm[2]), r(prm[3]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--bits", default="dev_bits.npz")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--orders", type=int, default=mx.MIX.orders)
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    t0 = time.time()
    corpus, texts, st, ad = nn_bits(a.path, a.bits)
    print(f"dev units: {len(texts)} files, {sum(map(len, texts)):,} bytes; model static {st.mean():.4f}, "
          f"adapting {ad.mean():.4f} ({time.time() - t0:.0f} s)", flush=True)
    train, n = corpus.data, corpus.n_train  # read a chunk at a time
    K = a.orders
    t0 = time.time()
    got = list(mx.order_counts(train, texts, K, n))
    print(f"counts, orders 1..{K}: {time.time() - t0:.0f} s", flush=True)
    rows = [torch.from_numpy(np.stack([g[i] for g in got]).astype(np.float64)) for i in range(1, 7)]
    b, ob = mx.buckets((g[2] + g[5], g[5]) for g in got)
    feats = (torch.from_numpy(mx.order0(train, texts, n)), rows, torch.from_numpy(b), torch.from_numpy(ob))
    uid = np.repeat(np.arange(len(texts)), [len(t) for t in texts])
    halves = [np.nonzero(uid % 2 == h)[0] for h in (0, 1)]
    cross = 0.0
    for h in (0, 1):
        m = fit(feats, st, torch.from_numpy(halves[h]), K, a.steps)
        p_cm, bb, obb = mx.count_model(train, [t for i, t in enumerate(texts) if i % 2 != h], m, n)
        cross += np.concatenate(mx.mixed_bits([st[halves[1 - h]]], (p_cm, bb, obb), m)).sum()
    print(f"fitted on half the dev files, scored on the other half: mixed static {cross / len(st):.4f}", flush=True)
    m = fit(feats, st, torch.arange(len(st)), K, a.steps)
    counted = mx.count_model(train, texts, m, n)
    print(f"count model alone {-np.log2(counted[0]).mean():.4f}; mixed static "
          f"{np.concatenate(mx.mixed_bits([st], counted, m)).mean():.4f}, adapting "
          f"{np.concatenate(mx.mixed_bits([ad], counted, m)).mean():.4f}", flush=True)
    print(m)


if __name__ == "__main__":
    main()
