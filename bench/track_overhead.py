#!/usr/bin/env python3
"""What watching a run costs: `fit` with both trackers (TensorBoard and MLflow, default settings: event files and a
SQLite store in the run directory) over `fit` without any, at the default cadence (TrainCfg's defaults: the default
model, a row per step, a fingerprint every 100 steps, eval every 450, a checkpoint every 600; progress off).

Whole runs alternate, without then with, the order swapped every other round; each run is a fresh process (a user's
run pays for importing tensorboard and mlflow and for creating the MLflow store, so the benchmark does too). Per run
it reads fit's own metrics column "t" (wall seconds into the segment at the end of each step) and the whole call's
wall time, and prints three ratios of steps/s, with / without (1.0 = free, higher is better):
  loop    every step of the run, first to last: what the trackers cost while the run trains, their start included
          (the feed opens them on its own thread, so importing mlflow and creating its store overlap the first steps)
  steady  the steps after --warm: the cost of feeding each row, once the trackers are open
  call    the whole `fit` call, opening and closing included (closing waits for the trackers: the MLflow run's last
          batch, its loss plot, its status)
and, less at the mercy of neighbours, the CPU seconds the feed's thread used (its own clock: importing tensorboard and
mlflow, creating the store, every row, every flush, the plot) as a share of the whole process's CPU seconds in `fit`.
That share is what the trackers take from the cores the step could use; it does not count waits for the GIL.
The headline is the loop ratio, the median over rounds (target >= 0.99). Absolute steps/s on a shared 2-core machine
swing with whatever else runs, so the figure means something only when nothing else does: a ratio printed beside
another job is noise, and a NOISY line says so when the rounds disagree by more than the target's margin.
A benchmark reports; it does not gate: the exit code is 0 unless it crashes.
Usage: .venv/bin/python bench/track_overhead.py [--steps 1800] [--rounds 2] [--warm 100] [--dir D]
"""

from __future__ import annotations
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ONE = """import json, sys, time
import dormouse.track as track
from dormouse.config import TrainCfg
from dormouse.train import fit
steps, run, names = int(sys.argv[1]), sys.argv[2], sys.argv[3]
work, feed_cpu = track.Feed._work, []
def timed(self):
    try:
        work(self)
    finally:
        feed_cpu.append(time.thread_time())  # the feed thread's own CPU seconds, read as it ends
track.Feed._work = timed
t0, cpu0 = time.perf_counter(), time.process_time()
df = fit(TrainCfg(steps=steps), run, progress=False, trackers=names or None)
print(json.dumps({"call": time.perf_counter() - t0, "cpu": time.process_time() - cpu0, "feed_cpu": sum(feed_cpu),
                  "t": df.t.tolist()}))
"""
TARGET = 0.99


def one(steps: int, run: Path, track: str) -> dict:
    "One fit in a fresh process: its call's wall time and its metrics' t column."
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    r = subprocess.run([sys.executable, "-c", ONE, str(steps), str(run), track], capture_output=True, text=True,
                       env=env, timeout=7200)
    if r.returncode:
        raise SystemExit(f"fit failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def rates(m: dict, warm: int) -> dict:
    "Steps per second of a run (over its loop, its steps after `warm`, the whole call), and its feed's CPU share."
    t = m["t"]
    return {"loop": len(t) / t[-1], "steady": (len(t) - warm) / (t[-1] - t[warm - 1]), "call": len(t) / m["call"],
            "feed_share": m["feed_cpu"] / m["cpu"], "feed_cpu": m["feed_cpu"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1800, help="steps per run (default: the default run's 1800)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of one run without and one with")
    ap.add_argument("--warm", type=int, default=100, help="steps left out of the steady ratio")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temporary one, removed)")
    a = ap.parse_args(argv)
    assert 0 < a.warm < a.steps, "--warm must be between 0 and --steps"
    scratch = Path(a.dir or tempfile.mkdtemp(prefix="track_overhead_"))
    print(f"fit with tensorboard+mlflow / without: {a.rounds} round(s) of {a.steps} default-model steps, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    ratios, shares = {"loop": [], "steady": [], "call": []}, []
    try:
        for i in range(a.rounds):
            got = {}
            for track in (("", "tensorboard,mlflow") if i % 2 == 0 else ("tensorboard,mlflow", "")):
                run = scratch / f"r{i}_{'with' if track else 'without'}"
                got[bool(track)] = rates(one(a.steps, run, track), a.warm)
                shutil.rmtree(run)
            for k in ratios:
                ratios[k].append(got[True][k] / got[False][k])
            shares.append(got[True]["feed_share"])
            print(f"round {i + 1}: steps/s without {got[False]['loop']:.3f}, with {got[True]['loop']:.3f}; "
                  + ", ".join(f"{k} {ratios[k][-1]:.4f}" for k in ratios)
                  + f"; the feed's thread used {got[True]['feed_cpu']:.1f} CPU s, {shares[-1]:.2%} of the run's",
                  flush=True)
    finally:
        if a.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    head = statistics.median(ratios["loop"])
    print("medians: " + ", ".join(f"{k} {statistics.median(v):.4f}" for k, v in ratios.items())
          + f"; the feed's CPU share {statistics.median(shares):.2%}")
    if len(ratios["loop"]) > 1 and max(ratios["loop"]) - min(ratios["loop"]) > 1 - TARGET:
        print(f"NOISY: the rounds' loop ratios span {min(ratios['loop']):.4f}-{max(ratios['loop']):.4f}, more than "
              f"the target's margin: measure again with nothing else running")
    print(f"fit with both trackers / without, steps/s over the loop: {head:.4f}x (target >= {TARGET}) "
          f"{'PASS' if head >= TARGET else 'FAIL'}; load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    code = main()
    print(f"({time.time() - t0:.0f} s)")
    sys.exit(code)
