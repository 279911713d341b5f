#!/usr/bin/env python3
"""Which of the default model's operations give the same bits at 1, 2, 3 and 4 threads, under MKL's thread-invariant
mode (default) or MKL's default mode (--mode off), and the default model's state fingerprints over a few steps.

A bits measurement, not a timing: it is load-independent and may run beside other work (it is slow then, not wrong).
Each op runs on fixed inputs of the default model's shapes; "same" means byte-identical output at every thread count.

  python bench/thread_bits.py            # under AUTO,STRICT (what fit applies where it can)
  python bench/thread_bits.py --mode off # MKL's default mode, for contrast
  python bench/thread_bits.py --steps 3  # default-model steps per thread count (0: ops only)
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import torch
import torch.nn.functional as F

from dormouse.numerics import mkl_mode, thread_invariant_mode


def digest(*ts) -> str:
    h = hashlib.sha256()
    for t in ts:
        h.update(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:12]


def op_digests(shapes: dict) -> dict:
    "{op: digest of its output} for each op the default model's step runs, on fixed inputs."
    from dormouse.model import RMSNorm

    g = torch.Generator().manual_seed(0)
    B, T, D, orders, slots, dim = (shapes[k] for k in ("batch", "seq_len", "d_model", "orders", "slots", "dim"))
    x, w = torch.randn(B, T, D, generator=g), torch.randn(D, 4 * D, generator=g)
    tab = torch.randn(orders * slots, dim, generator=g)
    ids = torch.randint(0, orders * slots, (orders, B * T), generator=g)
    norm = RMSNorm(D)
    torch.nn.init.ones_(norm.weight)
    q = x.view(B, 4, T, D // 4)
    out = {"matmul": digest(x @ w), "rmsnorm": digest(norm(x)), "softmax": digest(torch.softmax(x, -1)),
           "attention (sdpa)": digest(F.scaled_dot_product_attention(q, q, q, is_causal=True)),
           "gelu": digest(F.gelu(x)), "cross_entropy": digest(F.cross_entropy(x.view(-1, D), torch.arange(B * T) % D)),
           "n-gram lookup (index_select + sum)": digest(tab[ids.reshape(-1)].view(orders, -1, dim).sum(0))}
    u, inv = torch.unique(ids.reshape(-1), return_inverse=True)
    grads = torch.randn(inv.numel(), dim, generator=g)
    out["n-gram grad (unique + index_add)"] = digest(u, torch.zeros(u.numel(), dim).index_add_(0, inv, grads))
    out["grad norm (vector_norm)"] = digest(torch.linalg.vector_norm(tab))
    out["whole-tensor sum (not in the step)"] = digest(tab.sum())
    p = torch.nn.Parameter(tab[: tab.shape[0] // 2].clone())
    p.grad = tab[tab.shape[0] // 2 :].clone()
    opt = torch.optim.AdamW([p], lr=1e-3, foreach=False)
    opt.step()
    opt.step()
    out["AdamW (foreach=False)"] = digest(p)
    xx = x.clone().requires_grad_(True)
    (norm(xx) @ w).sum().backward()
    out["backward (norm, matmul)"] = digest(xx.grad, norm.weight.grad)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["invariant", "off"], default="invariant")
    ap.add_argument("--threads", default="1,2,3,4")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args(argv)
    if a.mode == "invariant":
        thread_invariant_mode()  # before any product: fixed for the process from here
    from dormouse.config import TrainCfg
    from dormouse.data import load_corpus
    from dormouse.parts import build_parts, state_fingerprint
    from dormouse.step import pre_batches, run_probes, train_step

    torch.use_deterministic_algorithms(True)
    threads = [int(t) for t in a.threads.split(",")]
    cfg = TrainCfg()
    m = cfg.model
    shapes = dict(batch=cfg.batch, seq_len=cfg.seq_len, d_model=m.d_model, orders=len(m.ngram_orders),
                  slots=m.ngram_slots, dim=m.ngram_dim)
    print(f"MKL mode: {mkl_mode()}; threads {threads}; torch {torch.__version__}; shapes {shapes}")
    res = {}
    for n in threads:
        torch.set_num_threads(n)
        res[n] = op_digests(shapes)
    for op in res[threads[0]]:
        same = len({res[n][op] for n in threads}) == 1
        print(f"  {op:40s} {'same' if same else 'DIFFERS'}")
    if a.steps:
        corpus = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
        fps = {}
        for n in threads:
            torch.set_num_threads(n)
            parts = build_parts(cfg)
            run_probes(parts, corpus, cfg, "cpu", log=lambda msg: None)
            fps[n] = []
            for s in range(a.steps):
                train_step(parts, corpus, cfg, s, pre_batches(cfg), "cpu")
                fps[n].append(state_fingerprint(parts))
            print(f"  default model, {n} thread(s): {' '.join(fps[n])}")
        same = len({tuple(v) for v in fps.values()}) == 1
        print(f"default model over {a.steps} steps: {'the same bits' if same else 'DIFFERENT bits'} at {threads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
