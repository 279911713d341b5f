#!/usr/bin/env python3
"""The run guarantee at the seed's scale (issue 15): what the fingerprint, a checkpoint and a resume cost when the
n-gram tables are big, as ratios measured in one run.

One process builds the default model's parts (`dormouse.parts.build_parts`: model, AdamW, teacher when aux, tables)
twice: with 2^16 slots and with 2^22 slots (`--big`), `ngram_dim` 64 as in `bench/ngram_slots.py` — 6.4 GB of
weight + momentum at 2^22. Before building the big one it checks MemAvailable: when 2^22 would not fit comfortably
(the state, a loaded copy is never held at the same time, plus 2 GB of headroom) it uses 2^21 and says so.

Measured, and printed as ratios (PASS/FAIL against the issue's targets; exit status 0 either way):
- fingerprint 2^big / 2^16: `state_fingerprint(parts)` — what the trainer computes every `log_every` steps — after
  `--log-every` table steps on the trainer's own batches, alternating small and big, median of the paired ratios.
  The tables' part is their kept digest (`NgramTables.digest`), so the cost follows the rows touched, not the slots;
  the old cost (hashing every table byte) is printed once for the big tables as the reference.
- a cycle of FULL_EVERY checkpoints of the big state through `dormouse.commit.Committer` (background commits, table
  deltas), `--ckpt-every` table steps apart on the trainer's batches — what `fit` does at `ckpt_every=100`:
  - loop stall per checkpoint / synchronous save: the time `submit` holds the loop (the snapshot: the rows touched
    since the previous checkpoint; the cycle's tables file is compacted from the chain on disk in the background),
    averaged over the cycle and for the full checkpoint alone, over one synchronous `save_run_ckpt` of the state;
  - bytes written per checkpoint / full state size: container + tables file of each checkpoint, averaged over the
    cycle (FULL_EVERY - 1 deltas on the synchronous save, then one compacted tables file);
  - peak extra memory during the cycle / state size (VmHWM reset through /proc/self/clear_refs, Linux).
- resume / torch.load: `load_run_ckpt` of the cycle's last checkpoint (the tables file and every delta of its chain
  replayed, every byte checksummed, each delta's digest checked) over `torch.load(weights_only=True)` of a
  `torch.save` of the same tensors (which verifies nothing); after an fsync of both, alternating, best of
  `--load-rounds`, each file read through once just before its load.

The I/O measurements at 2^big are single runs (6 GB each way); the load average is printed with them.
Usage: .venv/bin/python bench/scale.py [--big 22] [--small 16] [--dim 64] [--repeats 15] [--dir DIR]
"""

import argparse, dataclasses, gc, hashlib, os, shutil, statistics, sys, tempfile, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dormouse.checkpoints import load_run_ckpt, save_run_ckpt, table_chain, tables_path  # noqa: E402
from dormouse.commit import FULL_EVERY, Committer, start_tables  # noqa: E402
from dormouse.config import ModelCfg, TrainCfg  # noqa: E402
from dormouse.container import load_ckpt  # noqa: E402
from dormouse.data import load_corpus  # noqa: E402
from dormouse.tables_file import tensor_chunks  # noqa: E402
from dormouse.numerics import numeric_env  # noqa: E402
from dormouse.parts import build_parts, state_fingerprint, to_run_state  # noqa: E402


def status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def table_bytes(log2: int, dim: int, n_orders: int) -> int:
    return 2 * n_orders * (1 << log2) * dim * 4


def state_bytes(parts) -> int:
    n = sum(t.numel() * t.element_size() for t in parts.model.state_dict().values())
    if parts.teacher is not None:
        n += sum(t.numel() * t.element_size() for t in parts.teacher.state_dict().values())
    for st in parts.optim.state_dict()["state"].values():
        n += sum(t.numel() * t.element_size() for t in st.values() if torch.is_tensor(t))
    return n + 2 * parts.tables.weight.numel() * 4


def table_steps(parts, pool, start: int, n: int):
    "n lookup/backward/step rounds of the tables on the trainer's batches (the model is not stepped)."
    proj = torch.linspace(-1, 1, parts.tables.dim * 8).view(parts.tables.dim, 8)
    for i in range(start, start + n):
        (parts.tables.lookup(pool[i % len(pool)]) @ proj).sin().sum().backward()
        parts.tables.step()


def warm(*paths):
    "Read files once so that a timed load reads them from the page cache, not the disk (a shared disk is the noise)."
    buf = bytearray(16 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=16, help="log2 slots of the small tables")
    ap.add_argument("--big", type=int, default=22, help="log2 slots of the big tables (2^21 if 2^22 does not fit)")
    ap.add_argument("--dim", type=int, default=64, help="ModelCfg.ngram_dim")
    ap.add_argument("--orders", default="2,3,4", help="n-gram orders (the seed's three; the default model has 2..8)")
    ap.add_argument("--log-every", type=int, default=10, help="table steps between fingerprints")
    ap.add_argument("--repeats", type=int, default=31, help="paired fingerprint measurements")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--load-rounds", type=int, default=2, help="alternating load rounds (best of)")
    ap.add_argument("--ckpt-every", type=int, default=100, help="table steps between the cycle's checkpoints")
    ap.add_argument("--dir", default=None, help="where checkpoints are written (default: a temp dir in bench/out)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    orders = [int(o) for o in a.orders.split(",")]
    big, note = a.big, ""
    # the state, one loaded copy at the resume (the state is freed first) and compaction's rows, plus headroom
    while big > a.small + 1 and mem_available() < 1.3 * table_bytes(big, a.dim, len(orders)) + (2 << 30):
        note += (
            f" 2^{big} slots ({table_bytes(big, a.dim, len(orders)) / 2**30:.1f} GiB of tables) does not fit "
            f"comfortably in {mem_available() / 2**30:.1f} GiB available: using 2^{big - 1}."
        )
        big -= 1
    cfgs = {
        lg: TrainCfg(model=dataclasses.replace(ModelCfg(), ngram_orders=orders, ngram_slots=1 << lg, ngram_dim=a.dim))
        for lg in (a.small, big)
    }
    seq, batch = TrainCfg().seq_len, TrainCfg().batch  # the trainer's batch shape
    corpus = load_corpus("", 0.05, seq)
    pool = [corpus.batch_at(i, batch, seq)[0] for i in range(64)]
    t_build, parts = timed(lambda: {lg: build_parts(cfg) for lg, cfg in cfgs.items()})
    env = numeric_env(threads=torch.get_num_threads())

    # fingerprints: after log_every table steps each, alternating small and big
    times = {lg: [] for lg in parts}
    for lg in parts:
        table_steps(parts[lg], pool, 0, a.log_every)
        state_fingerprint(parts[lg])  # warm-up
    for r in range(a.repeats):
        for lg in parts:
            table_steps(parts[lg], pool, (r + 1) * a.log_every, a.log_every)
            times[lg].append(timed(lambda: state_fingerprint(parts[lg]))[0])
    fp_ratio = statistics.median(b / s for s, b in zip(times[a.small], times[big]))
    tb = parts[big].tables
    t_old, _ = timed(lambda: [hashlib.sha256().update(mv) for t in (tb.weight, tb.momentum) for mv in tensor_chunks(t)])
    t_full, full = timed(tb.full_digest)
    assert full == tb.digest(), "kept digest differs from a full recomputation"

    # the big state: one synchronous save, then a cycle of FULL_EVERY background checkpoints with deltas
    base = Path(a.dir) if a.dir else ROOT / "bench" / "out"
    base.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(dir=base))
    try:
        p = parts[big]
        nbytes = state_bytes(p)
        p.step = 0  # the synchronous save is the chain's base: the cycle starts as a resume from it would
        t_save, ck0 = timed(lambda: save_run_ckpt(d / "ckpt", to_run_state(p, env), p.tables, keep=2))
        stalls, written, kinds, cks, digests = [], [], [], [], []
        rss0 = status_kb("VmRSS:")
        Path("/proc/self/clear_refs").write_text("5")
        with Committer(d / "ckpt", keep=2, start=start_tables(p.tables, tables_path(ck0, load_ckpt(ck0)))) as commits:
            for k in range(FULL_EVERY):
                table_steps(p, pool, (a.repeats + 2 + k) * a.ckpt_every, a.ckpt_every)
                p.step = (k + 1) * a.ckpt_every
                stalls.append(timed(lambda: commits.submit(to_run_state(p, env), p.tables))[0])
                cks.append(commits.wait())
                digests.append(p.tables.digest())
                tp = tables_path(cks[-1], load_ckpt(cks[-1]))
                written.append(cks[-1].stat().st_size + tp.stat().st_size)
                kinds.append(tp.suffix[1:])
        extra = (status_kb("VmHWM:") - rss0) * 1024
        ck = cks[-2]  # the longest chain: the synchronous save + FULL_EVERY - 1 deltas (the last one is compacted)
        chain = [q.name for q in table_chain(tables_path(ck, load_ckpt(ck)))]
        tpath = d / "state.pt"
        state = to_run_state(p, env)
        obj = {
            "model": state.model,
            "optim": state.optim,
            "teacher": state.teacher,
            "ngram": {"weight": p.tables.weight, "momentum": p.tables.momentum},
        }
        t_tsave, _ = timed(lambda: torch.save(obj, tpath))
        digest = digests[-2]
        assert load_run_ckpt(cks[-1])[1].digest() == digests[-1], "the compacted tables file is not the live tables"
        obj = state = p = parts = tb = commits = None  # free them (closed over by the lambdas above: rebound)
        gc.collect()
        os.sync()  # no writeback of the files competes with the reads
        load_avg = os.getloadavg()
        t_load, t_tload = [], []
        for _ in range(a.load_rounds):  # alternating; each file read once just before (12 GB do not fit both warm)
            warm(ck, *(ck.parent / n for n in chain))
            dt, (ck2, tables2, *_) = timed(lambda: load_run_ckpt(ck))
            t_load.append(dt)
            assert tables2.digest() == digest, "the replayed chain is not the live tables"
            del ck2, tables2
            gc.collect()
            warm(tpath)
            dt, tl = timed(lambda: torch.load(tpath, weights_only=True))
            t_tload.append(dt)
            del tl
            gc.collect()
        t_load, t_tload = min(t_load), min(t_tload)
    finally:
        shutil.rmtree(d, ignore_errors=True)

    print(
        f"bench/scale.py: torch {torch.__version__}, {torch.get_num_threads()} thread(s), orders {orders}, "
        f"ngram_dim {a.dim}, batch {batch}x{seq}; load average {'%.1f %.1f %.1f' % os.getloadavg()} "
        f"on {os.cpu_count()} CPUs (during the load: {'%.1f' % load_avg[0]}).{note}"
    )
    print(
        f"  built both in {t_build:.1f}s; state at 2^{big}: {nbytes / 1e9:.2f} GB "
        f"({table_bytes(big, a.dim, len(orders)) / 1e9:.2f} GB of tables)"
    )
    for lg in (a.small, big):
        print(
            f"  fingerprint at 2^{lg}: median {statistics.median(times[lg]) * 1e3:7.1f} ms "
            f"(after {a.log_every} table steps, {a.repeats} repeats)"
        )
    print(
        f"  at 2^{big}: hashing every table byte (the old fingerprint's table part) {t_old * 1e3:.0f} ms; "
        f"a full digest recomputation {t_full * 1e3:.0f} ms (equal to the kept one)"
    )
    full = kinds.index("ngram")
    print(
        f"  checkpoint at 2^{big}: synchronous save_run_ckpt {t_save:.2f} s for {nbytes / 1e9:.2f} GB; torch.save of "
        f"the same tensors {t_tsave:.2f} s"
    )
    print(
        f"  a cycle of {FULL_EVERY} background checkpoints, {a.ckpt_every} table steps apart: files "
        f"{', '.join(kinds)}; loop stall {', '.join(f'{t * 1e3:.0f}' for t in stalls)} ms; written "
        f"{', '.join(f'{w / 1e6:.0f}' for w in written)} MB"
    )
    print(
        f"  resume at 2^{big}: load_run_ckpt {t_load:.2f} s (chain {' + '.join(chain)}, every byte verified); "
        f"torch.load(weights_only=True) {t_tload:.2f} s (verifies nothing); best of {a.load_rounds}, alternating, "
        "files warm"
    )
    rows = [  # (what, ratio, target)
        (f"fingerprint time 2^{big} / 2^{a.small} slots", fp_ratio, 1.10),
        ("loop stall per checkpoint / synchronous save (cycle mean)", statistics.mean(stalls) / t_save, 0.25),
        ("loop stall of the cycle's tables-file checkpoint / synchronous save", stalls[full] / t_save, 0.25),
        (f"bytes written per checkpoint / full state size (cycle mean, ckpt_every={a.ckpt_every})",
         statistics.mean(written) / nbytes, 0.20),
        ("resume (load_run_ckpt of a full chain) / torch.load(weights_only=True)", t_load / t_tload, 0.70),
        ("peak extra memory during the cycle / state size", max(0, extra) / nbytes, 1.00),
    ]
    print()
    for what, r, tgt in rows:
        print(f"  {'PASS' if r <= tgt else 'FAIL'}  {what:<78} {r:6.2f}x  (target <= {tgt:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
