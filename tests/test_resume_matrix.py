"""The bitwise resume matrix (issue 6): feature combinations x resume points, each equal to the uninterrupted run."""

import dataclasses, shutil
from pathlib import Path

import pytest

from dormouse.rundir import RunPaths
from dormouse.train import fit
from dormouse.testing import tiny_cfg
from dormouse.testing import assert_same_run, losses

STEPS = 24
# A covering set of feature combinations: every pair of (aux, quant, rand_depth, stress, ngram, match) values appears
# (match codes are on in tiny_cfg; "nomatch" turns them off).
COMBOS = {
    "plain": dict(),
    "aux": dict(aux=True),
    "fp8-check": dict(quant="fp8", quant_check=True),
    "aux-fp8-rand": dict(aux=True, quant="fp8", quant_check=True, rand_depth=True),
    "rand-stress": dict(rand_depth=True, stress=True, stress_refuse=True, stress_k=1.5),
    "aux-stress-nongram-nomatch": dict(aux=True, stress=True, stress_refuse=True, stress_k=1.5, ngram=False,
                                       match=False),
    "fp8-stress-rand-nongram": dict(quant="fp8", quant_check=True, stress=True, rand_depth=True, ngram=False),
    "fp8-rand-nomatch": dict(quant="fp8", quant_check=True, rand_depth=True, match=False),
    "everything": dict(
        aux=True, quant="fp8", quant_check=True, rand_depth=True, stress=True, stress_refuse=True, stress_k=1.5
    ),
    "stream-fp8-check": dict(data_order="stream", quant="fp8", quant_check=True),  # the contiguous order
    "compiled-everything": dict(  # the step through torch.compile: a graph per depth, the fp8 check's latch
        compile=True, aux=True, quant="fp8", quant_check=True, rand_depth=True, stress=True, stress_refuse=True,
        stress_k=1.5
    ),
}  # every combination above runs in the default data_order, "shuffled"


def cfg_for(name, **kw):
    opts = dict(COMBOS[name])
    ngram, match = opts.pop("ngram", True), opts.pop("match", True)
    cfg = tiny_cfg(steps=STEPS, ckpt_every=4, eval_every=8, log_every=4, keep_ckpts=100, **opts, **kw)
    if not ngram:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, ngram_orders=[]))
    if not match:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, match_orders=[]))
    return cfg


def truncate_to(run_dir, step):
    """Simulate a crash after `step`'s checkpoint: later checkpoints vanish, metrics rows beyond remain
    (as a kill leaves them)."""
    for p in RunPaths(Path(run_dir)).ckpt_dir.iterdir():
        if int(p.stem.split("_")[1]) > step:
            p.unlink()


POINTS = ("step1", "eval_ckpt", "last_ckpt", "two_resumes", "extend")  # where each combination is stopped and resumed
# the compiled combination at two of them (each fit compiles a graph per depth; tests/test_compile.py resumes it in
# another process): at an eval step and checkpoint, and after a crash with rows beyond its last checkpoint
COMPILED_POINTS = ("eval_ckpt", "last_ckpt")


def resumed_at(point, cfg, base, tmp_path):
    "The run of `cfg` stopped at `point` and resumed to its end, in tmp_path/point; and the run it must equal."
    run = tmp_path / point
    if point == "step1":
        fit(dataclasses.replace(cfg, steps=1), run, progress=False)
        fit(cfg, run, resume=True, progress=False)
    elif point == "eval_ckpt":  # step 8 is both a checkpoint and an eval step
        fit(dataclasses.replace(cfg, steps=8), run, progress=False)
        fit(cfg, run, resume=True, progress=False)
    elif point == "last_ckpt":  # crash after step 22: the last checkpoint is 20, metrics already hold rows 20..23
        shutil.copytree(base, run)
        truncate_to(run, 20)
        fit(cfg, run, resume=True, progress=False)
    elif point == "two_resumes":
        fit(dataclasses.replace(cfg, steps=8), run, progress=False)
        fit(dataclasses.replace(cfg, steps=16), run, resume=True, progress=False)
        fit(cfg, run, resume=True, progress=False)
    elif point == "extend":  # a finished run extended is the same run as a longer one
        longer = dataclasses.replace(cfg, steps=STEPS + 8)
        fit(longer, tmp_path / "longer", progress=False)
        shutil.copytree(base, run)
        fit(longer, run, resume=True, progress=False)
        return run, tmp_path / "longer"
    return run, base


@pytest.mark.parametrize("name", list(COMBOS))
def test_resume_is_bitwise(name, tmp_path):
    "Each combination's uninterrupted run (trained once), and the same plan stopped at each point and resumed."
    cfg, base = cfg_for(name), tmp_path / "uninterrupted"
    fit(cfg, base, progress=False)
    for point in COMPILED_POINTS if cfg.compile else POINTS:
        run, want = resumed_at(point, cfg, base, tmp_path)
        try:
            assert_same_run(want, run)
        except AssertionError as e:
            raise AssertionError(f"{name}, resumed at {point}: {e}") from e


def test_matrix_can_fail(tmp_path):
    "A run with one strict knob changed is NOT equal: the comparison has teeth."
    cfg = dataclasses.replace(cfg_for("plain"), steps=8)
    fit(cfg, tmp_path / "plain", progress=False)
    fit(dataclasses.replace(cfg, seed=2), tmp_path / "other", progress=False)
    with pytest.raises(AssertionError):
        assert_same_run(tmp_path / "plain", tmp_path / "other")
    assert losses(tmp_path / "plain")[0] != losses(tmp_path / "other")[0]
