"""Which keys of the plan a resume may change besides the progress flags (issue 23): the checkpoints rotation keeps
may (no step reads them), the corpus path may not (it decides the split as well as the bytes), and the refusal says
how to go on."""

import dataclasses, shutil

import pytest

from dormouse.config import DriftError
from dormouse.rundir import RunPaths
from dormouse.testing import assert_same_run, tiny_cfg
from dormouse.train import fit


def test_keep_ckpts_may_change_on_a_resume_and_the_run_is_the_same(tmp_path):
    cfg = tiny_cfg(steps=20, ckpt_every=5, keep_ckpts=3, eval=False)
    fit(cfg, tmp_path / "ref", progress=False)
    fit(dataclasses.replace(cfg, steps=10), tmp_path / "r", progress=False)
    fit(dataclasses.replace(cfg, keep_ckpts=1), tmp_path / "r", resume=True, progress=False)
    assert len(RunPaths(tmp_path / "r").checkpoints()) == 1  # the new count is what rotation keeps now
    assert_same_run(tmp_path / "ref", tmp_path / "r")


def test_a_moved_corpus_is_refused_saying_to_put_it_back_and_a_link_resumes(tmp_path):
    src = tmp_path / "corpus.bin"
    shutil.copyfile(__file__, src)
    with open(src, "ab") as f:
        f.write(bytes(range(256)) * 64)
    cfg = tiny_cfg(steps=10, ckpt_every=5, eval=False, data=str(src))
    fit(dataclasses.replace(cfg, steps=5), tmp_path / "r", progress=False)
    moved = tmp_path / "elsewhere.bin"
    src.rename(moved)
    with pytest.raises(DriftError, match="put the corpus back at its old path, or link it there"):
        fit(dataclasses.replace(cfg, data=str(moved)), tmp_path / "r", resume=True, progress=False)
    src.symlink_to(moved)
    fit(cfg, tmp_path / "r", resume=True, progress=False)
    fit(cfg, tmp_path / "ref", progress=False)
    assert_same_run(tmp_path / "ref", tmp_path / "r")


def test_an_older_kits_none_precisions_are_not_environment_drift():
    "Issue 23: a record whose fp32 precisions say 'none' (an older kit's raw value) means 'ieee', not drift."
    from dormouse.numerics import CPU_FP32_KEYS, EnvDriftError, check_env, numeric_env

    now = numeric_env(1, "cpu", 1)
    assert check_env({**now, **{k: "none" for k in CPU_FP32_KEYS}}, now, False, "old.dmck") == {}
    with pytest.raises(EnvDriftError):  # a precision that acts differently is still drift
        check_env({**now, "fp32_precision": "tf32"}, now, False, "old.dmck")
