#!/usr/bin/env python3
"""What a new MLflow store costs a fresh run before its first step: MLflow making the SQLite store itself (its schema
migrations, as `MlflowClient(...).search_experiments()` runs them) against `track_mlflow.empty_store` copying the
empty store it keeps in dormouse's cache.

Each arm runs --repeats times, alternating, each time in a fresh process (nothing MLflow or SQLAlchemy keep in a
process carries over) with the imports done before the clock starts; one process first makes the cached empty store
(in a scratch DORMOUSE_CACHE, so the user's cache is left alone). It prints the median CPU seconds (the process's
clock: every thread) and wall seconds of each arm, and writes them to bench/results/mlflow_store.json (when and where
it ran, the versions, the command), which the track_mlflow chapter renders. CPU seconds move little with what else
runs; the wall seconds want a quiet machine.

  .venv/bin/python bench/mlflow_store.py [--repeats 5] [--out F]
"""

import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "mlflow_store.json"
ARMS = ("made", "copied")


def worker(arm: str, dest: Path) -> None:
    "One timed store at `dest`, made by MLflow or copied by empty_store; prints one JSON line."
    import mlflow, sqlalchemy
    from mlflow.tracking import MlflowClient
    from dormouse.track_mlflow import _dispose, empty_store
    cpu, wall = time.process_time(), time.perf_counter()
    if arm == "made":
        client = MlflowClient(tracking_uri=f"sqlite:///{dest.resolve()}")
        client.search_experiments()  # makes the tables: MLflow's migrations
        _dispose(client)
    else:
        empty_store(dest)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert dest.stat().st_size > 0
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "mlflow": mlflow.__version__,
                      "sqlalchemy": sqlalchemy.__version__}))


def launch(arm: str, dest: Path, cache: Path) -> dict:
    "Run `worker` in a fresh process; its JSON line."
    env = {**os.environ, "DORMOUSE_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, __file__, "--worker", arm, str(dest)], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"mlflow_store: the {arm} arm failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per arm")
    ap.add_argument("--out", default=str(RESULT), help="where the JSON result goes")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker[0], Path(a.worker[1]))
        return 0
    load_start = os.getloadavg()[0]
    got = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="mlflow_store_") as tmp:
        cache = Path(tmp) / "cache"
        first = launch("copied", Path(tmp) / "first.db", cache)  # makes the cached empty store, then copies it
        for i in range(a.repeats):
            for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
                got[arm].append(launch(arm, Path(tmp) / f"{arm}{i}.db", cache))
    med = {arm: {k: statistics.median(r[k] for r in rows) for k in ("cpu_s", "wall_s")} for arm, rows in got.items()}
    print(f"a new MLflow SQLite store (mlflow {first['mlflow']}, sqlalchemy {first['sqlalchemy']}), {a.repeats} fresh "
          f"processes an arm, medians; {os.cpu_count()} CPUs, load average {load_start:.2f} at the start")
    print(f"  made by MLflow (its migrations): {med['made']['cpu_s']:.3f} CPU s, {med['made']['wall_s']:.3f} s wall")
    print(f"  copied by empty_store from the cache: {med['copied']['cpu_s']:.4f} CPU s, "
          f"{med['copied']['wall_s']:.4f} s wall (the cache's first: {first['wall_s']:.3f} s wall)")
    Path(a.out).write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "source": " ".join(["measured by bench/mlflow_store.py", *(argv if argv is not None else sys.argv[1:])]),
        "mlflow": first["mlflow"], "sqlalchemy": first["sqlalchemy"], "repeats": a.repeats,
        "load_avg_start": round(load_start, 2), "load_avg_end": round(os.getloadavg()[0], 2),
        "made_cpu_s": round(med["made"]["cpu_s"], 3), "made_wall_s": round(med["made"]["wall_s"], 3),
        "copied_cpu_s": round(med["copied"]["cpu_s"], 4), "copied_wall_s": round(med["copied"]["wall_s"], 4),
        "first_copied_wall_s": round(first["wall_s"], 3)}, indent=1) + "\n")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
