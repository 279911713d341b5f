#!/usr/bin/env python3
"""What one canonical sum costs, measured: the kit's step (every microbatch's gradients summed over one fixed tree,
finished across ranks chunk by chunk) against DistributedDataParallel at the same world size.

For each model (the default, and a wider one: d_model 256, 8 heads, factor_rank 256) it prints, from rounds
interleaved in the same processes:
  - at world W (2, and 4 where asked; ranks run one thread each): the median step time of the canonical exchange ÷
    DDP's, both training the same plan with micro_batch = batch / W (one microbatch a rank: DDP's shapes); the bytes
    each rank receives a step (the kit's all-to-all and all-gather of chunks: (m + 1)(W - 1) / W vectors for m
    subtrees a rank; DDP's ring all-reduce: 2 (W - 1) / W of the model's gradients and of the n-gram leaf's); the peak
    memory (max RSS) per rank of a short separate launch of each arm; and each exchange alone on one vector of a
    step's length: the kit's, an all-gather of whole vectors (each rank finishing the tree), and an all-reduce;
  - in one process: the median step time accumulating 2 and 4 microbatches ÷ the whole batch at once (micro_batch 0).
The DDP arm is the same step as DistributedDataParallel runs it: the student inside DDP (gradients
averaged by its bucketed all-reduce, overlapped with backward), then the n-gram leaf's gradient and the losses
all-reduced. Its sums depend on the world size; the canonical step's do not.

Run it alone on the machine: neighbours' load moves every figure. A ratio is measured in one launch, rounds
interleaved, so slow drifts of the machine cancel; absolute times are printed for scale only. The figures, as printed,
go to bench/results/elastic.json (when and where it ran, and the command), which the dist chapter renders; a --quick
dry run writes none unless --out names a file.

  python bench/elastic.py [--models default,wide] [--worlds 2,4] [--steps 12] [--rounds 3] [--quick] [--out F]
"""

from __future__ import annotations

import argparse, json, os, platform, resource, statistics, subprocess, sys, time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "elastic.json"
sys.path.insert(0, str(ROOT))

from dormouse.config import ModelCfg, TrainCfg  # noqa: E402
from dormouse.data import corpus_for  # noqa: E402
from dormouse.dist import (CanonicalSum, block_spans, canonical_total, dist_from_env, finish,  # noqa: E402
                           process_group, rank_block)
from dormouse.mask import mask_stream  # noqa: E402
from dormouse.model import DormouseModel, compute_losses, depth_for_step, ema_update  # noqa: E402
from dormouse.ngram import ngram_ids  # noqa: E402
from dormouse.numerics import run_scope  # noqa: E402
from dormouse.parts import build_parts  # noqa: E402
from dormouse.step import global_batch, global_match, lr_at, micro_count, pre_batches, train_step  # noqa: E402
from dormouse.testing import tiny_cfg  # noqa: E402


def plan(model: str, micro_batch: int, threads: int) -> TrainCfg:
    "The plan a model name stands for, eval off, with `micro_batch` and `threads`."
    if model == "tiny":
        return tiny_cfg(micro_batch=micro_batch, threads=threads, eval=False)
    m = ModelCfg() if model == "default" else ModelCfg(d_model=256, n_heads=8, factor_rank=256)
    return TrainCfg(model=m, micro_batch=micro_batch, threads=threads, eval=False)


def ddp_step(parts, ddp, corpus, cfg: TrainCfg, step: int, rank: int, world: int) -> float:
    "The kit's step before the canonical sum: DDP averages the model's gradients, all-reduce the rest."
    pb = pre_batches(cfg)
    x, y, keep = global_batch(corpus, step + pb, cfg, rank=rank, world=world)
    match = global_match(corpus, step + pb, cfg)
    mask = mask_stream(cfg.batch, cfg.seq_len, cfg.mask_frac, cfg.mask_span, cfg.seed, step)[keep] if cfg.aux else None
    feats = parts.tables.lookup(x, keep)
    loss, ce, jepa = compute_losses(ddp, x[keep], y[keep], depth=depth_for_step(cfg, step), teacher=parts.teacher,
                                    ngram=feats, mask=mask, jepa_weight=cfg.jepa_weight,
                                    match=None if match is None else match[keep])
    stats = torch.stack([loss.detach(), ce.detach(), jepa.detach()])
    dist.all_reduce(stats)
    parts.optim.zero_grad(set_to_none=True)
    loss.backward()  # DDP: the model's gradients are all-reduced (summed, then / world) here
    g = parts.tables.pending_grad()
    dist.all_reduce(g)
    g.div_(world)
    params = [p for p in parts.model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip).item()
    for group in parts.optim.param_groups:
        group["lr"] = lr_at(cfg, step)
    parts.optim.step()
    parts.tables.step()
    if parts.teacher is not None:
        ema_update(parts.teacher, parts.model, cfg.ema_momentum)
    return grad_norm


def collectives(cfg: TrainCfg, corpus, world: int, n: int = 20) -> dict:
    "Median seconds of each exchange alone, one step-length vector a rank: the kit's, a whole all-gather, all-reduce."
    n_params, rows = vector_sizes(cfg, corpus, range(8))
    v, rank = torch.randn(int(n_params + rows * cfg.model.ngram_dim + 3)), dist.get_rank()

    def kit():
        own = CanonicalSum(world)
        own.add(rank, rank + 1, v.clone())
        return canonical_total(own, rank, world)

    def whole():
        got = [torch.empty_like(v) for _ in range(world)]
        dist.all_gather(got, v)
        return finish(world, [[(r, r + 1, g)] for r, g in enumerate(got)])

    ops = {"kit": kit, "all_gather": whole, "all_reduce": lambda: dist.all_reduce(v.clone())}
    out = {k: [] for k in ops}
    for _ in range(n):
        for name, op in ops.items():
            dist.barrier()
            t = time.perf_counter()
            op()
            out[name].append(time.perf_counter() - t)
    return {k: statistics.median(t) for k, t in out.items()}


def vector_sizes(cfg: TrainCfg, corpus, steps: range) -> tuple[int, float]:
    "(model parameters, mean unique n-gram rows of a global batch over `steps`)."
    n_params = sum(p.numel() for p in DormouseModel(cfg.model, aux=cfg.aux).parameters())
    m, rows = cfg.model, []
    for s in steps:
        x, _ = corpus.batch_at(s + pre_batches(cfg), cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)
        ids = ngram_ids(x, m.ngram_orders, m.ngram_slots) + (torch.arange(len(m.ngram_orders)) * m.ngram_slots).view(
            -1, 1, 1)
        rows.append(torch.unique(ids.reshape(-1)).numel())
    return n_params, statistics.fmean(rows)


def worker(a) -> None:
    "One rank under torchrun: time the arms in interleaved rounds; rank 0 prints one JSON line."
    di = dist_from_env()
    cfg = plan(a.model, a.micro_batch, 1)
    with process_group(di, "cpu"), run_scope(1, "cpu"):
        corpus = corpus_for(cfg)
        arms = {}
        if a.arm in ("both", "canonical"):
            pc = build_parts(cfg)
            arms["canonical"] = lambda s: train_step(pc, corpus, cfg, s, probe_batches=pre_batches(cfg), rank=di.rank,
                                                     world=di.world)
        if a.arm in ("both", "ddp"):
            pd = build_parts(cfg)
            ddp = DistributedDataParallel(pd.model)
            arms["ddp"] = lambda s: ddp_step(pd, ddp, corpus, cfg, s, di.rank, di.world)
        times = {k: [] for k in arms}
        steps = {k: 0 for k in arms}
        for _ in range(a.rounds):
            for k, fn in arms.items():
                for i in range(a.warm + a.steps):
                    dist.barrier()
                    t = time.perf_counter()
                    fn(steps[k])
                    dt = time.perf_counter() - t
                    steps[k] += 1
                    if i >= a.warm:
                        times[k].append(dt)
        coll = collectives(cfg, corpus, di.world) if a.arm == "both" else {}
        rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
        got = [torch.zeros_like(rss) for _ in range(di.world)]
        dist.all_gather(got, rss)
        med = torch.tensor([statistics.median(times[k]) for k in arms], dtype=torch.float64)
        meds = [torch.zeros_like(med) for _ in range(di.world)]
        dist.all_gather(meds, med)
    if di.lead:  # a step ends when its slowest rank's does: the median of the ranks' medians' maximum
        worst = torch.stack(meds).max(0).values.tolist()
        print(json.dumps({"median_s": dict(zip(arms, worst)), "max_rss_kb": max(int(g) for g in got),
                          "collective_s": coll}), flush=True)


def launch(a, model: str, world: int, arm: str, steps: int, rounds: int, warm: int) -> dict:
    "Run `worker` under torchrun with `world` ranks; its JSON line."
    base = plan(model, 0, 1)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", __file__,
           "--worker", "--model", model, "--micro-batch", str(base.batch // world), "--arm", arm,
           "--steps", str(steps), "--rounds", str(rounds), "--warm", str(warm)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("{")))


def exchange_bytes(world: int, k: int, n_params: int, rows: float, dim: int) -> tuple[float, float]:
    "(bytes a rank receives a step by the canonical exchange, by DDP's ring all-reduces), float32."
    subtrees = max(len(block_spans(k, rank_block(k, r, world))) for r in range(world))
    vector = n_params + rows * dim + 3
    chunk = vector / world
    return 4 * (world - 1) * (subtrees + 1) * chunk, 4 * 2 * (world - 1) / world * vector


def accumulation(model: str, a) -> dict:
    "Median step time in one process at 1 (the whole batch), 2 and 4 microbatches, interleaved rounds."
    base = plan(model, 0, a.threads)
    ks = [k for k in (1, 2, 4) if base.batch % k == 0]
    cfgs = {k: plan(model, base.batch // k if k > 1 else 0, a.threads) for k in ks}
    times = {k: [] for k in ks}
    with run_scope(a.threads, "cpu"):
        corpus = corpus_for(base)
        parts = {k: build_parts(c) for k, c in cfgs.items()}
        steps = dict.fromkeys(ks, 0)
        for _ in range(a.rounds):
            for k, c in cfgs.items():
                for i in range(a.warm + a.steps):
                    t = time.perf_counter()
                    train_step(parts[k], corpus, c, steps[k], probe_batches=pre_batches(c))
                    if i >= a.warm:
                        times[k].append(time.perf_counter() - t)
                    steps[k] += 1
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="default,wide", help="comma-separated: default, wide, tiny")
    ap.add_argument("--worlds", default="2,4", help="comma-separated world sizes")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per arm per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--warm", type=int, default=2, help="untimed steps per arm per round")
    ap.add_argument("--threads", type=int, default=2, help="threads of the one-process arms")
    ap.add_argument("--quick", action="store_true", help="the tiny model, few steps: a dry run of the script")
    ap.add_argument("--out", default=None, help=f"where the JSON result goes (default {RESULT}; --quick: none)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--micro-batch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--arm", default="both", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    if a.quick:
        a.models, a.steps, a.rounds, a.warm = "tiny", 4, 2, 1
    out = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "source": " ".join(["measured by bench/elastic.py", *sys.argv[1:]]), "torch": torch.__version__,
           "steps": a.steps, "rounds": a.rounds, "threads": a.threads, "models": {}}
    print(f"bench/elastic.py: {os.cpu_count()} CPUs, torch {torch.__version__}; {a.rounds} interleaved rounds of "
          f"{a.steps} timed steps per arm; medians")
    for model in a.models.split(","):
        base = plan(model, 0, 1)
        corpus = corpus_for(base)
        n_params, rows = vector_sizes(base, corpus, range(8))
        res = out["models"][model] = {"d_model": base.model.d_model, "params": n_params, "mean_ngram_rows": round(rows),
                                      "batch": base.batch, "seq_len": base.seq_len, "worlds": {}}
        print(f"\n{model}: d_model {base.model.d_model}, {n_params:,} parameters, ~{rows:,.0f} n-gram rows a batch "
              f"of {base.batch} x {base.seq_len}")
        for world in [int(w) for w in a.worlds.split(",")]:
            if base.batch % world:
                print(f"  world {world}: batch {base.batch} does not split; skipped")
                continue
            both = launch(a, model, world, "both", a.steps, a.rounds, a.warm)
            t, coll = both["median_s"], both["collective_s"]
            mem = {arm: launch(a, model, world, arm, 3, 1, 1)["max_rss_kb"] for arm in ("canonical", "ddp")}
            k = micro_count(plan(model, base.batch // world, 1))
            got, ddp = exchange_bytes(world, k, n_params, rows, base.model.ngram_dim)
            res["worlds"][str(world)] = {  # the figures as printed below
                "micro_batch": base.batch // world, "canonical_ms": round(1e3 * t["canonical"], 1),
                "ddp_ms": round(1e3 * t["ddp"], 1), "ratio": round(t["canonical"] / t["ddp"], 3),
                "received_mb_canonical": round(got / 1e6, 2), "received_mb_ddp": round(ddp / 1e6, 2),
                "peak_rss_mb_canonical": round(mem["canonical"] / 1024), "peak_rss_mb_ddp": round(mem["ddp"] / 1024),
                "exchange_ms": {k: round(1e3 * v, 1) for k, v in coll.items()}}
            print(f"  world {world} (micro_batch {base.batch // world}, one thread a rank): step "
                  f"{1e3 * t['canonical']:.1f} ms canonical vs {1e3 * t['ddp']:.1f} ms DDP: ratio "
                  f"{t['canonical'] / t['ddp']:.3f}; received a step per rank {got / 1e6:.2f} MB vs {ddp / 1e6:.2f} MB;"
                  f" peak RSS per rank {mem['canonical'] / 1024:.0f} MB vs {mem['ddp'] / 1024:.0f} MB")
            print(f"    the exchange alone, one step-length vector a rank: the kit's (chunks: all-to-all, finish, "
                  f"all-gather) {1e3 * coll['kit']:.1f} ms; all-gather of whole vectors, each rank finishing "
                  f"{1e3 * coll['all_gather']:.1f} ms; all-reduce (no fixed order) {1e3 * coll['all_reduce']:.1f} ms")
        acc = accumulation(model, a)
        res["accumulation"] = {"whole_ms": round(1e3 * acc[1], 1),
                               "micro_ms": {str(k): round(1e3 * v, 1) for k, v in acc.items() if k > 1},
                               "ratio": {str(k): round(v / acc[1], 3) for k, v in acc.items() if k > 1}}
        print(f"  one process ({a.threads} thread(s)): step {1e3 * acc[1]:.1f} ms whole batch; "
              + "; ".join(f"{k} microbatches {1e3 * v:.1f} ms = {v / acc[1]:.3f}x" for k, v in acc.items() if k > 1))
    dest = a.out if a.out is not None else ("" if a.quick else str(RESULT))
    if dest:
        Path(dest).write_text(json.dumps(out, indent=1) + "\n")
        print(f"written: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
