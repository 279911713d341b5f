"""Background checkpoints: the loop pays for a copy of the state, one thread commits; a failed commit raises in
`fit` at the next step boundary (or at close) naming the container, leaving the previous checkpoint; `fit` returns only
once its last checkpoint is committed; the files are byte for byte those of the synchronous path."""

import threading, time
from pathlib import Path

import pytest
import torch

import dormouse.checkpoints as ckpts
from dormouse.checkpoints import find_latest
from dormouse.commit import CommitError, copy_state
from dormouse.container import RunState, load_ckpt
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, state_diff, tiny_cfg
from dormouse.train import fit


WRITERS = {"save_tables_file": 2, "save_delta": 2, "save_compacted": 3}  # each tables writer: where train_step is


def failing_at(step, real, pos):
    "A tables-file writer that runs out of space at `step` (its argument `pos`) and writes normally otherwise."

    def write(*args):
        if args[pos] == step:
            raise OSError(28, "No space left on device", str(args[0]))
        return real(*args)

    return write


def fail_tables_at(monkeypatch, step):
    "Every tables writer runs out of space at `step` (which one a checkpoint calls is the committer's choice)."
    for name, pos in WRITERS.items():
        monkeypatch.setattr(ckpts, name, failing_at(step, getattr(ckpts, name), pos))


def ckpt_files(run):
    return sorted(p.name for p in RunPaths(Path(run)).ckpt_dir.iterdir())


def test_commit_error_surfaces_at_the_next_step_boundary(tmp_path, monkeypatch):
    fail_tables_at(monkeypatch, 12)
    cfg = tiny_cfg(steps=30, ckpt_every=6, keep_ckpts=5)
    with pytest.raises(CommitError, match=r"step_000012\.dmck was not committed: OSError.*No space left") as ei:
        fit(cfg, tmp_path / "run", progress=False)
    assert isinstance(ei.value.__cause__, OSError)
    rows = len(read_jsonl(RunPaths(tmp_path / "run").metrics))
    # raised at a step boundary after the failed checkpoint, before the next checkpoint (step 18) was reached
    assert 12 <= rows < 18, rows
    # the failed commit left nothing; the previous pair is intact and is what a resume loads
    assert ckpt_files(tmp_path / "run") == ["step_000006.dmck", "step_000006.ngdelta"]
    assert find_latest(RunPaths(tmp_path / "run").ckpt_dir, log=print)[0].step == 6


def test_commit_error_of_the_last_checkpoint_surfaces_at_close(tmp_path, monkeypatch):
    fail_tables_at(monkeypatch, 12)
    with pytest.raises(CommitError, match=r"step_000012\.dmck was not committed"):
        fit(tiny_cfg(steps=12, ckpt_every=6), tmp_path / "run", progress=False)
    assert ckpt_files(tmp_path / "run") == ["step_000006.dmck", "step_000006.ngdelta"]


def test_fit_returns_once_the_last_checkpoint_is_committed(tmp_path, monkeypatch):
    real, threads = ckpts.save_v3, set()

    def slow_save_v3(path, state, tables_id, *identity):
        threads.add(threading.current_thread().name)
        time.sleep(0.5)  # a slow disk: fit must not return before this container is renamed into place
        return real(path, state, tables_id, *identity)

    monkeypatch.setattr(ckpts, "save_v3", slow_save_v3)
    fit(tiny_cfg(steps=12, ckpt_every=6), tmp_path / "run", progress=False)
    assert threads and all(n.startswith("dormouse-commit") for n in threads), threads  # written off the loop
    ck, tables, path, *_ = find_latest(RunPaths(tmp_path / "run").ckpt_dir, log=print)
    assert (ck.step, path.name, tables.table_step) == (12, "step_000012.dmck", 12)
    assert not [p for p in RunPaths(tmp_path / "run").ckpt_dir.iterdir() if ".tmp." in p.name]


def test_background_files_are_the_synchronous_files(tmp_path, monkeypatch):
    cfg = tiny_cfg(steps=16, ckpt_every=4, keep_ckpts=100, aux=True, stress=True, stress_k=1.5)
    fit(cfg, tmp_path / "sync", progress=False, ckpt_background=False)
    def slow(real):
        def write(*args):
            time.sleep(0.2)  # the loop trains on (and changes every tensor) while the copy waits to be written
            return real(*args)
        return write

    for name in WRITERS:
        monkeypatch.setattr(ckpts, name, slow(getattr(ckpts, name)))
    fit(cfg, tmp_path / "bg", progress=False)
    names = ckpt_files(tmp_path / "sync")
    assert names == ckpt_files(tmp_path / "bg") and len(names) == 8, names
    assert names[1] == "step_000004.ngdelta", names  # a delta on a fresh run's zero tables, then the committer's rule
    for n in names:
        a, b = RunPaths(tmp_path / "sync").ckpt_dir / n, RunPaths(tmp_path / "bg").ckpt_dir / n
        if not n.endswith(".dmck"):
            assert a.read_bytes() == b.read_bytes(), f"{n} differs between the synchronous and the background commit"
            continue
        ca, cb = load_ckpt(a), load_ckpt(b)  # two runs of one plan: the same state, different run ids in the pin
        assert state_diff(ca, cb) == [], (n, state_diff(ca, cb))
        # the slowed writers are a patch of the kit in this process, which the record names (kit_replaced)
        slowed = sorted(f"{ckpts.__name__}.{w}" for w in WRITERS)
        assert ca.env["kit_replaced"] == [] and cb.env["kit_replaced"] == slowed
        assert ({**ca.env, "kit_replaced": []}, ca.latch, ca.tables_id) == (cb.env | {"kit_replaced": []}, cb.latch,
                                                                              cb.tables_id), n
        drop = ("run_id", "run_started")
        assert {k: v for k, v in ca.identity.items() if k not in drop} == \
            {k: v for k, v in cb.identity.items() if k not in drop}
    assert_same_run(tmp_path / "sync", tmp_path / "bg")


def _train_tables(tables, seed: int, steps: int) -> None:
    "A few sparse steps of `tables` on keyed bytes (a backward through a lookup, then `step`)."
    from dormouse.rng import keyed_randint
    for s in range(steps):
        x = torch.from_numpy(keyed_randint(seed, s, 9, 0, 255, 4 * 16).reshape(4, 16).astype("int64"))
        (tables.lookup(x) - 1.0).square().sum().backward()  # zero tables: a nonzero gradient
        tables.step()


def test_a_copy_of_the_tables_has_its_own_digest(tmp_path):
    "The writer's copy and the live tables keep separate, correct digests while the loop trains on."
    from dormouse.ngram import NgramTables
    live = NgramTables([2, 3], 1024, 8, lr=0.05, momentum=0.9)
    _train_tables(live, 1, 3)
    state = RunState(step=3, model={}, optim={"state": {}, "param_groups": []}, teacher=None, flags=0, stress=None,
                     table_step=live.table_step, env={})
    _, copy_tb = copy_state(state, live)
    before = copy_tb.digest()  # what the writer does with the copy ...
    assert live.digest_in_sync()  # ... leaves the live digest incremental (O(touched))
    _train_tables(live, 2, 3)  # the loop moves on while the copy is written
    assert copy_tb.digest() == copy_tb.full_digest() == before  # the copy describes the state it copied
    assert live.digest() == live.full_digest() != before  # and the live digest is still the live tables'
