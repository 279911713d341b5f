#!/usr/bin/env python3
"""What MKL's conditional-bitwise-reproducibility modes cost: the default training step under each mode.

MKL fixes its mode at its first call, for the rest of the process, so each mode runs in its own process (this script
with `--child`, `MKL_CBWR` set in its environment; MKL's default mode with it unset), which reports the mode MKL
says is in effect (`dormouse.numerics.mkl_mode`). Each child builds the default plan's hand loop
(`bench/train_overhead.py`'s `HandLoop`: fit's batches and its step), takes `--warmup` steps, then times `--steps`
steps at `--threads` threads and reports their median. The modes take turns, `--rounds` times; a mode's time is the
median of its rounds' medians, and its cost is that over the time of MKL's default mode. Printed, and written to
bench/results/mkl_modes.json (`--out` elsewhere).

A speed measurement: run it ALONE on a quiet machine; the load average is recorded with the result. A few minutes.

  python bench/mkl_modes.py
  python bench/mkl_modes.py --modes AUTO,STRICT:AVX2,STRICT --rounds 3
"""

import argparse, datetime, json, os, statistics, subprocess, sys, time
from pathlib import Path
from _results import machine  # noqa: E402  (bench/_results.py: where a result ran)

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "mkl_modes.json"
DEFAULT = "default"  # MKL's own default mode: MKL_CBWR unset
MODES = [DEFAULT, "AUTO,STRICT", "AVX2,STRICT", "COMPATIBLE,STRICT"]


def child(a) -> int:
    "One mode, this process: print {mode in effect, median step seconds} as JSON."
    sys.path.insert(0, str(ROOT))
    import torch
    from dormouse.config import TrainCfg
    from dormouse.data import corpus_for
    from dormouse.numerics import mkl_mode
    from train_overhead import HandLoop

    torch.set_num_threads(a.threads)
    cfg = TrainCfg()
    hand = HandLoop(cfg, corpus_for(cfg))
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        hand.step(step)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"mode": mkl_mode(), "median_step_s": statistics.median(times[a.warmup:])}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default=":".join(MODES), help="modes separated by ':' ('default': MKL_CBWR unset)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(RESULT))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a)
    modes = a.modes.split(":")
    if DEFAULT not in modes:
        modes.insert(0, DEFAULT)
    load = os.getloadavg()
    print(f"{machine()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {a.threads} thread(s)")
    got = {m: [] for m in modes}
    for r in range(a.rounds):
        for mode in modes:
            env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
            if mode != DEFAULT:
                env["MKL_CBWR"] = mode
            cmd = [sys.executable, __file__, "--child", "--steps", str(a.steps), "--warmup", str(a.warmup),
                   "--threads", str(a.threads)]
            out = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
            got[mode].append(out)
            print(f"  round {r}: {mode:18s} (MKL says {out['mode']}): median step {out['median_step_s'] * 1e3:.1f} ms")
    med = {m: statistics.median(x["median_step_s"] for x in v) for m, v in got.items()}
    ratio = {m: med[m] / med[DEFAULT] for m in modes}
    for m in modes:
        print(f"{m:18s} median step {med[m] * 1e3:7.1f} ms: {ratio[m]:.2f}x MKL's default mode")
    Path(a.out).write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "machine": machine(), "load": [round(v, 2) for v in load],
        "source": "bench/mkl_modes.py", "threads": a.threads, "median_step_s": med, "ratio_to_default": ratio,
        "rounds": got}, indent=1) + "\n")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
