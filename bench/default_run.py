#!/usr/bin/env python3
"""The default run as a new user runs it: `dormouse train` in a fresh run directory, timed from the outside.

Runs `dormouse train --run-dir <fresh dir>` (the console script) (every default, every guarantee on) in a subprocess
and prints its wall time split into what the run's own records say: start-up (process start to the first step), the
training steps (the metrics' `t` column: evals, fingerprints and checkpoints included), and the final score (`fit`'s
scorecard: the held-out sample (static; adapting too with DORMOUSE_SCORE_ADAPT=1), the overlap, the outside sample,
the quick compressors). Then the lines `dormouse train` printed: the scorecard. With `--fresh-cache` the corpus
cache starts empty, as on a fresh clone (the default corpus is built and the compressors run once, adding to the
wall time); by default the cache as it is.

The target is <= 300 s on the 2-core development machine, ALONE: a second job on the other core makes two threads
slower than one (spin-waiting), so run this on a quiet machine only. It prints the load average before and after.

  python bench/default_run.py                # the run as the README's first command runs it (cache warm)
  python bench/default_run.py --fresh-cache  # as on a fresh clone
  python bench/default_run.py -- --steps 50  # extra arguments go to dormouse train (a smoke run)

A run with no extra arguments writes bench/results/default_run.json: when and where it ran, the wall time and its
parts, the peak RSS of the run's process, and the report's lines, which the scorecard chapter renders.
"""

import argparse, datetime, json, os, platform, re, resource, subprocess, sys, tempfile, time
from pathlib import Path

TARGET_S = 300.0
RESULT = Path(__file__).parent / "results" / "default_run.json"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fresh-cache", action="store_true", help="an empty DORMOUSE_CACHE, as on a fresh clone")
    ap.add_argument("extra", nargs="*", help="arguments passed on to dormouse train (after --)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dormouse_default_") as tmp:
        env = dict(os.environ)
        env.pop("DORMOUSE_SCORE_BYTES", None)  # the default score, as a user gets it
        if a.fresh_cache:
            env["DORMOUSE_CACHE"] = str(Path(tmp) / "cache")
        run = Path(tmp) / "run"
        exe = Path(sys.executable).with_name("dormouse")  # the console script README's command runs, not `-m`
        if not exe.is_file():
            sys.exit(f"default_run: no `dormouse` script beside {sys.executable}: pip install -e . in this venv first")
        cmd = [str(exe), "train", "--run-dir", str(run), "--quiet", *a.extra]
        print(f"load avg before: {os.getloadavg()[0]:.2f}; dormouse {' '.join(cmd[1:])}", flush=True)
        t0 = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        lines = [(time.time() - t0, line) for line in proc.stdout]  # each line with when it came
        err = proc.stderr.read()
        proc.wait()
        wall = time.time() - t0
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        lineage = [json.loads(line) for line in (run / "lineage.jsonl").read_text().splitlines() if line.strip()]
    out = "".join(line for _, line in lines)
    sys.stdout.write(out)
    sys.stderr.write(err)
    fit_s = rows[-1]["t"] if rows else float("nan")
    evals = [r for r in rows if any(k.startswith("eval_cold_d") for k in r)]
    m = re.search(r"^held-out score: (\d+\.\d+) bits/byte", out, re.M)
    t_score = next((t for t, line in lines if line.startswith("scoring the held-out sample")), wall)
    t_held = next((t for t, line in lines if line.startswith("held-out score: ")), wall)
    print(f"\nexit status {proc.returncode}; {len(rows)} steps, {len(evals)} in-loop evals, {len(lineage)} segment(s)")
    print(f"wall {wall:.1f} s = start-up and corpus {t_score - fit_s:.1f} s + training loop {fit_s:.1f} s (steps, "
          f"evals, fingerprints, checkpoints) + final score {t_held - t_score:.1f} s (held-out sample, overlap, "
          f"outside sample, quick compressors) + the rest {wall - t_held:.1f} s")
    print(f"held-out bits/byte scored like a compressor: {m.group(1) if m else 'not printed'}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # bytes: the run's process (the largest)
    print(f"peak RSS of the run's process: {peak / 1e9:.2f} GB")
    print(f"wall {wall:.1f} s vs target {TARGET_S:.0f} s: {'PASS' if wall <= TARGET_S else 'MISS'}   "
          f"(load avg after: {os.getloadavg()[0]:.2f}; a busy machine says nothing about the target)")
    if not a.extra and proc.returncode == 0 and m:
        report = out.splitlines()
        first = next(i for i, line in enumerate(report) if line.startswith("held-out score: "))
        report = [report[first]] + [line for line in report[first + 1:] if line.startswith("  ")]  # its lines only
        RESULT.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "fresh_cache": a.fresh_cache, "wall_s": round(wall, 1), "startup_and_corpus_s": round(t_score - fit_s, 1),
            "training_s": round(fit_s, 1), "score_s": round(t_held - t_score, 1), "peak_rss_bytes": peak,
            "steps": len(rows), "headline_bits_per_byte": float(m.group(1)), "report": report}, indent=1) + "\n")
        print(f"written: {RESULT}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
