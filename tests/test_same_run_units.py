"""Fast unit checks of the pieces the same-run promise rests on: each one fails if its piece regresses, in seconds,
without training a run (the resume tests prove the whole; these say which piece broke)."""

import copy
import tempfile

import pytest
import torch

from dormouse import dist as ddist
from dormouse.checkpoints import find_latest, save_run_ckpt
from dormouse.config import ENV_KEYS, PROGRESS_KEYS, DriftError, check_drift, field_names, flatten
from dormouse.config import cfg_to_dict, read_snapshot, snapshot_toml
from dormouse.testing import flipped, with_key
from dormouse.data import corpus_for
from dormouse.dist import DistInfo, check_fingerprints
from dormouse.fsio import atomic_write
from dormouse.mask import mask_stream
from dormouse.model import depth_for_step
from dormouse.numerics import drift_lines, env_diff
from dormouse.parts import build_parts, restore, state_fingerprint, to_run_state
from dormouse.rundir import RunDirError, RunLock, RunPaths, read_jsonl
from dormouse.step import global_batch, lr_at, train_step
from dormouse.testing import tiny_cfg
from dormouse.train import fit

# by name (rule: progress keys exempt): when the run is looked at and saved; keep_ckpts is proven in test_resume_keys.py
PROGRESS_KEYS_BY_NAME = {"steps", "log_every", "ckpt_every", "keep_ckpts", "eval", "eval_every"}


def _trained(cfg, steps=2):
    "Parts of `cfg` after `steps` training steps (optimiser, tables and stress have state)."
    corpus = corpus_for(cfg)
    p = build_parts(cfg)
    for s in range(steps):
        train_step(p, corpus, cfg, s, probe_batches=0, device="cpu")
    return p


def test_restore_leaves_the_teacher_frozen_and_in_eval_mode():
    cfg = tiny_cfg(aux=True)
    p = _trained(cfg)
    with tempfile.TemporaryDirectory() as t:
        save_run_ckpt(t, to_run_state(p, {"threads": 1}), p.tables, keep=1)
        ck, tables, path, *_ = find_latest(t, cfg, log=lambda *a: None)
        q = build_parts(cfg)
        restore(q, ck, tables, cfg, path=path)
    assert q.teacher is not None and not q.teacher.training
    thawed = [n for n, t in q.teacher.named_parameters() if t.requires_grad]
    assert thawed == [], f"teacher parameters that require grad after restore: {thawed[:3]}"
    student = {id(t) for t in q.model.parameters()}
    assert not any(id(t) in student for t in q.teacher.parameters()), "the teacher shares tensors with the student"


def test_the_fingerprint_covers_every_piece_of_run_state():
    cfg = tiny_cfg(aux=True, stress=True)
    p = _trained(cfg)
    base = state_fingerprint(p)
    assert state_fingerprint(copy.deepcopy(p)) == base  # a copy is the same state

    def first_optim_tensor(q):
        st = q.optim.state_dict()["state"]
        return next(v for i in sorted(st) for k, v in sorted(st[i].items()) if torch.is_tensor(v) and v.numel() > 1)

    changes = {
        "student weight": lambda q: next(q.model.parameters()).view(-1)[0].add_(1.0),
        "teacher weight": lambda q: next(q.teacher.parameters()).view(-1)[0].add_(1.0),
        "optimiser moment": lambda q: first_optim_tensor(q).view(-1)[0].add_(1.0),
        "optimiser step count": lambda q: q.optim.state[next(iter(q.optim.state))]["step"].add_(1.0),
        "n-gram weight": lambda q: q.tables.weight.view(-1)[0].add_(1.0),
        "n-gram momentum": lambda q: q.tables.momentum.view(-1)[0].add_(1.0),
        "n-gram table_step": lambda q: setattr(q.tables, "table_step", q.tables.table_step + 1),
        "latch": lambda q: q.latch.trip("test"),
        "step": lambda q: setattr(q, "step", q.step + 1),
        "stress history": lambda q: q.stress.observe(123.0, 99),
    }
    for what, change in changes.items():
        q = copy.deepcopy(p)
        with torch.no_grad():
            change(q)
        assert state_fingerprint(q) != base, f"the fingerprint does not see a change of the {what}"


def test_every_rank_slice_of_a_global_batch_concatenates_to_the_batch():
    cfg = tiny_cfg(batch=8, micro_batch=1)  # 8 microbatches: any of these worlds can share them
    corpus = corpus_for(cfg)
    for world in (1, 2, 4, 8):
        xs, ys = [], []
        for rank in range(world):
            x, y, keep = global_batch(corpus, 3, cfg, device="cpu", rank=rank, world=world)
            xs.append(x[keep])
            ys.append(y[keep])
        x, y = corpus.batch_at(3, cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)
        assert torch.equal(torch.cat(xs), x) and torch.equal(torch.cat(ys), y), f"world {world}"


def test_ranks_whose_fingerprints_differ_are_a_hard_error(monkeypatch):
    seen = {}

    def fake_all_gather(out, mine, fps=("0123456789abcdef", "0123456789abcdeX")):
        seen["called"] = True
        for o, fp in zip(out, fps):
            o.copy_(torch.tensor(list(fp.encode()), dtype=torch.uint8))

    monkeypatch.setattr(ddist.dist, "all_gather", fake_all_gather)
    with pytest.raises(RuntimeError, match="ranks diverged at step 7"):
        check_fingerprints("0123456789abcdef", 7, DistInfo(rank=0, world=2))
    assert seen
    monkeypatch.setattr(
        ddist.dist, "all_gather", lambda out, mine: fake_all_gather(out, mine, ("0123456789abcdef",) * 2)
    )
    check_fingerprints("0123456789abcdef", 8, DistInfo(rank=1, world=2))  # equal: no error


def test_the_mask_is_a_pure_function_of_seed_and_step():
    a = mask_stream(4, 64, 0.15, 4, seed=1, step=5)
    for s in range(5):
        mask_stream(4, 64, 0.15, 4, seed=1, step=s)  # draws before it change nothing
    torch.manual_seed(1234)
    torch.rand(10)  # nor does the global RNG
    assert torch.equal(mask_stream(4, 64, 0.15, 4, seed=1, step=5), a)
    assert not torch.equal(mask_stream(4, 64, 0.15, 4, seed=1, step=6), a)
    assert not torch.equal(mask_stream(4, 64, 0.15, 4, seed=2, step=5), a)


def test_the_depth_of_a_step_is_a_pure_function_of_seed_and_step():
    cfg = tiny_cfg(rand_depth=True)
    want = [depth_for_step(cfg, s) for s in range(40)]
    assert len(set(want)) > 1 and all(cfg.model.depth_min <= d <= cfg.model.depth_max for d in want)
    assert [depth_for_step(cfg, s) for s in reversed(range(40))] == want[::-1]  # order and repeats change nothing
    assert depth_for_step(cfg, 7) == want[7]


def test_the_lr_schedule_does_not_read_steps():
    short, long = tiny_cfg(steps=30), tiny_cfg(steps=300)
    assert [lr_at(short, s) for s in range(30)] == [lr_at(long, s) for s in range(30)]
    assert lr_at(long, 299) == long.min_lr  # past decay_start + decay_steps


def test_the_snapshot_carries_every_field_and_each_reaches_the_drift_check(tmp_path):
    cfg = tiny_cfg(rand_depth=True)
    path = tmp_path / "config.toml"
    path.write_text(snapshot_toml(cfg))
    snap = read_snapshot(path)
    assert sorted(flatten(snap)) == sorted(field_names()), "the snapshot does not carry every TrainCfg field"
    assert flatten(snap) == flatten(cfg_to_dict(cfg))
    for key in ("seed", "rand_depth", "eval_batches", "eval_depths"):
        value = flatten(snap)[key]
        new = [d + 1 for d in value] if isinstance(value, list) else flipped(value)
        with pytest.raises(DriftError, match=key):
            check_drift(snap, with_key(cfg, key, new))


def test_exactly_the_progress_keys_may_change_on_a_resume(tmp_path):
    assert set(PROGRESS_KEYS) == PROGRESS_KEYS_BY_NAME
    cfg = tiny_cfg()
    snap = cfg_to_dict(cfg)
    for key in field_names():
        value = flatten(snap)[key]
        if isinstance(value, (list, str)):
            continue
        changed = with_key(cfg, key, flipped(value))
        if key in PROGRESS_KEYS_BY_NAME or key in ENV_KEYS:
            check_drift(snap, changed)  # harmless: no error
        else:
            with pytest.raises(DriftError, match=key):
                check_drift(snap, changed)


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp(tmp_path):
    p = tmp_path / "f.bin"
    atomic_write(p, b"old contents")

    def half_then_crash(f):
        f.write(b"new half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(p, half_then_crash)
    assert p.read_bytes() == b"old contents"
    assert [x.name for x in tmp_path.iterdir()] == ["f.bin"]


def test_environment_drift_is_named_key_by_key():
    saved = {"torch": "2.13.0", "threads": 1}
    now = {"torch": "2.99.0", "threads": 1}
    assert env_diff(saved, now) == {"torch": ("2.13.0", "2.99.0")}
    said = drift_lines(env_diff(saved, now), saved)
    assert "torch: '2.13.0' -> '2.99.0' (to match: the torch build it recorded" in said, said
    assert env_diff(saved, dict(saved)) == {}


def test_a_bad_line_in_the_middle_of_the_history_is_an_error_not_a_truncation(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 0}\n{"step": 1\n{"step": 2}\n')
    with pytest.raises(RunDirError, match="line 2"):
        read_jsonl(p, key="step")
    p.write_text('{"step": 0}\n{"step": 1}\n{"step": 2')  # a torn last line is a kill mid-append: dropped
    assert [r["step"] for r in read_jsonl(p, key="step")] == [0, 1]


def test_a_run_dir_held_by_another_writer_is_refused_before_anything_is_written(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with RunLock(RunPaths(run).lock):  # another writer (flock is per open file, so this process counts as one)
        with pytest.raises(RunDirError, match="being written by another process"):
            fit(tiny_cfg(steps=2), run, progress=False)
    assert [p.name for p in run.iterdir()] == [RunPaths(run).lock.name]
