#!/usr/bin/env python3
"""The sweep behind TrainCfg's defaults: per-step cost as a ratio to a reference, and quality at a fixed step count.

Both measurements hold on a shared machine. Cost: a candidate's training steps alternate one by one with the
reference config's (separate parts, same process, same threads), so a load burst hits both; the ratio of their
low-quantile step times is what a quiet machine would show. Quality: a config is trained for a fixed number of
steps with `dormouse.step.train_step` (fit's own step, without checkpoints or fingerprints, which change no number)
and scored with the compressor-like held-out score (`dormouse.score`) on the bytes the compressors get;
bits/byte after N steps does not depend on load.

  python bench/sweep_defaults.py cost CAND [CAND ...] [--ref REF] [--steps 24]
  python bench/sweep_defaults.py quality CAND --steps N [--out sweep.jsonl]
  python bench/sweep_defaults.py list

A CAND is a name from CONFIGS or `name:key=value;key=value` (dotted TrainCfg keys, TOML-ish values); a schedule key
it names (warmup, decay_start, decay_steps) wins over the schedule `quality` derives from --steps.
Run it with MKL_CBWR=AUTO,STRICT in the environment (the thread-invariant numeric mode) and under `nice -n 10`.
"""

import argparse, json, os, statistics, sys, time
from safetensors.torch import load_file, save_file
from safetensors import safe_open
from dormouse.config import TrainCfg, cfg_from_dict, cfg_to_dict
from dormouse.testing import with_key
from dormouse.data import corpus_for, load_corpus
from dormouse.heldout import score_sample
from dormouse.numerics import run_scope
from dormouse.parts import build_parts
from dormouse.score import score
from dormouse.step import evaluate, pre_batches, run_probes, train_step

REF = {}  # the reference: TrainCfg() as it stands, at 2 threads
CONFIGS = {
    "ref": {},
    "L256b8": {"seq_len": 256, "batch": 8},
    "L512b4": {"seq_len": 512, "batch": 4},
    "L256b16": {"seq_len": 256, "batch": 16},
    "L512b8": {"seq_len": 512, "batch": 8},
    "d192": {"model.d_model": 192, "model.n_heads": 6, "model.factor_rank": 192},
    "d160": {"model.d_model": 160, "model.factor_rank": 160},  # 4 heads of 40
    "d192h4": {"model.d_model": 192, "model.factor_rank": 192},  # 4 heads of 48
    "d256L256b8": {"model.d_model": 256, "model.n_heads": 8, "model.factor_rank": 256, "seq_len": 256, "batch": 8},
    "depth1": {"model.depth": 1},
    "slots18": {"model.ngram_slots": 1 << 18},
    "ord2-6": {"model.ngram_orders": [2, 3, 4, 5, 6]},
    "nomatch": {"model.match_orders": []},  # no match codes: what the sweep's first rows were measured at
    "unitcodes": {"model.match_train": False},  # match codes of a unit alone, not the training text
    "orders64": {"model.match_orders": [4, 8, 16, 32, 64]},  # one more order of codes
}


def parse_value(v: str):
    "A command-line value: int, float, bool, a list of ints, else the string."
    if v in ("true", "false"):
        return v == "true"
    if v.startswith("["):
        return json.loads(v)
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def make_cfg(spec: str, threads: int, **extra) -> tuple[str, TrainCfg]:
    "(name, config) of a candidate: a CONFIGS name or name:key=value,... over TrainCfg(threads=threads)."
    name, _, rest = spec.partition(":")
    over = dict(CONFIGS.get(name, {}))
    if rest:
        for kv in rest.split(";"):
            k, _, v = kv.partition("=")
            over[k.strip()] = parse_value(v.strip())
    elif name not in CONFIGS:
        raise SystemExit(f"unknown config {name!r}: use one of {', '.join(CONFIGS)} or name:key=value;...")
    cfg = TrainCfg(threads=threads)
    for k, v in {**extra, **over}.items():  # a key the spec names wins over the derived schedule
        cfg = with_key(cfg, k, v)
    return name, cfg


def lowq(xs, q=0.25):
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))]


def cost(a) -> None:
    "Per-step cost of each candidate over the reference's, steps interleaved one by one."
    _, ref = make_cfg(a.ref, a.threads)
    for spec in a.cands:
        name, cfg = make_cfg(spec, a.threads)
        corpora = {id(c): corpus_for(c) for c in (ref, cfg)}
        with run_scope(a.threads, "cpu"):
            sides = [(ref, build_parts(ref)), (cfg, build_parts(cfg))]
            times = [[], []]
            for s in range(a.warm + a.steps):
                order = (0, 1) if s % 2 == 0 else (1, 0)
                for k in order:
                    c, p = sides[k]
                    t = time.perf_counter()
                    train_step(p, corpora[id(c)], c, s, probe_batches=pre_batches(c), device="cpu")
                    if s >= a.warm:
                        times[k].append(time.perf_counter() - t)
        r, q = [c / b for b, c in zip(*times)], lowq(times[1]) / lowq(times[0])
        n_params = sum(p.numel() for p in sides[1][1].model.parameters())
        tok = cfg.batch * cfg.seq_len
        print(json.dumps({"cfg": name, "cost_ratio_q25": round(q, 3), "paired_median": round(statistics.median(r), 3),
                          "ref_ms_q25": round(1e3 * lowq(times[0]), 1), "cand_ms_q25": round(1e3 * lowq(times[1]), 1),
                          "tokens_per_step": tok, "params": n_params, "load": round(os.getloadavg()[0], 2)}),
              flush=True)


def schedule(steps: int, decay_frac: float = 0.15, warmup: int = 50) -> dict:
    "The schedule keys of a run of `steps`: warm-up, flat, then cosine to min_lr ending at the last step."
    start = max(warmup, round(decay_frac * steps))
    return {"warmup": warmup, "decay_start": start, "decay_steps": max(1, steps - start)}


def quality(a) -> None:
    "Train one candidate for --steps (fit's train_step, nothing else) and score it like a compressor."
    name, cfg = make_cfg(a.cand, a.threads, steps=a.steps, **schedule(a.steps, a.decay_frac))
    corpus = corpus_for(cfg)
    sample = score_sample(corpus, a.score_bytes)
    t0 = time.time()
    losses = []
    with run_scope(cfg.threads, "cpu"):
        parts = build_parts(cfg)
        run_probes(parts, corpus, cfg, device="cpu", log=lambda m: None)
        for s in range(cfg.steps):
            losses.append(train_step(parts, corpus, cfg, s, probe_batches=pre_batches(cfg), device="cpu")["loss"])
        t1 = time.time()
        ev = evaluate(parts, corpus, cfg, "cpu")[f"eval_cold_bpb_d{cfg.model.depth}"]
        sc = score(parts.model, parts.tables, corpus, cfg.seq_len, cfg.model.depth, stride=a.stride or None,
                   sample=sample)
    t2 = time.time()
    if a.save:  # weights and tables, to score again later (another stride, the whole split): safetensors, no pickle
        save_file({**{f"model.{k}": v.contiguous() for k, v in parts.model.state_dict().items()},
                   "tables.weight": parts.tables.weight.contiguous()}, a.save,
                  metadata={"cfg": json.dumps(cfg_to_dict(cfg))})
    n_params = sum(p.numel() for p in parts.model.parameters())
    tail = losses[-100:]
    row = {"cfg": a.cand, "steps": cfg.steps, "tokens": cfg.steps * cfg.batch * cfg.seq_len, "params": n_params,
           "score_bpb": round(sc.bits_per_byte, 4), "score_se": round(sc.se, 4), "score_bytes": sc.nbytes,
           "stride": sc.stride, "inloop_bpb": round(ev, 4), "train_loss_last100": round(sum(tail) / len(tail), 4),
           "train_s": round(t1 - t0, 1), "score_s": round(t2 - t1, 1), "threads": cfg.threads,
           "load": round(os.getloadavg()[0], 2), "lr": cfg.lr, "decay_start": cfg.decay_start}
    print(json.dumps(row), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")


def rescore(a) -> None:
    "Score a saved candidate again: another stride, or another bound of the held-out sample."
    with safe_open(a.path, "pt") as f:
        cfg = cfg_from_dict(json.loads(f.metadata()["cfg"]))
    sd = load_file(a.path)
    corpus = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
    with run_scope(a.threads, "cpu"):
        parts = build_parts(cfg)
        parts.model.load_state_dict({k[6:]: v for k, v in sd.items() if k.startswith("model.")})
        parts.tables.weight.copy_(sd["tables.weight"])
        for stride in a.strides:
            t = time.time()
            sc = score(parts.model, parts.tables, corpus, cfg.seq_len, cfg.model.depth, stride=stride,
                       sample=score_sample(corpus, a.score_bytes or None))
            row = {"path": a.path, "stride": stride, "score_bpb": round(sc.bits_per_byte, 4),
                   "score_se": round(sc.se, 4), "score_bytes": sc.nbytes, "s": round(time.time() - t, 1)}
            print(json.dumps(row), flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cost")
    c.add_argument("cands", nargs="+")
    c.add_argument("--ref", default="ref")
    c.add_argument("--steps", type=int, default=24)
    c.add_argument("--warm", type=int, default=3)
    c.add_argument("--threads", type=int, default=2)
    q = sub.add_parser("quality")
    q.add_argument("cand")
    q.add_argument("--steps", type=int, required=True)
    q.add_argument("--threads", type=int, default=1, help="quality does not depend on threads; 1 lets two run at once")
    q.add_argument("--decay-frac", type=float, default=0.15)
    q.add_argument("--score-bytes", type=int, default=400_000, help="the keyed held-out sample scored")
    q.add_argument("--stride", type=int, default=0, help="score stride (0: the window, as the final score)")
    q.add_argument("--out", default="")
    q.add_argument("--save", default="", help="write the trained weights and tables here (safetensors)")
    r = sub.add_parser("rescore")
    r.add_argument("path")
    r.add_argument("--strides", type=int, nargs="+", required=True)
    r.add_argument("--score-bytes", type=int, default=0, help="the held-out sample's bound (0: the default)")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--out", default="")
    sub.add_parser("list")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        for k, v in CONFIGS.items():
            print(k, v)
    elif a.cmd == "cost":
        cost(a)
    elif a.cmd == "quality":
        quality(a)
    elif a.cmd == "rescore":
        rescore(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
