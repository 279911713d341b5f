"""The corpus cache (issue 23): a directory's builds replace each other (a `touch` no longer adds a full copy), and
deleting the cache under a healthy run (what a full disk invites) does not end it: the run reads its open file."""

import os, shutil

import dormouse.train as train_mod
from dormouse.data import load_corpus
from dormouse.rundir import RunPaths
from dormouse.testing import tiny_cfg
from dormouse.train import fit


def corpus_dir(root):
    root.mkdir()
    for k in range(8):
        (root / f"f{k}.txt").write_bytes(bytes(range(32, 127)) * (20 + k))
    return root


def test_touching_a_directory_corpus_replaces_its_build(tmp_path, monkeypatch):
    monkeypatch.setenv("DORMOUSE_CACHE", str(tmp_path / "cache"))
    d = corpus_dir(tmp_path / "c")
    first = load_corpus(d, 0.2, 16)
    os.utime(d / "f3.txt", ns=(1, 1))  # a touch: another listing, the same bytes
    second = load_corpus(d, 0.2, 16)
    assert second.sha256 == first.sha256
    builds = sorted(p.name for p in (tmp_path / "cache").glob("corpus-*.bin"))
    assert builds == [os.path.basename(second.data.path)], builds
    assert bytes(first.data) == bytes(second.data)  # the replaced build is still read through its open file


def test_deleting_the_cache_under_a_run_does_not_end_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DORMOUSE_CACHE", str(tmp_path / "cache"))
    d = corpus_dir(tmp_path / "c")
    real, calls = train_mod.checkpoint, []

    def checkpoint_then_delete_the_cache(*a, **kw):
        real(*a, **kw)
        calls.append(1)
        if len(calls) == 1:
            shutil.rmtree(tmp_path / "cache")

    monkeypatch.setattr(train_mod, "checkpoint", checkpoint_then_delete_the_cache)
    cfg = tiny_cfg(steps=10, ckpt_every=5, eval=False, data=str(d), holdout_frac=0.2, seq_len=16)
    df = fit(cfg, tmp_path / "r", progress=False)
    assert len(calls) == 2 and len(df) == 10 and not df.attrs["interrupted"]
    assert [p.name for p in RunPaths(tmp_path / "r").checkpoints()][-1] == "step_000010.dmck"
