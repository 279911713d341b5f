#!/usr/bin/env python3
"""What replay before trust costs every resume: the interval's start checkpoint loaded and the first VERIFY_STEPS
steps of the checkpoint's interval trained again in memory (`replay.verify_resume`, as a resume runs it), in seconds
and as a fraction of the default run's wall time. Target: a few seconds, and under 2% of a default run.

A timing: run it on an otherwise idle machine (another job on the second core makes two threads spin-wait).

  python bench/replay_cost.py          # the default model; the run's wall time from the step rate of the same run
  python bench/replay_cost.py --full   # also train the whole default run (minutes) and use its measured wall time
"""

from __future__ import annotations

import argparse, contextlib, dataclasses, io, statistics, tempfile, time
from pathlib import Path

from dormouse.config import TrainCfg
from dormouse.container import load_ckpt
from dormouse.numerics import numeric_env, run_scope
from dormouse.replay import VERIFY_STEPS, verify_resume
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.train import fit, pin_inputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="train the whole default run and time it (minutes)")
    p.add_argument("--rounds", type=int, default=3, help="replays timed (the median is reported)")
    args = p.parse_args()
    base, n = TrainCfg(), VERIFY_STEPS
    cfg = dataclasses.replace(base, steps=2 * n, ckpt_every=n, eval=False, keep_ckpts=10)
    tmp = Path(tempfile.mkdtemp(prefix="replay_cost_"))
    fit(cfg, tmp / "run", progress=False)  # checkpoints at n and 2n: the interval [n, 2n) starts at a checkpoint
    t = [r["t"] for r in read_jsonl(RunPaths(tmp / "run").metrics)]
    step_s = statistics.median(b - a for a, b in zip(t, t[1:]))  # a default step, trained by fit
    path = RunPaths(tmp / "run").checkpoints()[-1]
    ck, (pinned, corpus, targets) = load_ckpt(path), pin_inputs(cfg)
    times = []
    with run_scope(cfg.threads, "cpu"), contextlib.redirect_stdout(io.StringIO()):
        env = numeric_env(cfg.threads)
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            got = verify_resume(ck, path, pinned, corpus, env, targets=targets, verify_steps=n)
            times.append(time.perf_counter() - t0)
    assert got.differs is None and (got.start, got.stop) == (n, 2 * n), got
    replay = statistics.median(times)
    if args.full:
        t0 = time.perf_counter()
        fit(base, tmp / "default", progress=False)
        wall, how = time.perf_counter() - t0, "measured: the whole default run trained here"
    else:
        wall, how = base.steps * step_s, (f"{base.steps} steps x the median step {step_s * 1e3:.0f} ms; evals, "
                                          "checkpoints and the final score excluded, so the ratio is an upper bound")
    print(f"default model, threads={cfg.threads}, mkl_cbwr={env['mkl_cbwr']}, torch {env['torch']}")
    print(f"  replay before trust: load step {n}'s checkpoint, replay steps {n}-{2 * n - 1} ({n} = VERIFY_STEPS), "
          f"compare: median {replay:.2f} s over {args.rounds} (each {', '.join(f'{x:.2f}' for x in times)} s)")
    print(f"  the default run's wall time: {wall:.0f} s ({how})")
    print(f"  replay / run: {replay / wall:.2%} (target: a few seconds, and under 2%)")


if __name__ == "__main__":
    main()
