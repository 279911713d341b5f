#!/usr/bin/env python3
"""A researcher's own corpus at several sizes: `dormouse train --data DIR` as a new user runs it, timed and measured.

For each size it builds a directory corpus from real text installed on this machine (the .py, .txt, .rst, .md, .html,
.xml, .css, .js, .json, .c and .h files of Python's library, the installed packages and /usr/share, each file once by
its content, in a fixed order, taken until the size is reached), or, for a size beyond the real text, that text
repeated with a per-copy byte perturbation (every 61st byte of copy c shifted by c: for the memory bound only). Then it
runs `dormouse train --data DIR --steps N` with an empty DORMOUSE_CACHE under `/usr/bin/time -v`, and prints per size:

- preparation: process start to the first step (imports, the corpus's build and hash, its match codes), and s/MB;
- steps/s of the training loop (its metrics' `t` column);
- the final score's seconds (the held-out sample scored, the overlap, the outside sample, the count model's pass over
  the training text, the quick compressors);
- the peak resident memory of the process, as `/usr/bin/time -v` reports it (Maximum resident set size);

and the slope of each against the corpus's size (least squares). The results go to bench/results/corpus_scale.json.
Run it ALONE on the machine (no suite, no mutant harness beside it): a second job on the other core slows both.

With `--prove MB` it then checks every guarantee at that size, from the command line as a user would: a run killed
(SIGKILL, after its second checkpoint) and resumed is bitwise the uninterrupted one (`dormouse compare`), `dormouse
verify` proves it, the corpus at a new path resumes (pinned by its bytes), and one edited byte is refused.

  python bench/corpus_scale.py                      # 30, 120, 280 MB and 1 GB (about an hour on two cores)
  python bench/corpus_scale.py --sizes 30,120       # a quicker look
  python bench/corpus_scale.py --sizes 280 --prove 280
"""

import argparse, hashlib, json, os, re, subprocess, sys, sysconfig, tempfile, time
from pathlib import Path

SUFFIXES = (".py", ".txt", ".rst", ".md", ".html", ".xml", ".css", ".js", ".json", ".c", ".h")
ROOTS = sorted({sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}) + ["/usr/share"]
RESULT = Path(__file__).resolve().parent / "results" / "corpus_scale.json"


def real_files(limit: int) -> list[Path]:
    "Real text files, each content once, in a fixed order, until `limit` bytes."
    out, seen, got = [], set(), 0
    for root in ROOTS:
        for dp, dn, fn in sorted(os.walk(root)):
            dn.sort()
            if "__pycache__" in dp:
                continue
            for f in sorted(fn):
                p = Path(dp) / f
                if not f.endswith(SUFFIXES) or p.is_symlink() or not p.is_file():
                    continue
                raw = p.read_bytes()
                h = hashlib.sha256(raw).digest()
                if h in seen or not raw:
                    continue
                seen.add(h)
                out.append(p)
                got += len(raw)
                if got >= limit:
                    return out
    return out


def build(dst: Path, size: int) -> int:
    "A directory corpus of about `size` bytes of real text (copies perturbed beyond the real text); its bytes."
    files = real_files(size)
    real = sum(p.stat().st_size for p in files)
    got, copy = 0, 0
    while got < size:
        for i, p in enumerate(files):
            raw = p.read_bytes()
            if copy:
                b = bytearray(raw)
                b[::61] = bytes((x + copy) % 256 for x in b[::61])
                raw = bytes(b)
            out = dst / f"copy{copy}" / f"{i:06d}_{p.name}"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(raw)
            got += len(raw)
            if got >= size:
                break
        copy += 1
        if real == 0:
            sys.exit("corpus_scale: no real text found on this machine")
    return got


def run(data: Path, steps: int, cache: Path, run_dir: Path) -> dict:
    "One `dormouse train` under /usr/bin/time -v: its phases' seconds (its own lines and records) and peak RSS."
    exe = Path(sys.executable).with_name("dormouse")
    env = dict(os.environ, DORMOUSE_CACHE=str(cache))
    env.pop("DORMOUSE_SCORE_BYTES", None)
    cmd = ["/usr/bin/time", "-v", str(exe), "train", "--data", str(data), "--run-dir", str(run_dir), "--steps",
           str(steps), "--log-every", str(steps), "--ckpt-every", str(steps), "--eval-every", str(steps)]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    out = [(time.time() - t0, line) for line in proc.stdout]
    err = proc.stderr.read()
    proc.wait()
    wall = time.time() - t0
    if proc.returncode:
        sys.exit(f"corpus_scale: dormouse train failed ({proc.returncode}):\n{err[-3000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    loop = rows[-1]["t"]
    t_score = next((t for t, line in out if line.startswith("scoring the held-out sample")), wall)
    score = re.search(r"^held-out score: (\d+\.\d+) bits/byte", "".join(x for _, x in out), re.M)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)[1]) * 1024
    prep_lines = [x for x in err.splitlines() if re.match(r"(building|hashing|coding|counting|reading) .*: .* in ", x)]
    return {"wall_s": wall, "prep_s": t_score - loop, "loop_s": loop,
            "steps_per_s": len(rows) / loop, "score_s": wall - t_score, "peak_rss": rss,
            "bits_per_byte": float(score[1]) if score else None, "prep_lines": prep_lines}


def cli(*args, env=None) -> subprocess.CompletedProcess:
    "`dormouse ARGS`, as a user runs it."
    exe = Path(sys.executable).with_name("dormouse")
    return subprocess.run([str(exe), *map(str, args)], env=env, capture_output=True, text=True)


def prove(data: Path, tmp: Path, steps: int = 60) -> dict:
    "Killed and resumed = uninterrupted, verified, pinned by bytes at a new path, an edited byte refused."
    env = dict(os.environ, DORMOUSE_CACHE=str(tmp / "cache"))
    common = ["--data", data, "--steps", steps, "--ckpt-every", steps // 3, "--log-every", 10, "--no-eval", "--quiet"]
    a = cli("train", "--run-dir", tmp / "A", *common, env=env)
    exe = Path(sys.executable).with_name("dormouse")
    b = subprocess.Popen([str(exe), "train", "--run-dir", str(tmp / "B"), *map(str, common)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mark = tmp / "B" / "ckpt" / f"step_{2 * (steps // 3):06d}.dmck"
    while not mark.exists() and b.poll() is None:
        time.sleep(0.05)
    b.kill()
    b.wait()
    killed_at = len((tmp / "B" / "metrics.jsonl").read_text().splitlines())
    resumed = cli("train", "--run-dir", tmp / "B", *common, "--resume", env=env)
    same = cli("compare", tmp / "A", tmp / "B", env=env)
    verified = cli("verify", tmp / "B", "--quiet", env=env)
    moved = data.with_name("moved")
    os.link(data, moved) if data.is_file() else os.symlink(data, moved)  # the same bytes at a new path
    more = cli("train", "--run-dir", tmp / "B", "--data", moved, "--steps", steps + 10, "--resume", "--no-eval",
               "--quiet", env=env)
    edited = tmp / "edited.bin"
    raw = bytearray(Path(data).read_bytes() if data.is_file() else b"")
    out = {"uninterrupted": a.returncode, "killed_after_rows": killed_at, "resumed": resumed.returncode,
           "compare": same.stdout.strip().splitlines()[-1:], "compare_rc": same.returncode,
           "verify_rc": verified.returncode, "verify": verified.stdout.strip().splitlines()[-1:],
           "moved_resume_rc": more.returncode}
    if raw:
        raw[len(raw) // 2] ^= 1
        edited.write_bytes(bytes(raw))
        refused = cli("train", "--run-dir", tmp / "B", "--data", edited, "--steps", steps + 20, "--resume", "--quiet",
                      env=env)
        out.update(edited_rc=refused.returncode, edited=refused.stderr.strip()[:300])
    return out


def slope(xs: list[float], ys: list[float]) -> float:
    "Least-squares slope of ys on xs."
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="30,120,280,1024", help="corpus sizes in MB (2**20 bytes), comma-separated")
    ap.add_argument("--steps", type=int, default=20, help="training steps per run")
    ap.add_argument("--out", default=str(RESULT), help="where the JSON result goes")
    ap.add_argument("--prove", type=int, default=0, help="also prove the guarantees at this size (MB), from the CLI")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"load avg before: {os.getloadavg()[0]:.2f}", flush=True)
    results = []
    for mb in sizes:
        with tempfile.TemporaryDirectory(prefix=f"dormouse_scale_{mb}_") as tmp:
            data = Path(tmp) / "corpus"
            n = build(data, mb << 20)
            r = run(data, a.steps, Path(tmp) / "cache", Path(tmp) / "run")
        r.update(mb=n / 2**20, prep_s_per_mb=r["prep_s"] / (n / 2**20))
        results.append(r)
        print(f"{n / 2**20:8.1f} MB: preparation {r['prep_s']:7.1f} s ({r['prep_s_per_mb']:.2f} s/MB), "
              f"{r['steps_per_s']:.2f} steps/s, final score {r['score_s']:6.1f} s, peak RSS "
              f"{r['peak_rss'] / 2**30:.2f} GB, held-out {r['bits_per_byte']} bits/byte", flush=True)
        for line in r["prep_lines"]:
            print("           ", line)
    if len(results) > 1:
        xs = [r["mb"] for r in results]
        slopes = {k: slope(xs, [r[k] for r in results]) for k in ("prep_s", "score_s", "peak_rss")}
        print(f"slopes per MB: preparation {slopes['prep_s']:.3f} s, final score {slopes['score_s']:.3f} s, "
              f"peak RSS {slopes['peak_rss'] / 2**20:.2f} MB")
    else:
        slopes = {}
    proof = {}
    if a.prove:
        with tempfile.TemporaryDirectory(prefix=f"dormouse_prove_{a.prove}_") as tmp:
            data = Path(tmp) / "corpus.bin"
            build(Path(tmp) / "dir", a.prove << 20)
            with open(data, "wb") as f:  # one file: its bytes can be moved and edited
                for p in sorted((Path(tmp) / "dir").rglob("*")):
                    if p.is_file():
                        f.write(p.read_bytes())
            proof = prove(data, Path(tmp))
        print(json.dumps(proof, indent=1))
    print(f"load avg after: {os.getloadavg()[0]:.2f}")
    Path(a.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "steps": a.steps, "runs": results,
                                       "slopes_per_mb": slopes, "proof": proof}, indent=1) + "\n")


if __name__ == "__main__":
    main()
