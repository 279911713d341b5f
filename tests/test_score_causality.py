"""The score reads only the past: with a trained model, its real match codes (which read the training text too) and
real files (the standard library's `email` package as a corpus), changing byte m of a held-out file leaves every
prediction up to and including byte m's unchanged, bit for bit, for the static score and the adaptive one; the same
holds for a training batch (its codes, its n-gram features, the model's logits); and no held-out byte is ever read by a
training step, nor moves the tables or the model when it is scored. The score mixed with the count model
(`dormouse.mix`) reads only the past too: the counts of the training text and of the file before each byte.

Each check also asserts that the change it makes is seen later on: a test that compared nothing would pass anything.
"""

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from dormouse.corpus_cache import stdlib_root
from dormouse.data import corpus_for
from dormouse.heldout import held_units, score_sample
from dormouse.parts import build_parts, state_fingerprint
from dormouse.match import MATCH_NONE
from dormouse.mix import MIX, count_model, mixed_bits
from dormouse.score import START_BYTE, SCORE_TOKENS, adaptive_bits, byte_bits, codes_for, score, windows
from dormouse.step import evaluate, pre_batches, run_probes, train_step
from dormouse.testing import tiny_cfg

CFG = tiny_cfg(steps=40, threads=1, data=str(stdlib_root() / "email"), holdout_frac=0.25)  # orders 2 and 8
STRIDE = CFG.seq_len // 2


@pytest.fixture(scope="module")
def trained():
    "A tiny model trained on a real package (its codes' embedding is no longer zero), and three held-out files."
    corpus = corpus_for(CFG)
    parts = build_parts(CFG)
    run_probes(parts, corpus, CFG, log=lambda m: None)
    for s in range(CFG.steps):
        train_step(parts, corpus, CFG, s, probe_batches=pre_batches(CFG))
    held = sorted((u for u in held_units(corpus) if u[2] >= 1500), key=lambda u: u[2])[:3]  # whole held-out files
    units = [bytes(corpus.data[o:o + n]) for _, o, n in held]
    assert len(units) == 3 and parts.model.match_emb.weight.abs().sum() > 0
    in_corpus = codes_for(corpus, units, CFG.model.match_orders, True, [u[1] for u in held])
    as_text = codes_for(corpus, units, CFG.model.match_orders, True)  # the same bytes, computed as outside text
    assert CFG.model.match_train and all(np.array_equal(a, b) for a, b in zip(in_corpus, as_text))
    return parts, corpus, units


def _codes(corpus, unit: bytes):
    "The codes the score feeds a held-out file: its own past, else the training text (computed for any bytes)."
    return codes_for(corpus, [unit], CFG.model.match_orders, True)


class Recorder(torch.nn.Module):
    "The real model, its every forward's logits kept: what the score saw, position by position."

    def __init__(self, model):
        super().__init__()
        self.model, self.cfg, self.logits = model, model.cfg, []

    def forward(self, x, depth, ngram=None, *, match=None):
        out = self.model(x, depth, ngram, match=match)
        self.logits.append(out.detach().clone())
        return out


def _positions(unit: bytes, k: int = 10) -> list[int]:
    "Bytes to change: spread over the unit, never the first or last window's edge only."
    return sorted({int(m) for m in np.linspace(3, len(unit) - 2, k)})


def _changed(unit: bytes, m: int) -> bytes:
    b = bytearray(unit)
    b[m] = (b[m] + 1) % 256 if chr(b[m]).isalnum() else ord("q")
    return bytes(b)


def _predictions(logits: list, n: int, m: int) -> list:
    "Every logit row the score computed for a byte at or before `m` (window rows in the score's own order)."
    rows, out = SCORE_TOKENS // CFG.seq_len, []
    for i, (start, _, _) in enumerate(windows(n, CFG.seq_len, STRIDE)):
        last = min(m - start, CFG.seq_len - 1)  # window position j predicts unit byte start + j
        if last >= 0:
            out.append(logits[i // rows][i % rows, :last + 1])
    return out


def test_the_score_reads_only_the_past_with_the_real_model_and_real_codes(trained):
    parts, corpus, units = trained
    code_moved = later_moved = 0
    for unit in units:
        rec = Recorder(parts.model)
        base = byte_bits(rec, parts.tables, [unit], CFG.seq_len, STRIDE, CFG.model.depth, _codes(corpus, unit))
        for m in _positions(unit):
            other = _changed(unit, m)
            rec2 = Recorder(parts.model)
            codes = _codes(corpus, unit)[0], _codes(corpus, other)[0]
            bits = byte_bits(rec2, parts.tables, [other], CFG.seq_len, STRIDE, CFG.model.depth, [codes[1]])
            assert np.array_equal(bits[0][:m], base[0][:m]), f"byte {m} changed the bits of an earlier byte"
            for a, b in zip(_predictions(rec.logits, len(unit), m), _predictions(rec2.logits, len(unit), m)):
                assert torch.equal(a, b), f"byte {m} changed a prediction made before it was read"
            code_moved += not np.array_equal(codes[0][m + 1], codes[1][m + 1])  # the code that reads byte m
            later_moved += not np.array_equal(bits[0][m + 1:], base[0][m + 1:])
    n = sum(len(_positions(u)) for u in units)
    assert code_moved >= n // 2 and later_moved == n  # the changes were real: later codes and bits moved


def test_the_adaptive_score_reads_only_the_past(trained):
    parts, corpus, units = trained
    fp = state_fingerprint(parts)
    for unit in units[:2]:  # a unit and 4 changes of it: each adaptive pass trains a copy per window group
        st, ad = adaptive_bits(parts.model, parts.tables, [unit], CFG.seq_len, STRIDE, CFG.model.depth,
                               _codes(corpus, unit))
        moved = 0
        for m in _positions(unit, 4):
            other = _changed(unit, m)
            st2, ad2 = adaptive_bits(parts.model, parts.tables, [other], CFG.seq_len, STRIDE, CFG.model.depth,
                                     _codes(corpus, other))
            assert np.array_equal(st2[0][:m], st[0][:m]) and np.array_equal(ad2[0][:m], ad[0][:m]), m
            moved += not np.array_equal(ad2[0][m + 1:], ad[0][m + 1:])
        assert moved == len(_positions(unit, 4))
    assert state_fingerprint(parts) == fp  # the run's model and tables are as they were


def _copy_files(src, dst, rels):
    for r in rels:
        (dst / r).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / r, dst / r)


def test_a_training_batch_reads_only_the_past(tmp_path):
    "Real stdlib files as a directory corpus; one byte of a training file changed: codes, features, logits before it."
    root = stdlib_root()
    rels = ["json/decoder.py", "json/encoder.py", "json/scanner.py", "json/tool.py", "textwrap.py", "shlex.py",
            "colorsys.py", "bisect.py", "heapq.py", "fnmatch.py", "glob.py", "keyword.py"]
    a, b = tmp_path / "a", tmp_path / "b"
    _copy_files(root, a, rels)
    _copy_files(root, b, rels)
    cfg = dataclasses.replace(tiny_cfg(steps=10, threads=1, holdout_frac=0.2), data=str(a))
    ca = corpus_for(cfg)
    parts = build_parts(cfg)
    for s in range(cfg.steps):
        train_step(parts, ca, cfg, s, probe_batches=0)
    x, _ = ca.batch_at(3, cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)
    pos = ca._train_index(3, cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)  # the corpus offsets of the batch
    for q in range(17, cfg.seq_len):  # change the corpus byte row 0 reads at column q, in its file in copy b
        off = int(pos[0, q])
        f = next(f for f in ca.manifest["files"] if f["offset"] <= off < f["offset"] + f["bytes"])
        raw = bytearray((b / f["path"]).read_bytes())
        at = off - f["offset"] - (f["bytes"] - len(raw))  # the corpus prefixes each file with a header line
        if at >= 0:
            break
    raw[at] ^= 0x20
    (b / f["path"]).write_bytes(bytes(raw))
    cb = corpus_for(dataclasses.replace(cfg, data=str(b)))
    assert ca.n_train == cb.n_train
    x2, _ = cb.batch_at(3, cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)
    m1 = ca.match_at(3, cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)
    m2 = cb.match_at(3, cfg.batch, cfg.seq_len, cfg.data_order, cfg.seed)
    assert torch.equal(x[0, :q], x2[0, :q]) and x[0, q] != x2[0, q]
    assert torch.equal(m1[0, :q], m2[0, :q])  # the codes of the positions before the change
    with torch.no_grad():
        f1, f2 = parts.tables.lookup(x), parts.tables.lookup(x2)
        l1 = parts.model.eval()(x, 2, f1, match=m1)
        l2 = parts.model(x2, 2, f2, match=m2)
    assert torch.equal(f1[0, :q], f2[0, :q]) and not torch.equal(f1[0, q:], f2[0, q:])
    assert torch.equal(l1[0, :q], l2[0, :q]) and not torch.equal(l1[0, q:], l2[0, q:])


class Reads:
    "A corpus file that remembers the highest offset anything read from it."

    def __init__(self, data):
        self.data, self.top = data, -1

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            lo, hi, _ = idx.indices(len(self.data))
            self.top = max(self.top, hi - 1)
        else:
            self.top = max(self.top, int(np.max(idx)))
        return self.data[idx]


def test_no_held_out_byte_enters_training_and_scoring_moves_nothing():
    cfg = dataclasses.replace(CFG, steps=30)
    corpus = corpus_for(cfg)
    reads = Reads(corpus.data)
    watched = dataclasses.replace(corpus, data=reads)
    parts = build_parts(cfg)
    run_probes(parts, watched, cfg, log=lambda m: None)
    for s in range(cfg.steps):
        train_step(parts, watched, cfg, s, probe_batches=pre_batches(cfg))
    assert 0 <= reads.top < corpus.n_train  # every byte a training step read (inputs and targets) is training text
    n_seq = (corpus.n_train - 1) // cfg.seq_len  # a whole epoch of the keyed order: every sequence it can draw
    epoch = corpus._train_index(0, n_seq, cfg.seq_len, cfg.data_order, cfg.seed)
    assert epoch.max() < corpus.n_train and len(np.unique(epoch[:, 0])) == n_seq
    fp = state_fingerprint(parts)
    evaluate(parts, corpus, cfg, "cpu")
    sc = score(parts.model, parts.tables, corpus, cfg.seq_len, cfg.model.depth, sample=score_sample(corpus, 20_000))
    assert sc.nbytes > 0 and all(o >= corpus.n_train for _, o, _ in sc.sample.units)
    assert state_fingerprint(parts) == fp  # the held-out bytes moved neither the tables nor the model


def test_each_unit_is_read_from_the_start_byte_alone(trained):
    "A unit's first byte is predicted from the start byte only: the same bits whatever came before it in the corpus."
    parts, corpus, units = trained
    first = [byte_bits(parts.model, parts.tables, [u], CFG.seq_len, STRIDE, CFG.model.depth,
                       _codes(corpus, u))[0][0] for u in (units[0], units[0][:1])]
    assert first[0] == first[1] and _codes(corpus, units[0])[0][0].tolist() == [MATCH_NONE] * 2
    both = units[1] + units[0]
    again = byte_bits(parts.model, parts.tables, [both], CFG.seq_len, STRIDE, CFG.model.depth, _codes(corpus, both))
    assert again[0][0] == byte_bits(parts.model, parts.tables, [units[1]], CFG.seq_len, STRIDE, CFG.model.depth,
                                    _codes(corpus, units[1]))[0][0] and START_BYTE == 10


def test_the_mixed_score_reads_only_the_past_with_the_real_counts(trained):
    "The scorecard's mix: the real model's bits of real held-out files mixed with counts of the real training text."
    parts, corpus, units = trained
    train = np.frombuffer(bytes(corpus.data[:corpus.n_train]), dtype=np.uint8)
    depth = CFG.model.depth
    for unit in units[:2]:
        # the unit and each of its changed copies counted in one pass over the training text: a unit's counts read
        # its own past and that text only (asserted at the end), so each copy's counts are its counts alone
        others = [_changed(unit, m) for m in _positions(unit)]
        counted = count_model(train, [unit] + others, MIX)
        cuts = np.cumsum([len(u) for u in [unit] + others])[:-1]
        each = [tuple(part) for part in zip(*(np.split(x, cuts) for x in counted))]
        bits = byte_bits(parts.model, parts.tables, [unit], CFG.seq_len, STRIDE, depth, _codes(corpus, unit))
        base = mixed_bits(bits, each[0], MIX)[0]
        assert base.mean() < bits[0].mean()  # the counts carry something the model lacks
        moved = 0
        for m, other, own_counts in zip(_positions(unit), others, each[1:]):
            bits2 = byte_bits(parts.model, parts.tables, [other], CFG.seq_len, STRIDE, depth, _codes(corpus, other))
            mixed = mixed_bits(bits2, own_counts, MIX)[0]
            assert np.array_equal(mixed[:m], base[:m]), f"byte {m} changed the mixed bits of an earlier byte"
            moved += not np.array_equal(mixed[m + 1:], base[m + 1:])
        assert moved == len(_positions(unit))
    # a unit's counts read its own past and the training text, never another held-out unit
    alone = count_model(train, units[:1], MIX)
    beside = count_model(train, [units[0], _changed(units[1], 5)], MIX)
    assert all(np.array_equal(a, b[:len(units[0])]) for a, b in zip(alone, beside))
