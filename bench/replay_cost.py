#!/usr/bin/env python3
"""What verifying an environment change costs: the replay of an interval (the steps `verify_resume` and `dormouse
verify` train again, with their fingerprints) divided by the same steps trained normally by `fit` (target <= 1.1), and
the default config's verification time for one checkpoint interval.

A timing: run it on an otherwise idle machine.

  python bench/replay_cost.py               # default model, 20 steps per interval (ckpt_every=20)
  python bench/replay_cost.py --steps 10 --tiny
"""

from __future__ import annotations

import argparse, dataclasses, tempfile, time
from pathlib import Path

from dormouse.config import TrainCfg
from dormouse.numerics import numeric_env, run_scope
from dormouse.rundir import RunPaths
from dormouse.testing import tiny_cfg
from dormouse.train import fit, pin_inputs
from dormouse.container import load_ckpt
from dormouse.replay import Evidence, replay_start, replay_steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="steps of the interval")
    p.add_argument("--tiny", action="store_true", help="the tests' tiny config instead of the default model")
    args = p.parse_args()
    n = args.steps
    base = tiny_cfg() if args.tiny else TrainCfg()
    cfg = dataclasses.replace(base, steps=2 * n, ckpt_every=n, eval=False, keep_ckpts=10)
    run = Path(tempfile.mkdtemp(prefix="replay_cost_")) / "run"
    fit(dataclasses.replace(cfg, steps=n), run, progress=False)  # the interval's start: the checkpoint at n
    t = time.perf_counter()
    fit(cfg, run, resume=True, progress=False)  # steps n..2n trained normally (with its checkpoint)
    trained = time.perf_counter() - t
    path = RunPaths(run).checkpoints()[-1]
    ck = load_ckpt(path)
    ev = Evidence.from_json(ck.evidence)
    pinned, corpus, targets = pin_inputs(cfg)
    with run_scope(cfg.threads, "cpu"):
        t = time.perf_counter()
        parts = replay_start(pinned, corpus, ev, path.parent)
        got = replay_steps(parts, corpus, pinned, ev, ev.end, targets=targets)
        replayed = time.perf_counter() - t
    assert got.differs is None, got.differs
    print(f"{'tiny' if args.tiny else 'default'} config, threads={cfg.threads}, mkl_cbwr="
          f"{numeric_env(cfg.threads)['mkl_cbwr']}: interval of {n} steps")
    print(f"  trained normally (resume + {n} steps + checkpoint): {trained:.2f}s")
    print(f"  replayed (load start + {n} steps + {got.fingerprints} fingerprints): {replayed:.2f}s")
    print(f"  replay / trained: {replayed / trained:.2f} (target <= 1.1)")
    if not args.tiny:  # the default config's verification: one interval of its checkpoint cadence
        print(f"  verifying one interval of the default config ({TrainCfg().ckpt_every} steps): about "
              f"{replayed / n * TrainCfg().ckpt_every:.0f}s at this rate")


if __name__ == "__main__":
    main()
