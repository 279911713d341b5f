#!/usr/bin/env python3
"""What watching a run costs: `fit` with both trackers (TensorBoard and MLflow, default settings: event files and a
SQLite store in the run directory) over `fit` without any, at the default cadence (TrainCfg's defaults: the default
model, a row per step, a fingerprint every 100 steps, eval every 450; progress off).

Two parts, both in one fresh process:
  start   what the trackers take before the first step: the feed opens them (importing tensorboard and mlflow, the
          store copied from the cache or made, the event writer) and the first step waits for that. The first run of
          the process pays the imports, as a user's run does; it is timed on its own.
  steady  the loop once they are open: runs without and with trackers alternate within the process (the order swapped
          every pair), each --steps steps; per pair, steps/s after --warm steps, with / without. On a shared 2-core
          machine whole runs in fresh processes swing by 5-10% with what else runs, far more than the 1% asked, so
          pairs a few seconds apart in one process are what can resolve it: printed as mean +- standard error, and
          median, over the pairs.
and the figure the target asks for, a default run (1800 steps) with both trackers / without, start included, from the
two: T / (T / steady + start), where T is the default run's loop without trackers at the measured rate. Beside them,
less at the mercy of neighbours, the CPU seconds the feed's thread used (its own clock: opening, every row, every
flush, closing with the loss plot) as a share of its run's process CPU seconds.
The default run's figure is printed twice: from the mean ratio (with its standard error) and from the median.
A benchmark reports; it does not gate: the exit code is 0 unless it crashes. Run it with nothing else running. The
figures, as printed, go to bench/results/track_overhead.json (when and where it ran, and the command), which the track
chapter renders.
Usage: .venv/bin/python bench/track_overhead.py [--steps 200] [--pairs 10] [--warm 20] [--out F]
"""

from __future__ import annotations
import argparse, json, os, platform, shutil, statistics, sys, tempfile, time
from pathlib import Path

import dormouse.track as track
from dormouse.config import TrainCfg
from dormouse.train import fit

TARGET = 0.99
RESULT = Path(__file__).resolve().parent / "results" / "track_overhead.json"
BOTH = "tensorboard,mlflow"
opens = []  # seconds each Feed took to open its trackers (the first step waits for it)
shares = []  # the feed thread's CPU seconds as a share of its run's process CPU seconds
feed_cpu = []  # CPU seconds each Feed's thread used (its own clock, read as it ends)
_enter, _work = track.Feed.__enter__, track.Feed._work


def timed_enter(self):
    t0 = time.perf_counter()
    out = _enter(self)
    if self.thread is not None:
        opens.append(time.perf_counter() - t0)
    return out


def timed_work(self):
    try:
        _work(self)
    finally:
        feed_cpu.append(time.thread_time())


track.Feed.__enter__, track.Feed._work = timed_enter, timed_work


def rate(run: Path, steps: int, warm: int, trackers) -> float:
    "Steps per second of a fresh run's steps after `warm` (fit's own column t: wall seconds at the end of each step)."
    cpu = time.process_time()
    t = fit(TrainCfg(steps=steps), run, progress=False, trackers=trackers).t.tolist()
    if trackers:
        shares.append(feed_cpu[-1] / (time.process_time() - cpu))
    shutil.rmtree(run)
    return (len(t) - warm) / (t[-1] - t[warm - 1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per run")
    ap.add_argument("--pairs", type=int, default=10, help="pairs of one run without and one with")
    ap.add_argument("--warm", type=int, default=20, help="steps left out of each run's rate")
    ap.add_argument("--out", default=str(RESULT), help="where the JSON result goes")
    a = ap.parse_args(argv)
    t0, load_start = time.time(), os.getloadavg()[0]
    assert 1 < a.warm < a.steps, "--warm must be between 1 and --steps"
    scratch = Path(tempfile.mkdtemp(prefix="track_overhead_"))
    print(f"fit with {BOTH} / without: {a.pairs} pairs of {a.steps} default-model steps in one process, "
          f"{os.cpu_count()} CPUs, load average {load_start:.2f} at the start", flush=True)
    try:
        rate(scratch / "first", a.steps, a.warm, BOTH)
        first = opens[0]
        ratios, without, rows = [], [], []
        for i in range(a.pairs):
            got = {}
            for tr in ((None, BOTH) if i % 2 == 0 else (BOTH, None)):
                got[tr] = rate(scratch / f"p{i}_{tr}", a.steps, a.warm, tr)
            ratios.append(got[BOTH] / got[None])
            without.append(got[None])
            rows.append({"without_steps_per_s": round(got[None], 3), "with_steps_per_s": round(got[BOTH], 3),
                         "ratio": round(ratios[-1], 4)})
            print(f"pair {i + 1}: steps/s without {got[None]:.3f}, with {got[BOTH]:.3f}: {ratios[-1]:.4f}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    mean, se = statistics.mean(ratios), statistics.stdev(ratios) / len(ratios) ** 0.5
    later = statistics.median(opens[1:])
    print(f"start: the trackers opened in {first:.2f} s before the first step of the process's first run (imports "
          f"included), {later:.2f} s in later runs (median)")
    print(f"steady: steps/s with / without, mean {mean:.4f} +- {se:.4f} (se), median {statistics.median(ratios):.4f} "
          f"over {len(ratios)} pairs; the feed's thread used {statistics.median(shares[1:]):.2%} of its run's CPU "
          f"seconds (median; opening included)")
    loop = TrainCfg().steps / statistics.median(without)
    whole = loop / (loop / mean + first)
    whole_median = loop / (loop / statistics.median(ratios) + first)
    load_end = os.getloadavg()[0]
    print(f"a default run ({TrainCfg().steps} steps, {loop:.0f} s of loop here) with both trackers / without, start "
          f"included: {whole:.4f} (target >= {TARGET}) {'PASS' if whole >= TARGET else 'FAIL'}, +- {se:.4f}; "
          f"{whole_median:.4f} from the median; load average {load_end:.2f} at the end")
    wall = time.time() - t0
    print(f"({wall:.0f} s)")
    Path(a.out).write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "source": " ".join(["measured by bench/track_overhead.py", *(argv if argv is not None else sys.argv[1:])]),
        "trackers": BOTH, "steps": a.steps, "warm": a.warm, "load_avg_start": round(load_start, 2),
        "load_avg_end": round(load_end, 2), "pairs": rows, "open_first_s": round(first, 2),
        "open_later_s": round(later, 2), "ratio_mean": round(mean, 4), "ratio_se": round(se, 4),
        "ratio_median": round(statistics.median(ratios), 4), "feed_cpu_share": round(statistics.median(shares[1:]), 4),
        "default_run_steps": TrainCfg().steps, "default_run_loop_s": round(loop),
        "default_run_ratio_mean": round(whole, 4), "default_run_ratio_median": round(whole_median, 4), "target": TARGET,
        "wall_s": round(wall)}, indent=1) + "\n")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
