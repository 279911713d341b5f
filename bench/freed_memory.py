#!/usr/bin/env python3
"""What the page faults of freed memory cost the default run: its start-up and the parts of its final score, timed in
a process with glibc's default allocator (every large block freed goes back to the kernel, and the next one is
page-faulted in afresh) against a process that keeps what it frees (`console.keep_freed_memory`, which the
`dormouse` console script sets).

Each arm is a fresh process with an empty corpus cache of its own (DORMOUSE_CACHE in a scratch directory), running
`fit(TrainCfg(steps=--steps), score=True)`: the default plan, a short training (the score's work does not depend on
it), and the final score. The parts are timed where they run, by wrapping the kit's functions:
  start-up                 `train.pin_inputs`: the corpus built and its match codes
  held-out forward         the held-out sample's `scorecard._model_bits` (its codes are the corpus's, cached)
  shared strings           `scorecard.shared_bytes`
  outside codes            `score.text_codes` inside the outside sample's `_model_bits`
  outside forward          the rest of the outside sample's `_model_bits`
  count model              `scorecard._counts`, the held-out and outside samples together
It prints each part's seconds in both arms and their sums, and writes them to bench/results/freed_memory.json (when
and where it ran, the command), which the console chapter renders. The arms alternate over --rounds rounds (medians).
Run it ALONE on the machine: a second job on the other core moves every figure.

  .venv/bin/python bench/freed_memory.py [--steps 20] [--rounds 1] [--out F]
"""

import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "freed_memory.json"
ARMS = ("default", "kept")
PARTS = {  # key: the part as the result file and the console chapter name it
    "startup": "corpus and its match codes (start-up)",
    "heldout_forward": "held-out static forward",
    "shared_bytes": "shared 64-byte strings (`heldout.shared_bytes`)",
    "outside_codes": "outside sample's match codes (`data.text_codes`)",
    "outside_forward": "outside sample's forward",
    "counts": "count model, held-out and outside together",
}


def worker(arm: str, steps: int, run: Path) -> None:
    "One arm in this fresh process: the allocator as `arm` says, the run, its parts' seconds as one JSON line."
    from dormouse import console, score, scorecard, train
    from dormouse.config import TrainCfg
    if arm == "kept":
        assert console.keep_freed_memory(), "glibc did not take the setting"
    took = dict.fromkeys(PARTS, 0.0)
    state = {"bits_calls": 0, "codes": 0.0}

    def timed(module, name, account):
        real = getattr(module, name)

        def wrapper(*args, **kw):
            t = time.perf_counter()
            try:
                return real(*args, **kw)
            finally:
                account(time.perf_counter() - t)
        setattr(module, name, wrapper)

    def bits(dt):  # the first call scores the held-out sample, the second the outside sample
        state["bits_calls"] += 1
        if state["bits_calls"] == 1:
            took["heldout_forward"] += dt - state["codes"]
        else:
            took["outside_codes"] += state["codes"]
            took["outside_forward"] += dt - state["codes"]
        state["codes"] = 0.0

    timed(train, "pin_inputs", lambda dt: took.__setitem__("startup", took["startup"] + dt))
    timed(scorecard, "_model_bits", bits)
    timed(score, "text_codes", lambda dt: state.__setitem__("codes", state["codes"] + dt))
    timed(scorecard, "shared_bytes", lambda dt: took.__setitem__("shared_bytes", took["shared_bytes"] + dt))
    timed(scorecard, "_counts", lambda dt: took.__setitem__("counts", took["counts"] + dt))
    df = train.fit(TrainCfg(steps=steps), run, progress=False, score=True)
    assert df.attrs["score"] is not None, f"no final score: {df.attrs.get('score_note')}"
    print(json.dumps(took))


def launch(arm: str, steps: int, tmp: Path) -> dict:
    "Run `worker` in a fresh process with an empty cache of its own; its JSON line."
    env = {**os.environ, "DORMOUSE_CACHE": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
    for knob in ("DORMOUSE_SCORE_BYTES", "DORMOUSE_SCORE_MIX", "DORMOUSE_SCORE_ADAPT", "MALLOC_MMAP_MAX_",
                 "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        env.pop(knob, None)  # the default score, glibc's default allocator
    r = subprocess.run([sys.executable, __file__, "--worker", arm, str(tmp / "run"), "--steps", str(steps)],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"freed_memory: the {arm} arm failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps of each run (the score is the default's)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the two arms, alternating (medians)")
    ap.add_argument("--out", default=str(RESULT), help="where the JSON result goes")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker[0], a.steps, Path(a.worker[1]))
        return 0
    load_start = os.getloadavg()[0]
    print(f"load average before: {load_start:.2f}", flush=True)
    got = {arm: [] for arm in ARMS}
    for i in range(a.rounds):
        for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
            with tempfile.TemporaryDirectory(prefix=f"freed_memory_{arm}_") as tmp:
                got[arm].append(launch(arm, a.steps, Path(tmp)))
            print(f"round {i + 1}, {arm}: " + ", ".join(f"{k} {v:.1f} s" for k, v in got[arm][-1].items()), flush=True)
    parts = [{"part": label, **{f"{arm}_s": round(statistics.median(r[key] for r in got[arm]), 1) for arm in ARMS}}
             for key, label in PARTS.items()]
    total = {arm: round(sum(p[f"{arm}_s"] for p in parts), 1) for arm in ARMS}
    print(f"{'part':<52} {'default':>8} {'kept':>8}")
    for p in parts:
        print(f"{p['part']:<52} {p['default_s']:8.1f} {p['kept_s']:8.1f}")
    saved = round(total["default"] - total["kept"], 1)
    print(f"{'in all':<52} {total['default']:8.1f} {total['kept']:8.1f}   saved {saved:.1f} s; load average after: "
          f"{os.getloadavg()[0]:.2f}")
    Path(a.out).write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "source": " ".join(["measured by bench/freed_memory.py", *(argv if argv is not None else sys.argv[1:])]),
        "plan": f"the default plan, {a.steps} training steps, a fresh corpus cache", "parts": parts,
        "total_default_s": total["default"], "total_kept_s": total["kept"],
        "saved_s": saved}, indent=1) + "\n")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
