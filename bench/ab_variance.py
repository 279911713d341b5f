#!/usr/bin/env python3
"""What pairing buys: the seed-to-seed spread of the default plan's final score, an A/A, and two real A/Bs, with the
95% intervals paired and unpaired (`dormouse.ab`), written to bench/results/ab_variance.json and drawn to
bench/results/ab_variance_<small|large>.png (each A/B's bands), which the A/B chapter (nbs/52_ab.ipynb) reads.

The plan is the default one (`TrainCfg()`) stopped early, at --steps steps (the learning-rate schedule is a function
of the step and the strict keys only, so these are the first steps of a default run), with the in-loop eval off
(a progress key: it decides when the run is looked at, never what it computes) and one checkpoint at the end. Each
run's figure is `dormouse.ab`'s: held-out bits/byte, the model alone, static, on a keyed sample of the held-out split
bounded by DORMOUSE_SCORE_BYTES (set here to --score-bytes).
  A/A     the default plan against itself at --seeds seeds: every paired difference exactly 0.
  spread  the A/A's arm A: the default plan's final score at --seeds seeds.
  A/Bs    the default plan (A) against it with a small change (lr x1.1) and a large one (lr x2) (B), at the same
          seeds: B - A paired and unpaired, the interval widths, and the variance pairing removes, Var(A) + Var(B)
          over Var(B - A). Arm A's runs are the A/A's arm A, copied into each A/B's directory after its record
          (`ab.claim`), so `ab` finds them finished and skips them: 20 runs, not 30.
A benchmark reports; it does not gate. Run it with nothing else running; 20 runs of the default plan.
Usage: .venv/bin/python bench/ab_variance.py [--steps 20] [--seeds 5]
"""

from __future__ import annotations
import argparse, dataclasses, json, os, platform, shutil, sys, tempfile, time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"


def summary(r) -> dict:
    "The figures of an `ABResult` the chapter reads."
    return {"differs": r.differs, "seeds": list(r.seeds), "a": list(r.a), "b": list(r.b), "diffs": list(r.diffs),
            "mean": r.mean, "ci": list(r.ci), "unpaired": list(r.unpaired), "ci_width": r.ci[1] - r.ci[0],
            "unpaired_width": r.unpaired[1] - r.unpaired[0],
            "narrowing": None if r.narrowing() == float("inf") else r.narrowing(),
            "variance_ratio": None if r.variance_ratio() == float("inf") else r.variance_ratio(),
            "shared": r.shared, "sample": r.sample, "lines": r.lines()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--score-bytes", type=int, default=64 << 10)
    args = p.parse_args()
    os.environ["DORMOUSE_SCORE_BYTES"] = str(args.score_bytes)
    os.environ["DORMOUSE_SCORE_MIX"] = "0"
    from dormouse.ab import ab, claim, plot_ab
    from dormouse.config import TrainCfg

    a = dataclasses.replace(TrainCfg(), steps=args.steps, eval=False, ckpt_every=args.steps, log_every=args.steps)
    arms = {"small": dataclasses.replace(a, lr=0.0033), "large": dataclasses.replace(a, lr=0.006)}  # x1.1, x2
    work = Path(tempfile.mkdtemp(prefix="dormouse-ab-bench-"))
    t0, res, walls = time.time(), {}, {}
    try:
        res["aa"] = ab(a, a, work / "aa", seeds=args.seeds, progress=False)
        walls["aa"] = round(time.time() - t0, 1)
        print(res["aa"], flush=True)
        for name, b in arms.items():
            t1 = time.time()
            claim(work / name, a, b)  # the record first: then arm A's finished runs, copied in, are this A/B's
            shutil.copytree(work / "aa" / "A", work / name / "A")
            res[name] = ab(a, b, work / name, seeds=args.seeds, progress=False)
            walls[name] = round(time.time() - t1, 1)
            print(res[name], flush=True)
            RESULTS.mkdir(exist_ok=True)
            plot_ab(work / name).savefig(RESULTS / f"ab_variance_{name}.png", dpi=100)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    spread = np.asarray(res["aa"].a)
    out = {
        "what": "the default plan's seed spread, an A/A, two A/Bs (lr x1.1, x2): paired vs unpaired",
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "torch": torch.__version__, "threads": a.threads},
        "plan": {"steps": args.steps, "eval": False, "lr_a": a.lr, "lr_b": {k: b.lr for k, b in arms.items()},
                 "score_bytes": args.score_bytes, "figure": "held-out bits/byte, the model alone, static"},
        "spread": {"seeds": list(res["aa"].seeds), "scores": spread.tolist(), "mean": float(spread.mean()),
                   "sd": float(spread.std(ddof=1)), "min": float(spread.min()), "max": float(spread.max())},
        **{name: summary(r) for name, r in res.items()},
        "wall_s": {**walls, "total": round(time.time() - t0, 1)},
    }
    (RESULTS / "ab_variance.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"default plan at {args.steps} steps, {args.seeds} seeds: {out['spread']['mean']:.4f} bits/byte, "
          f"sd {out['spread']['sd']:.4f} (min {out['spread']['min']:.4f}, max {out['spread']['max']:.4f})")
    for name in arms:
        r, w = res[name], out[name]
        print(f"lr x{r.differs['lr'][1] / r.differs['lr'][0]:.1f}: pairing's variance reduction, Var(A) + Var(B) over "
              f"Var(B - A): {r.variance_ratio():.1f}x; the paired 95% interval is {w['ci_width']:.4f} wide, the "
              f"unpaired {w['unpaired_width']:.4f} ({r.narrowing():.1f}x); {r.lines()[-1]}")
    print(f"A/A over {args.seeds} seeds: {res['aa'].lines()[-1]}")
    print(f"wrote {RESULTS / 'ab_variance.json'} and ab_variance_{{small,large}}.png in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
