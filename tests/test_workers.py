"""One canonical sum, in one process: a plan with micro_batch < batch trains the same bits whether one process
accumulates its microbatches or 2, 3, 4 or 6 workers share them (threads standing in for ranks:
`dormouse.testing.virtual_workers`). Real processes under torchrun: tests/test_ddp.py."""

import dataclasses

import pytest

from dormouse.config import ConfigError
from dormouse.data import corpus_for
from dormouse.parts import build_parts
from dormouse.precompute import precompute_jepa_targets
from dormouse.step import train_step
from dormouse.testing import accumulation_check, tiny_cfg, virtual_workers
from dormouse.train import fit

EVERYTHING = dict(aux=True, quant="fp8", quant_check=True, rand_depth=True, stress=True)


def test_one_process_accumulating_equals_2_and_4_workers(tmp_path):
    "Every loss and the final state: fit accumulating 4 microbatches a step = 2 workers = 4 workers (one each)."
    cfg = tiny_cfg(steps=8, ckpt_every=4, log_every=2, eval=False, **EVERYTHING)
    said = accumulation_check(cfg, "cpu", tmp_path)
    assert said.startswith("8 steps of 4 sequences in 4 microbatches of 1: one process accumulating = 2 workers = 4")


def test_with_offline_targets_too(tmp_path):
    cfg = tiny_cfg(steps=6, ckpt_every=3, log_every=3, eval=False, aux=True, jepa_targets=str(tmp_path / "targets"))
    fit(tiny_cfg(steps=4, ckpt_every=4), tmp_path / "teacher", progress=False)
    precompute_jepa_targets(dataclasses.replace(cfg, micro_batch=1), tmp_path / "teacher", cfg.jepa_targets,
                            progress=False)
    accumulation_check(cfg, "cpu", tmp_path / "run")  # raises on the first difference


def test_blocks_that_are_not_whole_subtrees_still_sum_alike():
    "6 microbatches: 2 workers hold 3 each and 4 is no divisor; every valid world gives the same rows and state."
    cfg = tiny_cfg(batch=6, micro_batch=1, **EVERYTHING)
    runs = {w: virtual_workers(cfg, w, 3) for w in (1, 2, 3, 6)}
    want = ([r["loss"] for r in runs[1][0][0]], runs[1][0][1])
    for w, ranks in runs.items():
        for rows, fp in ranks:
            assert ([r["loss"] for r in rows], fp) == want, f"{w} workers"
    with pytest.raises(ConfigError, match="which 4 workers cannot share evenly: valid world sizes are 1, 2, 3, 6"):
        virtual_workers(cfg, 4, 1)


def test_a_step_refuses_a_world_that_cannot_share_its_microbatches():
    cfg = tiny_cfg(micro_batch=2)
    with pytest.raises(ConfigError, match=r"micro_batch = 2 makes 2 microbatches a step \(batch = 4\), which 4"):
        train_step(build_parts(cfg), corpus_for(cfg), cfg, 0, probe_batches=1, rank=0, world=4)


def test_micro_batch_changes_the_bits_so_it_is_a_plan_key(tmp_path):
    "The shapes of a step's arithmetic change with micro_batch: another run, which a resume refuses as drift."
    a = fit(tiny_cfg(steps=2, ckpt_every=2), tmp_path / "a", progress=False)
    b = fit(tiny_cfg(steps=2, ckpt_every=2, micro_batch=2), tmp_path / "b", progress=False)
    assert a.loss.tolist() != b.loss.tolist()
    with pytest.raises(Exception, match=r"micro_batch: 0 -> 2"):
        fit(tiny_cfg(steps=4, ckpt_every=2, micro_batch=2), tmp_path / "a", resume=True, progress=False)
    fit(tiny_cfg(steps=4, ckpt_every=2, micro_batch=4), tmp_path / "a", resume=True, progress=False)  # = batch: as 0
