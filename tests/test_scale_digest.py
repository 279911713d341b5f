"""The n-gram tables' digest is kept current in O(rows touched) and always equals a full recomputation — after
many steps, across a tables file save/load, on tables built from a tables file and resumed — and the
fingerprint it feeds still changes with any single bit of weight or momentum."""

import hashlib

import numpy as np
import pytest
import torch

import dormouse.digest as dg
from dormouse.ngram import NgramTables, fingerprint_update
from dormouse.tables_file import load_tables_file, save_tables_file, TablesError, verify_tables_file
from dormouse.rng import keyed_normal, keyed_randint

STREAM_TEST = 151  # keyed stream for this file's bytes and fills (not a training stream)
ORDERS, SLOTS, DIM = [2, 3, 4], 2039, 8


def fp(tables):
    h = hashlib.sha256()
    fingerprint_update(h, tables)
    return h.hexdigest()


def batch(i, b=4, t=48):
    return torch.from_numpy(keyed_randint(2, i, STREAM_TEST, 0, 255, b * t).reshape(b, t))


def train(tables, steps, start=0, fingerprint_every=0):
    "Run `steps` lookup/backward/step rounds; optionally take a fingerprint every few steps (as the trainer does)."
    proj = torch.from_numpy(keyed_normal(3, 0, STREAM_TEST, tables.dim * 5).astype(np.float32)).view(tables.dim, 5)
    for i in range(start, start + steps):
        (tables.lookup(batch(i)) @ proj).sin().sum().backward()
        tables.step()
        if fingerprint_every and i % fingerprint_every == 0:
            fp(tables)
    return tables


def test_incremental_equals_full_after_steps():
    t = train(NgramTables(ORDERS, SLOTS, DIM), 30, fingerprint_every=4)
    assert t.digest() == t.full_digest()
    assert t.digest() != NgramTables(ORDERS, SLOTS, DIM).digest()
    assert NgramTables(ORDERS, SLOTS, DIM).digest() == (0, 0) == NgramTables(ORDERS, SLOTS, DIM).full_digest()


def test_digest_costs_rows_touched_not_slots(monkeypatch):
    "digest() hashes each row touched since the last call once, however often it was touched, and nothing else."
    t = NgramTables(ORDERS, 1 << 16, DIM)
    t.digest()
    hashed = []
    real = dg.row_hashes
    monkeypatch.setattr(dg, "row_hashes", lambda rows, flat, kind: hashed.append(len(flat)) or real(rows, flat, kind))
    touched = set()
    proj = torch.ones(DIM, 3)
    for i in range(6):
        (t.lookup(batch(i)) @ proj).sum().backward()
        touched |= set(t.pending_rows().tolist())
        t.step()
    t.digest()
    assert hashed == [len(touched), len(touched)]  # weight, momentum: the union of touched rows, once each
    assert len(touched) < len(ORDERS) * (1 << 16) // 50
    hashed.clear()
    t.digest()
    assert hashed == []  # nothing touched since: nothing hashed
    monkeypatch.setattr(dg, "row_hashes", real)
    assert t.digest() == t.full_digest()


def test_every_single_bit_changes_the_fingerprint():
    t = train(NgramTables(ORDERS, SLOTS, DIM), 5)
    base = fp(t)
    n = t.weight.numel()
    for j, pos in enumerate(keyed_randint(4, 0, STREAM_TEST, 0, 2 * n * 32 - 1, 48).tolist()):
        which, word, bit = (t.weight, t.momentum)[pos // (n * 32)], (pos % (n * 32)) // 32, pos % 32
        flat = which.view(-1).view(torch.int32)
        flat[word] ^= 1 << bit if bit < 31 else -(1 << 31)
        assert fp(t) != base, (j, word, bit)
        flat[word] ^= 1 << bit if bit < 31 else -(1 << 31)
        assert fp(t) == base
    t.table_step += 1
    assert fp(t) != base


def test_sidecar_round_trip_and_resume(tmp_path):
    "The saved digest is checked against the loaded rows; a resumed table keeps the digest of the uninterrupted one."
    a = train(NgramTables(ORDERS, SLOTS, DIM), 12, fingerprint_every=3)
    p = save_tables_file(tmp_path / "step_000012.ngram", a, train_step=12)
    b, step, _ = load_tables_file(p, expect_train_step=12)  # trusts the stored digest; row hashes come at first touch
    b.lr, b.momentum_coef = a.lr, a.momentum_coef  # the optimiser settings are the plan's, not the file's
    assert b.digest() == a.digest() == b.full_digest() and fp(a) == fp(b)
    c = load_tables_file(p, check_digest=True)[0]
    assert c.digest() == a.digest()
    train(a, 9, start=12, fingerprint_every=2)
    train(b, 9, start=12, fingerprint_every=5)
    assert torch.equal(a.weight, b.weight) and torch.equal(a.momentum, b.momentum)
    assert a.digest() == b.digest() == b.full_digest() and fp(a) == fp(b)


def test_a_wrong_kept_digest_is_refused_when_checked(tmp_path):
    "A bug in the bookkeeping (simulated: a kept sum off by one bit) is caught by a checked load and by the verifier."
    for k, section in ((0, "weight"), (1, "momentum")):
        t = train(NgramTables(ORDERS, SLOTS, DIM), 4)
        kept = t.digest()
        t.digest = lambda: tuple(d ^ (1 << 40) if i == k else d for i, d in enumerate(kept))  # the bug: a wrong sum
        p = save_tables_file(tmp_path / f"bad{k}.ngram", t, train_step=4)
        with pytest.raises(TablesError, match="digest mismatch") as e:
            load_tables_file(p, check_digest=True)
        assert e.value.section == section
        with pytest.raises(TablesError, match="digest mismatch") as e:
            verify_tables_file(p)  # what `dormouse inspect` runs
        assert e.value.section == section
        del t.digest  # the tables' own digest again
        p = save_tables_file(tmp_path / f"good{k}.ngram", t, train_step=4)
        assert verify_tables_file(p).version == 2 and load_tables_file(p, check_digest=True)[0].digest() == t.digest()


def test_writes_outside_step_are_seen():
    "A write that bypasses step() — in place, or a swapped tensor — makes the next digest a full recomputation."
    t = train(NgramTables(ORDERS, SLOTS, DIM), 3)
    before = t.digest()
    t.weight[1, 7, 2] += 1.0
    assert t.digest() != before and t.digest() == t.full_digest()
    t.momentum = t.momentum.clone()
    t.momentum[0, 0, 0] = 3.0
    assert t.digest() == t.full_digest()
    train(t, 3, start=3)
    assert t.digest() == t.full_digest()
    t.weight[2, 100, 5] -= 2.0  # an unseen write, then steps before anyone asks: the steps must not hide it
    train(t, 2, start=6)
    assert t.digest() == t.full_digest()
