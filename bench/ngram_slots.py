#!/usr/bin/env python3
"""n-gram step time with 2^16 vs 2^22 slots: the cost must scale with touched rows, not table size.

One "step" is what the trainer does per step with the tables: `lookup` of a [batch, seq_len] byte batch,
a small projection (dim -> d_model) and a backward through it, then `NgramTables.step()` (sparse Nesterov
on the touched rows). Both table sizes live in the same process and their steps alternate one by one
(small, big, small, big, ...), so bursts of load on a shared machine hit both alike. After a few warm-up
steps each, one repeat is one small step followed by one big step; the printed times are the medians over
the repeats, and the gated ratio is the median over the repeats of big/small within each repeat (a paired
ratio: the two steps of a pair ran within milliseconds of each other, under the same load, so a burst that
lands on one half of the run cannot tilt the result; the ratio of the two medians is printed as well).

Bytes: by default the trainer's own batches (`dormouse.data` default corpus, `batch_at(i)`), a fresh batch
per step. `--data random` uses keyed uniform bytes instead: the worst case, where almost every n-gram is a
new row, so a step reads ~3x more rows and they are scattered over the whole table (over 6 GiB at 2^22,
far outside any cache); it is reported, and gated the same way when chosen.

One thread by default (`--threads`): the question is how the per-row memory cost scales with the table, and
on a shared machine extra threads mostly measure the neighbours. The load average is printed with the result.

Both tables are allocated by `NgramTables` (huge-page-advised memory on Linux, every page faulted in at
construction), so no step pays first-touch page faults; a table loaded from a tables file is fully written too.

Prints e.g. `ngram step time 2^22 / 2^16 slots: 1.03x (target <= 1.10)` and exits 1 when over target. The result
goes to bench/results/ngram_slots.json under the key of its `--data` (a run on the other bytes keeps its entry), with
the date, the machine and the load average (`--out` elsewhere).
Usage: .venv/bin/python bench/ngram_slots.py [--data corpus|random] [--small 16] [--big 22] [--repeats 400] ...
"""

import argparse, datetime, json, os, statistics, sys, time
from pathlib import Path
import numpy as np
import torch
from dormouse.ngram import NgramTables
from dormouse.rng import keyed_normal, keyed_randint
from _results import machine  # noqa: E402  (bench/_results.py: where a result ran)

STREAM_BENCH = 101  # keyed stream for the benchmark's bytes and projection (not a training stream)
RESULT = Path(__file__).resolve().parent / "results" / "ngram_slots.json"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=16, help="log2 slots of the small table")
    ap.add_argument("--big", type=int, default=22, help="log2 slots of the big table")
    ap.add_argument("--orders", type=str, default="2,3,4")
    ap.add_argument("--dim", type=int, default=64, help="row width (ModelCfg.ngram_dim)")
    ap.add_argument("--d-model", type=int, default=128, help="projection width (ModelCfg.d_model)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; 1 by default: on a shared machine more threads than free cores make the "
        "median measure the neighbours (OpenMP waits), not the tables",
    )
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps per table before timing")
    ap.add_argument("--repeats", type=int, default=400, help="timed steps per table, alternating (median is reported)")
    ap.add_argument("--pool", type=int, default=256, help="distinct batches cycled through")
    ap.add_argument(
        "--data", choices=["corpus", "random"], default="corpus", help="trainer batches, or keyed random bytes"
    )
    ap.add_argument("--target", type=float, default=1.10, help="fail when big/small exceeds this")
    ap.add_argument("--out", default=str(RESULT), help="the JSON result file (updated under the --data key)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    orders = [int(o) for o in a.orders.split(",")]

    n = a.batch * a.seq
    if a.data == "corpus":
        from dormouse.data import load_corpus

        corpus = load_corpus("", 0.05, a.seq)
        pool = [corpus.batch_at(i, a.batch, a.seq)[0] for i in range(a.pool)]
    else:
        pool = [
            torch.from_numpy(keyed_randint(1, i, STREAM_BENCH, 0, 255, n).reshape(a.batch, a.seq))
            for i in range(a.pool)
        ]
    proj_init = torch.from_numpy(keyed_normal(1, 0, STREAM_BENCH, a.dim * a.d_model).astype(np.float32)).view(
        a.dim, a.d_model
    )

    class Case:
        def __init__(self, log2):
            self.log2, self.i, self.times, self.touched = log2, 0, [], []
            self.tables = NgramTables(orders, 1 << log2, a.dim, lr=0.05, momentum=0.9)
            self.proj = (proj_init * a.dim**-0.5).requires_grad_(True)

        def step(self):
            x = pool[self.i % len(pool)]
            self.i += 1
            feats = self.tables.lookup(x)
            loss = (feats @ self.proj).square().mean()
            loss.backward()
            self.touched.append(self.tables.pending_rows().numel())
            self.tables.step()
            self.proj.grad = None

        def timed(self):
            t0 = time.perf_counter()
            self.step()
            self.times.append(time.perf_counter() - t0)

    t_alloc = time.perf_counter()
    small, big = Case(a.small), Case(a.big)
    t_alloc = time.perf_counter() - t_alloc
    for c in (small, big):
        for _ in range(a.warmup):
            c.step()
    for _ in range(a.repeats):
        small.timed()
        big.timed()

    ms = {c.log2: statistics.median(c.times) * 1e3 for c in (small, big)}
    mb = lambda c: 2 * c.tables.weight.numel() * 4 / 2**20
    try:
        load = "load average %.1f %.1f %.1f on %d CPUs; " % (*os.getloadavg(), os.cpu_count())
    except OSError:
        load = ""
    print(
        f"{load}data={a.data} threads={a.threads} orders={orders} dim={a.dim} batch={a.batch}x{a.seq} "
        f"d_model={a.d_model} "
        f"repeats={a.repeats} alternating steps (allocation of both tables: {t_alloc:.1f}s)"
    )
    for c in (small, big):
        q = statistics.quantiles(c.times, n=4)
        print(
            f"  2^{c.log2} slots ({mb(c):8.0f} MiB weight+momentum): median {ms[c.log2]:7.3f} ms/step "
            f"[min {min(c.times) * 1e3:.3f}, p25 {q[0] * 1e3:.3f}, p75 {q[2] * 1e3:.3f}], "
            f"touched rows/step ~{int(statistics.median(c.touched))}"
        )
    try:  # how much of the tables got transparent huge pages (Linux): without them the big table pays TLB misses
        hp = [int(l.split()[1]) for l in open("/proc/self/smaps_rollup") if l.startswith("AnonHugePages:")][0] / 1024
        print(f"  transparent huge pages in this process: {hp:.0f} MiB (tables: {mb(small) + mb(big):.0f} MiB)")
    except (OSError, IndexError):
        pass
    ratio = statistics.median(bt / st for st, bt in zip(small.times, big.times))
    print(
        f"  ratio of the two medians: {ms[a.big] / ms[a.small]:.2f}x; "
        f"median of the {a.repeats} paired ratios (gated): {ratio:.2f}x"
    )
    print(f"ngram step time 2^{a.big} / 2^{a.small} slots: {ratio:.2f}x (target <= {a.target:.2f})")
    out = Path(a.out)
    got = json.loads(out.read_text()) if out.exists() else {}
    got[a.data] = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "load": [round(v, 2) for v in os.getloadavg()],
        "source": "bench/ngram_slots.py",
        "threads": a.threads,
        "orders": orders,
        "dim": a.dim,
        "small": a.small,
        "big": a.big,
        "repeats": a.repeats,
        "median_step_s": {str(c.log2): statistics.median(c.times) for c in (small, big)},
        "touched_rows_per_step": {str(c.log2): int(statistics.median(c.touched)) for c in (small, big)},
        "paired_ratio": ratio,
        "ratio_of_medians": ms[a.big] / ms[a.small],
    }
    out.write_text(json.dumps(got, indent=1) + "\n")
    print(f"written: {out} ({a.data})")
    return 0 if ratio <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
