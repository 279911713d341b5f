"""A seconds-scale resume of a run that has every piece of run state at once (teacher, tripped latch, stress window
with refusals, n-gram tables, probe batches, random depth): a final save off the checkpoint cadence, and a crash
after a checkpoint with metrics rows past it, both resume as the same run; a resume that would be another run (a
strict key changed, fewer steps than reached) is refused before anything is written."""

import dataclasses
import shutil

import pytest

from dormouse.config import ConfigError, DriftError
from dormouse.container import load_ckpt, save_ckpt
from dormouse.rundir import RunPaths
from dormouse.testing import assert_same_run, final_ckpt, stopped_at, tiny_cfg
from dormouse.train import fit

CFG = tiny_cfg(
    steps=10,
    ckpt_every=4,
    log_every=2,
    eval_every=4,
    keep_ckpts=10,
    aux=True,
    rand_depth=True,
    stress=True,
    stress_refuse=True,
    stress_k=1.5,
    quant="int8",
    quant_check=True,
    quant_tol=1e-9,
)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    run = tmp_path_factory.mktemp("every_piece") / "ref"
    fit(CFG, run, progress=False)
    assert final_ckpt(run).flags & 1, "the plan should trip the latch at the quant check"
    return run


def test_a_final_save_off_the_cadence_writes_its_sidecar_and_extending_it_is_the_same_run(ref, tmp_path):
    run = tmp_path / "run"
    fit(dataclasses.replace(CFG, steps=6), run, progress=False)  # 6 is not a multiple of ckpt_every
    ckpt = RunPaths(run).ckpt_dir
    assert (ckpt / "step_000006.dmck").exists()
    assert (ckpt / "step_000006.ngram").exists() or (ckpt / "step_000006.ngdelta").exists()
    fit(CFG, run, resume=True, progress=False)
    assert_same_run(ref, run)


def test_a_crash_after_a_checkpoint_resumes_as_the_same_run(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "crashed", 4)  # as if killed after step 7: checkpoint 4 is the newest, rows go on
    fit(CFG, run, resume=True, progress=False)
    assert_same_run(ref, run)


def _files(run):
    "Every file of a run directory with its bytes."
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "change,error,words",
    [
        (dict(jepa_weight=0.2), DriftError, "jepa_weight"),  # a strict key: another objective
        (dict(steps=4), ConfigError, "steps=4 is below step 10"),  # a resume cannot train backwards
    ],
)
def test_a_resume_that_would_be_another_run_is_refused_before_anything_is_written(ref, tmp_path, change, error, words):
    run = tmp_path / "other"
    shutil.copytree(ref, run)
    before = _files(run)
    with pytest.raises(error, match=words):
        fit(dataclasses.replace(CFG, **change), run, resume=True, progress=False)
    assert _files(run) == before


def test_a_checkpoint_from_before_plan_pinning_is_still_checked_against_config_toml(ref, tmp_path):
    run = tmp_path / "prepin"
    shutil.copytree(ref, run)
    for p in RunPaths(run).checkpoints():  # as written before containers pinned the plan
        save_ckpt(p, dataclasses.replace(load_ckpt(p), identity=None))
    before = _files(run)
    with pytest.raises(DriftError, match="jepa_weight"):
        fit(dataclasses.replace(CFG, jepa_weight=0.2), run, resume=True, progress=False)
    assert _files(run) == before
