"""Both data orders through the trainer (rule: data indexed by step): the probe batches shift the stream for each, a
resumed run reads exactly the batches an uninterrupted run reads, and every rank slices the same global batch."""

import dataclasses, hashlib

import numpy as np
import pytest
import torch

from dormouse.config import ConfigError
from dormouse.validate import validate
from dormouse.data import Corpus, load_corpus
from dormouse.step import global_batch, pre_batches
from dormouse.train import fit
from dormouse.testing import tiny_cfg

ORDERS = ["shuffled", "stream"]


def record_reads(monkeypatch):
    "Patch `Corpus.batch_at` to log (index, sha256 of x) of every training batch the trainer reads."
    log, real = [], Corpus.batch_at

    def spy(self, i, batch, seq_len, order="stream", seed=0):
        x, y = real(self, i, batch, seq_len, order, seed)
        log.append((i, hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16]))
        return x, y

    monkeypatch.setattr(Corpus, "batch_at", spy)
    return log


@pytest.mark.parametrize("order", ORDERS)
def test_resume_reads_the_batches_of_the_uninterrupted_run(order, monkeypatch, tmp_path):
    # warm-up forwards and the quant check each read a probe batch on a fresh run: pre_batches = 2
    cfg = tiny_cfg(steps=12, ckpt_every=4, eval_every=4, log_every=4, quant="fp8", quant_check=True, data_order=order)
    pb = pre_batches(cfg)
    assert pb == 2
    log = record_reads(monkeypatch)
    fit(cfg, tmp_path / "whole", progress=False)
    whole = list(log)
    log.clear()
    fit(dataclasses.replace(cfg, steps=6), tmp_path / "resumed", progress=False)  # checkpoint at step 4 and at 6
    first = list(log)
    log.clear()
    fit(cfg, tmp_path / "resumed", resume=True, progress=False)
    replayed, second = log[:2], log[2:]  # the replay before trust (steps 4-5: the interval ending at 6), then 6-11
    assert [i for i, _ in whole] == [0, 1] + [s + pb for s in range(12)]  # probes first, then step s reads s + pb
    assert replayed == whole[pb + 4:pb + 6]  # the replay reads the very batches those steps read
    assert first + second == whole  # the resume neither repeats nor skips a batch: the same bytes, in the same order
    assert [i for i, _ in second] == [s + pb for s in range(6, 12)]  # no probes on a resume, no shift


def test_the_two_orders_read_different_batches_and_stream_is_contiguous(monkeypatch, tmp_path):
    logs, log = {}, record_reads(monkeypatch)
    for order in ORDERS:
        fit(tiny_cfg(steps=3, data_order=order), tmp_path / order, progress=False)
        logs[order] = list(log)
        log.clear()
    assert [i for i, _ in logs["shuffled"]] == [i for i, _ in logs["stream"]]
    assert [h for _, h in logs["shuffled"]] != [h for _, h in logs["stream"]]
    cfg = tiny_cfg()
    c = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
    x, _ = Corpus.batch_at(c, 5, cfg.batch, cfg.seq_len, "stream")
    k = 5 * cfg.batch
    assert bytes(x.flatten().tolist()) == bytes(c.data[k * cfg.seq_len : (k + cfg.batch) * cfg.seq_len])


@pytest.mark.parametrize("order", ORDERS)
def test_ranks_slice_one_global_batch(order):
    cfg = tiny_cfg(batch=8, micro_batch=2, data_order=order)
    c = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
    x1, y1, keep1 = global_batch(c, 7, cfg, device="cpu")
    for world in [2, 4]:
        xs = []
        for rank in range(world):
            x, y, keep = global_batch(c, 7, cfg, device="cpu", rank=rank, world=world)
            assert torch.equal(x, x1) and torch.equal(y, y1)  # every rank builds the same global batch
            xs.append(x[keep])
        assert torch.equal(torch.cat(xs), x1[keep1])  # and the slices tile it


def test_data_order_is_a_strict_validated_key():
    with pytest.raises(ConfigError, match='data_order = "random": use one of shuffled, stream'):
        validate(tiny_cfg(data_order="random"))
    assert tiny_cfg().data_order == "shuffled"


def test_eval_sample_is_keyed_and_spread(tmp_path):
    cfg = tiny_cfg()
    c = load_corpus(cfg.data, cfg.holdout_frac, cfg.seq_len)
    firsts = []
    for j in range(8):
        x, _ = c.eval_batch(j, cfg.batch, cfg.seq_len)
        assert torch.equal(x, c.eval_batch(j, cfg.batch, cfg.seq_len)[0])
        firsts.append(bytes(x[0].tolist()))
    held = bytes(c.data[c.n_train :])
    pos = np.array([held.find(f) for f in firsts])
    assert (pos >= 0).all() and pos.max() - pos.min() > c.n_held // 2  # not one contiguous corner of the split
