"""Exempt keys are harmless, proven: flipping a progress key leaves the training trajectory bitwise unchanged."""

import dataclasses

import pytest

from dormouse.config import PROGRESS_KEYS
from dormouse.train import fit
from dormouse.testing import tiny_cfg
from dormouse.testing import assert_same_run, losses

BASE = dict(steps=20, log_every=5, ckpt_every=10, eval=True, eval_every=10)
FLIPS = {"steps": 28, "log_every": 3, "ckpt_every": 7, "keep_ckpts": 1, "eval": False, "eval_every": 4}


def test_every_progress_key_has_a_flip():
    assert set(FLIPS) == set(PROGRESS_KEYS), "a progress key was added without a harmlessness test"


@pytest.fixture(scope="module", params=["shuffled", "stream"])
def order(request):
    return request.param


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, order):
    d = tmp_path_factory.mktemp("progress") / "base"
    fit(tiny_cfg(aux=True, rand_depth=True, data_order=order, **BASE), d, progress=False)
    return d


@pytest.mark.parametrize("key", sorted(FLIPS))
def test_progress_key_is_harmless(key, order, base_run, tmp_path):
    cfg = tiny_cfg(aux=True, rand_depth=True, data_order=order, **{**BASE, key: FLIPS[key]})
    fit(cfg, tmp_path / "flipped", progress=False)
    if key == "steps":  # the longer run's first 20 steps are the base run
        assert losses(tmp_path / "flipped")[:20] == losses(base_run)
        fit(dataclasses.replace(cfg, steps=20), tmp_path / "short", progress=False)
        assert_same_run(base_run, tmp_path / "short")
    else:
        assert_same_run(base_run, tmp_path / "flipped")


def test_a_strict_key_is_not_harmless(order, base_run, tmp_path):
    fit(
        tiny_cfg(aux=True, rand_depth=True, data_order=order, **{**BASE, "eval_batches": 3, "jepa_weight": 0.2}),
        tmp_path / "strict",
        progress=False,
    )
    assert losses(tmp_path / "strict") != losses(base_run)
