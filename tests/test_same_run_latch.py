"""Issue 12 item 5: a tripped latch, checkpointed and resumed through the real `restore`, is bitwise the
uninterrupted run — tripped by the quant check, and separately by a non-finite quantised step."""

import dataclasses, shutil

import pytest
import torch

from dormouse.container import load_ckpt, save_ckpt
from dormouse.container_format import CheckpointError
from dormouse.parts import build_parts, restore, to_run_state
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, tiny_cfg
from dormouse.train import fit


def _rows(run):
    return read_jsonl(RunPaths(run).metrics)


def test_latch_tripped_by_the_quant_check_resumes_bitwise(tmp_path):
    cfg = tiny_cfg(steps=20, ckpt_every=5, aux=True, quant="int8", quant_check=True, quant_tol=1e-9)
    fit(cfg, tmp_path / "ref", progress=False)
    fit(dataclasses.replace(cfg, steps=10), tmp_path / "run", progress=False)
    assert load_ckpt(RunPaths(tmp_path / "run").ckpt_dir / "step_000010.dmck").flags & 1  # tripped, in the container
    fit(cfg, tmp_path / "run", resume=True, progress=False)
    assert_same_run(tmp_path / "ref", tmp_path / "run")
    rows = _rows(tmp_path / "run")
    assert [r["quant"] for r in rows] == [r["quant"] for r in _rows(tmp_path / "ref")] == ["fp32"] * 20
    assert all(r["latch"] for r in rows)


def _plant_nonfinite_int8_row(ck_path):
    """Make the next int8 forward non-finite while the fp32 one stays finite: one row of the head's U becomes
    [1e-44, 0, ...]. Its per-row scale (absmax / 127) underflows to 0, so int8 rounding computes 0/0 = NaN; in fp32 the
    row is just ~0. No plan reaches this in a seconds-scale run, so it is planted once, in the checkpoint both runs
    resume from: the planted state is the same for both, and everything after it runs through `fit` and `restore`."""
    ck = load_ckpt(ck_path)
    u = ck.model["head.U"].clone()
    u[0].zero_()
    u[0, 0] = 1e-44
    ck.model["head.U"] = u
    save_ckpt(ck_path, ck)


def test_latch_tripped_by_a_nonfinite_step_resumes_bitwise(tmp_path):
    cfg = tiny_cfg(steps=20, ckpt_every=5, keep_ckpts=10, quant="int8")
    ref, run = tmp_path / "ref", tmp_path / "run"
    fit(dataclasses.replace(cfg, steps=10), ref, progress=False)
    _plant_nonfinite_int8_row(RunPaths(ref).ckpt_dir / "step_000010.dmck")
    shutil.copytree(ref, run)
    fit(cfg, ref, resume=True, progress=False)  # uninterrupted from the planted state: trips at step 10
    rows = _rows(ref)
    assert [r["latch"] for r in rows] == [False] * 10 + [True] * 10
    assert [r["quant"] for r in rows] == ["int8"] * 10 + ["fp32"] * 10
    assert all(r["loss"] == r["loss"] for r in rows)  # the step was recomputed in fp32: no NaN in the log
    fit(dataclasses.replace(cfg, steps=15), run, resume=True, progress=False)  # trips at 10, checkpoints at 15
    assert load_ckpt(RunPaths(run).ckpt_dir / "step_000015.dmck").flags & 1
    fit(cfg, run, resume=True, progress=False)  # resumes tripped, through the real restore
    assert_same_run(ref, run)
    assert [r["quant"] for r in _rows(run)] == [r["quant"] for r in rows]


def test_restore_takes_the_latch_with_its_reason_and_checks_it_against_the_flags():
    cfg = tiny_cfg(quant="int8")
    p = build_parts(cfg)
    p.latch.trip("non-finite loss at step 7 under quant=int8")
    state = to_run_state(p, {"threads": 1})
    q = build_parts(cfg)
    restore(q, state, None, cfg)
    assert q.latch.reason == "non-finite loss at step 7 under quant=int8"
    assert q.model.head.quant == "fp32" and q.model.core.attn.qkv.quant == "fp32"
    state.flags = 0  # the record and the flags word disagree
    with pytest.raises(CheckpointError, match=r"x\.dmck: \[meta\] the latch record says tripped=True"):
        restore(build_parts(cfg), state, None, cfg, path="x.dmck")


def test_a_resumed_run_still_says_why_its_latch_tripped(tmp_path):
    cfg = tiny_cfg(steps=10, quant="int8", quant_check=True, quant_tol=1e-9)
    fit(cfg, tmp_path / "run", progress=False)
    ck = load_ckpt(RunPaths(tmp_path / "run").ckpt_dir / "step_000010.dmck")
    q = build_parts(cfg)
    restore(q, ck, None, cfg)
    assert q.latch.tripped and q.latch.reason.startswith("quant check: int8 loss"), q.latch.reason
    assert torch.equal(q.model.head.U, ck.model["head.U"])
