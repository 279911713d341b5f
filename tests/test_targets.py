"""Offline JEPA targets (issue 9): a run that reads precomputed targets is the same run across a resume, carries no
teacher, and refuses targets that were not built for it — uncovered steps, another pre_batches, damaged shards, other
content."""

import dataclasses, shutil
from pathlib import Path

import pytest
import torch

from dormouse.config import DriftError, read_snapshot
from dormouse.checkpoints import list_ckpts, save_run_ckpt
from dormouse.container import load_ckpt
from dormouse.numerics import numeric_env
from dormouse.rundir import RunDirError, RunLock, RunPaths, read_jsonl
from dormouse.parts import build_parts, to_run_state
from dormouse.train import fit
from dormouse.step import pre_batches
from dormouse.testing import tiny_cfg
import dormouse.precompute as precompute_mod
from dormouse.precompute import precompute_jepa_targets
from dormouse.targets import TargetsError, open_targets
from dormouse.testing import assert_same_run, final_ckpt, losses

STEPS = 24
COMBOS = {"default": dict(), "fp8-check-rand": dict(quant="fp8", quant_check=True, rand_depth=True)}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    "A short plain run (no aux): its newest container is the frozen teacher."
    run = tmp_path_factory.mktemp("teacher") / "run"
    fit(tiny_cfg(steps=12, ckpt_every=6), run, progress=False)
    return list_ckpts(run / "ckpt")[-1][1]


def run_cfg(tpath, **kw):
    base = dict(aux=True, steps=STEPS, ckpt_every=4, log_every=4, eval_every=8, keep_ckpts=100, jepa_targets=str(tpath))
    return tiny_cfg(**{**base, **kw})


@pytest.mark.parametrize("combo", list(COMBOS))
def test_resume_with_offline_targets_is_bitwise(combo, teacher, tmp_path):
    cfg = run_cfg(tmp_path / "targets", **COMBOS[combo])
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False, shard_steps=5)
    fit(cfg, tmp_path / "full", progress=False)
    fit(dataclasses.replace(cfg, steps=10), tmp_path / "resumed", progress=False)  # stops between two shards' steps
    fit(cfg, tmp_path / "resumed", resume=True, progress=False)
    assert_same_run(tmp_path / "full", tmp_path / "resumed")
    jepa = [r["jepa"] for r in read_jsonl(RunPaths(tmp_path / "full").metrics)]
    assert all(j > 0 for j in jepa), "the aux objective did not run"
    for run in ("full", "resumed"):  # no teacher anywhere, and nothing reported missing
        for _, p in list_ckpts(tmp_path / run / "ckpt"):
            ck = load_ckpt(p)
            assert ck.teacher is None and ck.missing == [] and not ck.legacy, p
    snap = read_snapshot(RunPaths(tmp_path / "full").config)
    assert snap["jepa_targets_sha256"] == open_targets(cfg.jepa_targets).sha256


def test_offline_targets_equal_a_frozen_ema_teacher(tmp_path):
    """With the teacher frozen at the student's init (ema_momentum=1) and no n-gram features, both aux paths are one
    objective."""
    base = tiny_cfg(aux=True, steps=12, ckpt_every=6, ema_momentum=1.0)
    base = dataclasses.replace(base, model=dataclasses.replace(base.model, ngram_orders=[]))
    parts = build_parts(base)
    init = save_run_ckpt(
        tmp_path / "init", to_run_state(parts, numeric_env(threads=base.threads)), parts.tables, keep=1
    )
    off = dataclasses.replace(base, jepa_targets=str(tmp_path / "targets"))
    precompute_jepa_targets(off, init, off.jepa_targets, progress=False)
    fit(base, tmp_path / "ema", progress=False)
    fit(off, tmp_path / "offline", progress=False)
    assert losses(tmp_path / "ema") == losses(tmp_path / "offline")
    a, b = final_ckpt(tmp_path / "ema"), final_ckpt(tmp_path / "offline")
    assert a.teacher is not None and b.teacher is None
    for k in a.model:
        assert torch.equal(a.model[k], b.model[k]), k


def test_refuses_uncovered_steps(teacher, tmp_path):
    cfg = run_cfg(tmp_path / "targets", steps=10)
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)
    with pytest.raises(TargetsError, match="step 10 is not covered"):
        fit(dataclasses.replace(cfg, steps=12), tmp_path / "run", progress=False)
    fit(cfg, tmp_path / "run2", progress=False)  # the covered run trains; extending it past the targets is refused
    with pytest.raises(TargetsError, match="step 10 is not covered"):
        fit(dataclasses.replace(cfg, steps=12), tmp_path / "run2", resume=True, progress=False)


def test_refuses_targets_of_another_pre_batches(teacher, tmp_path):
    cfg = run_cfg(tmp_path / "targets", steps=8)
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)
    qc = dataclasses.replace(cfg, quant_check=True)  # one more probe batch: step s reads batch s + 2
    assert pre_batches(qc) == pre_batches(cfg) + 1
    with pytest.raises(
        TargetsError, match=r"step 0 was computed on batch 1, but this run reads batch 2.*pre_batches 1.*has 2"
    ):
        fit(qc, tmp_path / "run", progress=False)
    assert not list_ckpts(tmp_path / "run" / "ckpt")


def test_damaged_shard_is_refused_naming_it(teacher, tmp_path):
    cfg = run_cfg(tmp_path / "targets", steps=8)
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False, shard_steps=4)
    shard = Path(cfg.jepa_targets) / "shard_00001.safetensors"
    raw = shard.read_bytes()
    shard.write_bytes(raw[: len(raw) // 2])  # truncated: refused before step 0
    with pytest.raises(TargetsError, match=r"shard_00001\.safetensors: truncated"):
        fit(cfg, tmp_path / "run", progress=False)
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 1  # same size, one bit: refused when the shard is first read
    shard.write_bytes(bytes(flipped))
    with pytest.raises(TargetsError, match=r"shard_00001\.safetensors: corrupt shard"):
        fit(dataclasses.replace(cfg, ckpt_every=2), tmp_path / "run2", progress=False)
    assert [s for s, _ in list_ckpts(tmp_path / "run2" / "ckpt")][-1] == 4  # steps 0-3 trained on shard 0, checkpointed


def test_other_targets_on_resume_are_drift(teacher, tmp_path):
    cfg = run_cfg(tmp_path / "targets")
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)
    first = open_targets(cfg.jepa_targets).sha256
    fit(dataclasses.replace(cfg, steps=8), tmp_path / "run", progress=False)
    assert read_snapshot(RunPaths(tmp_path / "run").config)["jepa_targets_sha256"] == first
    # same path, other content: targets from another teacher (the teacher run's first checkpoint)
    shutil.rmtree(cfg.jepa_targets)
    precompute_jepa_targets(cfg, list_ckpts(Path(teacher).parent)[0][1], cfg.jepa_targets, progress=False)
    assert open_targets(cfg.jepa_targets).sha256 != first
    with pytest.raises(DriftError) as e:
        fit(cfg, tmp_path / "run", resume=True, progress=False)
    assert set(e.value.diffs) == {"jepa_targets_sha256"}
    assert e.value.diffs["jepa_targets_sha256"][0] == first


def test_failed_precompute_leaves_nothing(teacher, tmp_path, monkeypatch):
    cfg = run_cfg(tmp_path / "targets", steps=12)
    real = precompute_mod.depth_for_step

    def boom(c, s):
        if s == 7:
            raise RuntimeError("killed at step 7")
        return real(c, s)

    monkeypatch.setattr(precompute_mod, "depth_for_step", boom)
    with pytest.raises(RuntimeError, match="killed"):
        precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False, shard_steps=4)
    left = [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")]  # the writer's lock file may stay
    assert left == []  # no targets under the real name, no temp directory
    monkeypatch.undo()
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)
    with pytest.raises(TargetsError, match="already exists"):
        precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)


def test_a_second_writer_of_the_same_targets_is_refused(teacher, tmp_path):
    cfg = run_cfg(tmp_path / "targets", steps=4)
    with RunLock(tmp_path / ".targets.lock"):  # another precompute is writing these targets
        with pytest.raises(RunDirError, match="being written by another process"):
            precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)
    assert not (tmp_path / "targets").exists()
    precompute_jepa_targets(cfg, teacher, cfg.jepa_targets, progress=False)  # once it is done, the path is free
    assert (tmp_path / "targets" / "index.json").exists()
