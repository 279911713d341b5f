"""Checkpoint stall benchmark (issue 15 item 2): what the training loop pays per checkpoint with background commits,
as a ratio of the synchronous save of the same state.

Plain script: `python bench/ckpt_stall.py [--reps 7] [--slots N] [--steps 3] [--dir DIR]`. The default model
(`TrainCfg()` defaults; `--slots` overrides `model.ngram_slots`) is trained a few steps so the optimiser moments and the
tables are filled, then, on that one state, measured in this run:
- sync save: `save_run_ckpt` (tables file + container, fsync, rename, rotation) — what the loop paid before;
- loop stall: `Committer.submit` with the previous commit already done (the steady state whenever a commit takes less
  than `ckpt_every` steps): `to_run_state` + the state copy (into the previous copy's memory) + handing it to
  the commit thread;
- commit: the background commit's own wall time (submit to committed), which must fit inside `ckpt_every` steps;
- copy memory: bytes copied ÷ the state's bytes (one copy in flight at most).
Medians over `--reps`. Prints ratios with the target and PASS/FAIL; it is a benchmark, not a timed test.
"""

from __future__ import annotations
import argparse, dataclasses, shutil, statistics, sys, tempfile, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dormouse.checkpoints import save_run_ckpt  # noqa: E402
from dormouse.commit import Committer, copy_state  # noqa: E402
from dormouse.config import TrainCfg  # noqa: E402
from dormouse.data import load_corpus  # noqa: E402
from dormouse.numerics import numeric_env  # noqa: E402
from dormouse.parts import build_parts, to_run_state  # noqa: E402
from dormouse.step import pre_batches, train_step  # noqa: E402


def trained_parts(cfg: TrainCfg, steps: int):
    "Parts of the default plan after `steps` training steps (moments and tables filled)."
    corpus = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
    parts, pb = build_parts(cfg), pre_batches(cfg)
    for s in range(steps):
        train_step(parts, corpus, cfg, s, probe_batches=pb, device="cpu")
    return parts


def state_bytes(state, tables) -> int:
    "Bytes of every tensor of the run state and the tables."
    n = sum(t.numel() * t.element_size() for sd in (state.model, state.teacher or {}) for t in sd.values())
    moments = [v for st in state.optim["state"].values() for v in st.values() if torch.is_tensor(v)]
    n += sum(v.numel() * v.element_size() for v in moments)
    return n + 2 * tables.weight.numel() * tables.weight.element_size()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--slots", type=int, default=None, help="model.ngram_slots (default: TrainCfg's)")
    ap.add_argument("--steps", type=int, default=3, help="training steps before measuring")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    a = ap.parse_args()
    cfg = TrainCfg()
    if a.slots:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, ngram_slots=a.slots))
    torch.set_num_threads(cfg.threads)
    parts = trained_parts(cfg, a.steps)
    env = numeric_env(cfg.threads)
    root = Path(tempfile.mkdtemp(prefix="dormouse_stall_", dir=a.dir))
    sync_t, stall_t, commit_t, fresh_t, reuse_t = [], [], [], [], []
    for r in range(a.reps):
        parts.step = parts.tables.table_step = 1000 + r  # a new checkpoint name each rep
        t0 = time.perf_counter()
        save_run_ckpt(root / "sync", to_run_state(parts, env), parts.tables, keep=2)
        sync_t.append(time.perf_counter() - t0)
    with Committer(root / "bg", keep=2) as commits:
        for r in range(a.reps):
            parts.step = parts.tables.table_step = 1000 + r
            t0 = time.perf_counter()
            commits.submit(to_run_state(parts, env), parts.tables)
            t1 = time.perf_counter()
            commits.wait()
            stall_t.append(t1 - t0)
            commit_t.append(time.perf_counter() - t0)
    for r in range(a.reps):
        st = to_run_state(parts, env)
        t0 = time.perf_counter()
        snap, tb = copy_state(st, parts.tables)  # into fresh memory: the first checkpoint of a segment
        fresh_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        snap, tb = copy_state(st, parts.tables, into=(snap, tb))  # into the last copy's: every later checkpoint
        reuse_t.append(time.perf_counter() - t0)
    size = state_bytes(st, parts.tables)
    sync, stall = statistics.median(sync_t), statistics.median(stall_t)
    files = [sorted((p.name, p.read_bytes()) for p in (root / d).iterdir()) for d in ("sync", "bg")]
    same = files[0] == files[1]
    shutil.rmtree(root)
    ratio = stall / sync
    print(
        f"default model, ngram_slots={cfg.model.ngram_slots}: state {size / 1e6:.1f} MB "
        f"(tables {2 * parts.tables.weight.numel() * 4 / 1e6:.1f} MB), {a.reps} reps, medians"
    )
    print(f"sync save            {1e3 * sync:9.2f} ms")
    print(
        f"loop stall (submit)  {1e3 * stall:9.2f} ms   copy alone: {1e3 * statistics.median(reuse_t):.2f} ms "
        f"(into fresh memory, the segment's first: {1e3 * statistics.median(fresh_t):.2f} ms)"
    )
    print(f"background commit    {1e3 * statistics.median(commit_t):9.2f} ms   (must fit inside ckpt_every steps)")
    print(f"copy memory / state size: {state_bytes(snap, tb) / size:.2f}   (target <= 1.0)")
    print(f"same files (names and bytes) from the background and the synchronous save: {same}")
    print(f"loop stall / sync save: {ratio:.3f}   (target <= 0.25)  {'PASS' if ratio <= 0.25 else 'FAIL'}")


if __name__ == "__main__":
    main()
