"""Shared helpers for dormouse's pytest suite: run comparisons that are exact, never approximate."""

from pathlib import Path

import torch

from dormouse.container import load_ckpt
from dormouse.rundir import RunPaths, read_jsonl


def losses(run_dir):
    "Per-step losses of a run, in step order."
    rows = read_jsonl(RunPaths(Path(run_dir)).metrics)
    assert [r["step"] for r in rows] == list(range(len(rows))), "metrics rows are not one per step"
    return [r["loss"] for r in rows]


def final_ckpt(run_dir):
    "The newest container of a run, loaded."
    cks = RunPaths(Path(run_dir)).checkpoints()
    assert cks, f"no checkpoint in {run_dir}"
    return load_ckpt(cks[-1])


def assert_same_state(a, b):
    "Two checkpoints hold bitwise the same run state."
    assert a.step == b.step and a.flags == b.flags and a.table_step == b.table_step
    assert a.model.keys() == b.model.keys()
    for k in a.model:
        assert torch.equal(a.model[k], b.model[k]), k
    assert (a.teacher is None) == (b.teacher is None)
    if a.teacher is not None:
        for k in a.teacher:
            assert torch.equal(a.teacher[k], b.teacher[k]), f"teacher {k}"
    sa, sb = a.optim["state"], b.optim["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for k in sa[i]:
            va, vb = sa[i][k], sb[i][k]
            assert torch.equal(va, vb) if torch.is_tensor(va) else va == vb, f"optim {i}.{k}"
    assert a.stress == b.stress


def assert_same_run(run_a, run_b):
    "Every step's loss equal (==) and the final state bitwise equal, fingerprints included."
    la, lb = losses(run_a), losses(run_b)
    assert len(la) == len(lb), (len(la), len(lb))
    for s, (x, y) in enumerate(zip(la, lb)):
        assert x == y, f"loss differs at step {s}: {x!r} vs {y!r}"
    fa = {r["step"]: r["fingerprint"] for r in read_jsonl(RunPaths(Path(run_a)).metrics) if r.get("fingerprint")}
    fb = {r["step"]: r["fingerprint"] for r in read_jsonl(RunPaths(Path(run_b)).metrics) if r.get("fingerprint")}
    common = sorted(set(fa) & set(fb))
    assert common, "no common fingerprint steps"
    for s in common:
        assert fa[s] == fb[s], f"fingerprint differs at step {s}"
    assert_same_state(final_ckpt(run_a), final_ckpt(run_b))
