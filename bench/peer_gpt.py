#!/usr/bin/env python3
"""dormouse's default run beside a plain GPT trained for the same wall-clock time, both scored like a compressor.

The peer is a standard pre-norm GPT written here from scratch: learned token and position embeddings, `n_layer`
blocks of LayerNorm -> multi-head causal self-attention -> residual, LayerNorm -> GELU MLP (4x) -> residual, a final
LayerNorm and a head tied to the token embedding; AdamW (weight decay on matrices only), linear warm-up then cosine
decay to a tenth of the peak. Its width is the default model's `d_model` and its depth the number of layers that
brings its parameters closest to the default model's (the n-gram tables are not counted: they are lookups, not
arithmetic). It trains with a plain loop on batches of the same shape (`batch` x `seq_len`) cut at uniformly random
offsets of the same training split, at the same thread count, for the wall-clock seconds dormouse's run took. Because
a time budget fixes no step count, its schedule runs on elapsed time: warm-up over the first 2% of the budget, cosine
over the rest.

dormouse trains as `dormouse train` does: `fit(TrainCfg())` with every guarantee on (checkpoints committed in the
background, state fingerprints, in-loop evals, the pinned plan and environment). Its wall time is fit's, from its
start to its return; the GPT gets exactly that many seconds of its loop, once per peak learning rate of a sweep
(`--lrs`, by default three around today's 1e-3), and its best run is the one compared. Every model is scored by
`dormouse.score.score` on the same held-out sample (the bytes the compressors get), at the same window (`seq_len`) and
stride, statically (no adaptation). Prints the sweep's figures, dormouse's, their ratio (dormouse / the best GPT; target
<= 0.7) and xz -9e on the same bytes.

  python bench/peer_gpt.py                      # the default run, then the GPT for as long, at each of 3 LRs
  python bench/peer_gpt.py --budget 20 --steps 60 --score-bytes 60000 --lrs 1e-3   # a smoke run: all short
  python bench/peer_gpt.py --run-dir runs/default   # score a finished run; the GPT for as long as its loop took

A wall-clock comparison is only as good as the machine's quiet: run it alone (it prints the load average), and
compare its two step rates, not its absolute times, when it was not.
"""

import argparse, math, os, sys, tempfile, time
from pathlib import Path
import torch
import torch.nn.functional as F
from torch import nn
from dormouse.config import TrainCfg
from dormouse.baselines import compressor_baselines
from dormouse.data import corpus_for
from dormouse.heldout import score_sample
from dormouse.infer import load_model_weights
from dormouse.numerics import run_scope, thread_invariant_mode
from dormouse.parts import build_parts
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.score import score
from dormouse.train import fit


class Block(nn.Module):
    "Pre-norm block: x + attn(ln(x)), x + mlp(ln(x))."

    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    "A plain byte-level GPT: learned positions, pre-norm blocks, tied head."

    def __init__(self, d: int, n_layer: int, n_head: int, block: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln = nn.LayerNorm(d)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith(("proj.weight", "down.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, x, depth=None, ngram=None):  # the score calls model(x, depth, ngram): both unused here
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for b in self.blocks:
            h = b(h)
        return self.ln(h) @ self.tok.weight.T


def gpt_for(cfg: TrainCfg, target_params: int) -> GPT:
    "The GPT of the default model's width whose depth brings its parameters closest to `target_params`."
    d, heads = cfg.model.d_model, cfg.model.n_heads
    sizes = {n: sum(p.numel() for p in GPT(d, n, heads, cfg.seq_len).parameters()) for n in range(1, 13)}
    n_layer = min(sizes, key=lambda n: abs(sizes[n] - target_params))
    torch.manual_seed(0)
    return GPT(d, n_layer, heads, cfg.seq_len)


def train_gpt(model: GPT, corpus, cfg: TrainCfg, budget: float, lr: float, max_steps: int | None) -> dict:
    "The plain loop: random-offset batches, AdamW, warm-up + cosine on elapsed time, for `budget` seconds."
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(1)
    span = torch.arange(cfg.seq_len + 1)
    data = corpus.data
    t0, steps, loss = time.time(), 0, float("nan")
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1.0 or (max_steps is not None and steps >= max_steps):
            break
        lr_now = lr * min(1.0, frac / 0.02) if frac < 0.02 else \
            lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (frac - 0.02) / 0.98)))
        for g in opt.param_groups:
            g["lr"] = lr_now
        starts = torch.randint(0, corpus.n_train - cfg.seq_len - 1, (cfg.batch,), generator=gen)
        xy = torch.from_numpy(data[(starts[:, None] + span[None, :]).numpy()].astype("int64"))
        logits = model(xy[:, :-1])
        loss_t = F.cross_entropy(logits.reshape(-1, 256), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps, loss = steps + 1, loss_t.item()
    return {"steps": steps, "seconds": time.time() - t0, "last_loss": loss}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=0.0,
                    help="GPT training seconds (default: the wall time of dormouse's run, measured here or "
                    "with --run-dir its loop's, the last metrics row's t)")
    ap.add_argument("--steps", type=int, default=0, help="dormouse's steps (default: TrainCfg's); a smoke run: few")
    ap.add_argument("--run-dir", default="", help="score this finished dormouse run instead of training one")
    ap.add_argument("--lrs", default="5e-4,1e-3,2e-3", help="the GPT's peak learning rates, swept (comma-separated)")
    ap.add_argument("--gpt-max-steps", type=int, default=0, help="stop the GPT after this many steps (0: budget only)")
    ap.add_argument("--score-bytes", type=int, default=0, help="the held-out sample's bound (0: dormouse's default)")
    a = ap.parse_args(argv)

    thread_invariant_mode()  # MKL's mode before its first call, as fit's run_scope does (it is per process)
    cfg = TrainCfg(steps=a.steps) if a.steps else TrainCfg()
    corpus = corpus_for(cfg)  # with the match codes the run embeds, as fit opens it
    sample = score_sample(corpus, a.score_bytes or None)
    print(f"machine: {os.cpu_count()} cpus, load avg {os.getloadavg()[0]:.1f}; torch {torch.__version__}, "
          f"threads {cfg.threads}; held-out sample: {sample}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(a.run_dir) if a.run_dir else Path(tmp) / "dormouse"
        wall = 0.0
        if not a.run_dir:
            t0 = time.time()
            fit(cfg, run_dir, progress=False)
            wall = time.time() - t0
        else:  # the run's training loop: its last row's seconds into its (single) segment, fit's setup not counted
            wall = float(read_jsonl(RunPaths(run_dir).metrics)[-1]["t"])
        im = load_model_weights(RunPaths(run_dir).checkpoints()[-1], quant="stored")
        run = im.cfg
        dm = score(im.model, im.tables, corpus, run.seq_len, im.depth, sample=sample, threads=im.threads)
    budget = a.budget or wall
    n_dorm = sum(p.numel() for p in build_parts(run).model.parameters())
    lrs = [float(x) for x in a.lrs.split(",") if x.strip()]
    sweep = []
    with run_scope(run.threads, "cpu"):
        for lr in lrs:
            gpt = gpt_for(run, n_dorm)
            n_gpt = sum(p.numel() for p in gpt.parameters())
            print(f"dormouse: {im.step} steps in {wall:.1f} s (fit, every guarantee on), {n_dorm:,} parameters "
                  f"+ n-gram tables; GPT: {len(gpt.blocks)} layers x {run.model.d_model}, {n_gpt:,} parameters, "
                  f"{budget:.1f} s of plain loop at peak lr {lr:g}", flush=True)
            info = train_gpt(gpt, corpus, run, budget, lr, a.gpt_max_steps or None)
            gpt.eval()
            g = score(gpt, None, corpus, run.seq_len, 1, stride=dm.stride, sample=sample, match_orders=())
            sweep.append((g.bits_per_byte, lr, info, g))
            print(f"  GPT at peak lr {lr:g}: {info['steps']} steps in {info['seconds']:.1f} s "
                  f"({info['steps'] / info['seconds']:.2f} steps/s), last train loss {info['last_loss']:.3f}, "
                  f"held-out {g.bits_per_byte:.3f} bits/byte", flush=True)
    best, lr, info, g = min(sweep, key=lambda r: r[0])
    base = compressor_baselines(corpus, max_bytes=a.score_bytes or None)
    print("the GPT's learning-rate sweep: " + ", ".join(f"lr {r[1]:g}: {r[0]:.3f}" for r in sweep)
          + f"; best: lr {lr:g}" + (" (at the sweep's edge: widen it)" if lr in (min(lrs), max(lrs)) and len(lrs) > 1
                                   else ""))
    print(f"dormouse {im.step / wall if wall else float('nan'):.2f} steps/s; the best GPT "
          f"{info['steps'] / info['seconds']:.2f} steps/s")
    print(f"held-out bits/byte, scored like a compressor ({dm.sample}; window {dm.window}, stride {dm.stride}):")
    xz = base.bits.get("xz -9e")
    print(f"  dormouse {dm.bits_per_byte:.3f}   plain GPT {g.bits_per_byte:.3f} (lr {lr:g})   xz -9e "
          f"{xz:.3f} (same bytes: {base.sha256 == dm.sha256 == g.sha256})")
    ratio = dm.bits_per_byte / g.bits_per_byte
    print(f"dormouse / best GPT at equal wall time: {ratio:.3f} (target <= 0.7) {'PASS' if ratio <= 0.7 else 'MISS'}"
          f"   (load avg {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
