#!/usr/bin/env python3
"""The default training step's time at 1 and at 2 threads, in interleaved rounds: the measurement behind `threads` 2.

One process under MKL's thread-invariant mode (`AUTO,STRICT`, as `fit` runs), one hand loop of the default plan
(`bench/train_overhead.py`'s `HandLoop`: fit's batches and its step, without fit's logging and checkpoints). After
`--warmup` steps, each round takes `--steps` steps at 1 thread and `--steps` at 2 (the order alternates from round to
round), and keeps each side's median step time. Printed per round, and as the range of the rounds' medians; the
results go to bench/results/thread_speed.json (`--out` elsewhere).

Run it ALONE on the 2-core machine: with another job on the second core, 2 threads spin-wait for it and the
measurement says nothing about the default. The load average is recorded with the result. About a minute.

  python bench/thread_speed.py
  python bench/thread_speed.py --rounds 6 --steps 20
"""

import argparse, datetime, json, os, statistics, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dormouse.numerics import mkl_mode, thread_invariant_mode  # noqa: E402
from _results import machine  # noqa: E402  (bench/_results.py: where a result ran)

RESULT = ROOT / "bench" / "results" / "thread_speed.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12, help="timed steps per thread count per round")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=str(RESULT))
    a = ap.parse_args(argv)
    thread_invariant_mode()  # before any product: fixed for the process from here
    import torch
    from dormouse.config import TrainCfg
    from dormouse.data import corpus_for
    from train_overhead import HandLoop

    cfg = TrainCfg()
    hand = HandLoop(cfg, corpus_for(cfg))
    load = os.getloadavg()
    print(f"{machine()}; MKL mode {mkl_mode()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    step = 0
    for _ in range(a.warmup):
        hand.step(step)
        step += 1
    rounds = []
    for r in range(a.rounds):
        med = {}
        for n in (1, 2) if r % 2 == 0 else (2, 1):
            torch.set_num_threads(n)
            times = []
            for _ in range(a.steps):
                t0 = time.perf_counter()
                hand.step(step)
                times.append(time.perf_counter() - t0)
                step += 1
            med[n] = statistics.median(times)
        rounds.append({"1": med[1], "2": med[2]})
        print(f"  round {r}: median step {med[1] * 1e3:.1f} ms at 1 thread, {med[2] * 1e3:.1f} ms at 2")
    lo_hi = {n: [min(x[n] for x in rounds), max(x[n] for x in rounds)] for n in ("1", "2")}
    print(f"rounds' medians: {lo_hi['2'][0] * 1e3:.0f}-{lo_hi['2'][1] * 1e3:.0f} ms at 2 threads, "
          f"{lo_hi['1'][0] * 1e3:.0f}-{lo_hi['1'][1] * 1e3:.0f} ms at 1")
    Path(a.out).write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "machine": machine(), "load": [round(v, 2) for v in load],
        "source": "bench/thread_speed.py", "mkl_mode": mkl_mode(), "steps_per_round": a.steps,
        "median_step_s_range": lo_hi, "rounds": rounds}, indent=1) + "\n")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
