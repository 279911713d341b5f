#!/usr/bin/env python3
"""What the n-gram tables' digest costs against what it replaces, at 2^16 and at 2^22 slots.

For each table size (`dormouse.ngram.NgramTables`, orders 2, 3, 4 and rows of 64 as in `bench/ngram_slots.py` and
`bench/scale.py`: 6 GiB of weight and momentum at 2^22) one process measures:
- a table step: `lookup` of a trainer batch, a small projection's backward, `step()`: the median over the
  `--log-every` steps taken before each digest;
- the kept digest (`NgramTables.digest`, what a fingerprint feeds): it rehashes the rows touched by the `--log-every`
  table steps since the last one; the median over `--repeats`;
- hashing every byte of the tables with sha256 (`tensor_chunks`, what the fingerprint's table part did before the
  digest): one pass;
- the full digest (`NgramTables.full_digest`, every row's hash, what a load would pay without `trust_digest`): one
  pass, checked equal to the kept digest.
And, once, the row hash itself: `dormouse.digest.row_hashes` (torch int64 words) against the same definition in plain
numpy uint64 arithmetic, over 2^18 rows of 64 random float32 in slices of 2^14 rows (as `hash_all` takes them), at
`--threads` threads, best of 3 each, checked equal.

A speed measurement: run it on a quiet machine; the load average is recorded with the result. It needs about 7 GB of
free memory for the big tables (`--big 21` halves it) and about a minute. Printed, and written to
bench/results/digest_cost.json (`--out` elsewhere).

  python bench/digest_cost.py
  python bench/digest_cost.py --big 21 --threads 1
"""

import argparse, datetime, hashlib, json, os, statistics, sys, time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dormouse.data import load_corpus  # noqa: E402
from dormouse.digest import _M1, _M2, _M3, _ROW_KEY, row_hashes  # noqa: E402
from dormouse.ngram import NgramTables  # noqa: E402
from dormouse.rng import splitmix64  # noqa: E402
from dormouse.tables_file import tensor_chunks  # noqa: E402
from _results import machine  # noqa: E402  (bench/_results.py: where a result ran)

RESULT = ROOT / "bench" / "results" / "digest_cost.json"


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def sha256_all(tables: NgramTables) -> None:
    "sha256 over every byte of the tables' weight and momentum: the fingerprint's table part before the digest."
    h = hashlib.sha256()
    for t in (tables.weight, tables.momentum):
        for mv in tensor_chunks(t):
            h.update(mv)


def np_row_hashes(rows: np.ndarray, flat: np.ndarray, kind: int) -> np.ndarray:
    "The row hash's definition in plain numpy uint64 arithmetic (the digest chapter's reference), even `dim` only."
    w, u = rows.view(np.uint64), np.uint64
    with np.errstate(over="ignore"):
        x = w * u(_M1)
        x ^= x >> u(32)
        x *= splitmix64(np.arange(w.shape[1], dtype=np.uint64) ^ u(_ROW_KEY ^ 0xC0)) | u(1)
        h = x.sum(axis=1, dtype=np.uint64)
        for m in (_M2, _M3):
            h ^= h >> u(33)
            h *= u(m)
        h ^= h >> u(33)
        return h * (splitmix64(np.asarray(flat, dtype=np.uint64) ^ u(_ROW_KEY + kind)) | u(1))


def row_hash_speed(dim: int, rows: int = 1 << 18, per_pass: int = 1 << 14) -> dict:
    "Seconds to hash `rows` random rows in slices, torch against numpy (best of 3 each), checked equal."
    data = np.random.default_rng(0).integers(0, 2**32, (rows, dim), dtype=np.uint32).view(np.float32)
    flat = np.arange(rows)

    def run(fn):
        return [fn(data[i:i + per_pass], flat[i:i + per_pass], 0) for i in range(0, rows, per_pass)]

    got = {}
    for name, fn in (("torch", row_hashes), ("numpy", np_row_hashes)):
        got[name] = min(timed(lambda: run(fn))[0] for _ in range(3))
    assert all(np.array_equal(a, b) for a, b in zip(run(row_hashes), run(np_row_hashes))), "torch != numpy"
    return {"rows": rows, "dim": dim, "torch_s": got["torch"], "numpy_s": got["numpy"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=16, help="log2 slots of the small tables")
    ap.add_argument("--big", type=int, default=22, help="log2 slots of the big tables")
    ap.add_argument("--orders", default="2,3,4")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--log-every", type=int, default=100, help="table steps between digests (TrainCfg.log_every)")
    ap.add_argument("--repeats", type=int, default=5, help="digests timed per size")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (TrainCfg.threads)")
    ap.add_argument("--out", default=str(RESULT))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    orders = [int(o) for o in a.orders.split(",")]
    corpus = load_corpus("", 0.05, 128)
    pool = [corpus.batch_at(i, 16, 128)[0] for i in range(64)]  # the trainer's batch shape
    load = os.getloadavg()
    print(f"{machine()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {a.threads} thread(s); "
          f"orders {orders}, rows of {a.dim}, a digest every {a.log_every} table steps")
    sizes = {}
    for log2 in (a.small, a.big):
        t_alloc, tables = timed(lambda: NgramTables(orders, 1 << log2, a.dim, lr=0.05, momentum=0.9))
        proj = torch.linspace(-1, 1, a.dim * 8).view(a.dim, 8)
        steps, digests, i = [], [], 0
        for r in range(a.repeats + 1):  # the first round warms up
            for _ in range(a.log_every):
                t0 = time.perf_counter()
                (tables.lookup(pool[i % len(pool)]) @ proj).sin().sum().backward()
                tables.step()
                steps.append(time.perf_counter() - t0)
                i += 1
            t, kept = timed(tables.digest)
            if r:
                digests.append(t)
        t_sha, _ = timed(lambda: sha256_all(tables))
        t_full, full = timed(tables.full_digest)
        assert full == kept, "the kept digest differs from a full recomputation"
        nbytes = 2 * tables.weight.numel() * 4
        sizes[str(log2)] = {"slots": 1 << log2, "table_bytes": nbytes, "alloc_s": t_alloc,
                            "table_step_s": statistics.median(steps[a.log_every:]),
                            "kept_digest_s": statistics.median(digests), "sha256_all_bytes_s": t_sha,
                            "full_digest_s": t_full}
        s = sizes[str(log2)]
        print(f"  2^{log2} slots ({nbytes / 2**30:.2f} GiB): table step {s['table_step_s'] * 1e3:.2f} ms, kept digest "
              f"after {a.log_every} steps {s['kept_digest_s'] * 1e3:.1f} ms, sha256 of every byte "
              f"{t_sha * 1e3:.0f} ms, full digest {t_full * 1e3:.0f} ms")
        tables = None  # freed before the next size is built
    speed = row_hash_speed(a.dim)
    print(f"  row hash of {speed['rows']} rows of {a.dim}: torch {speed['torch_s'] * 1e3:.0f} ms, numpy "
          f"{speed['numpy_s'] * 1e3:.0f} ms ({speed['numpy_s'] / speed['torch_s']:.2f}x)")
    Path(a.out).write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "machine": machine(), "load": [round(v, 2) for v in load],
        "source": "bench/digest_cost.py", "threads": a.threads, "orders": orders, "dim": a.dim,
        "log_every": a.log_every, "sizes": sizes, "row_hash": speed}, indent=1) + "\n")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
