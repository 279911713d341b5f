"""Issue 12 item 8: the corpus is pinned while it is used. A corpus rewritten under a running run (even rewritten back)
refuses the next checkpoint, naming the file, and a resume from the last good one is the uninterrupted run; a corpus
that shrinks under the run ends in that error, not a signal."""

import subprocess, sys, textwrap

import pytest

import dormouse.step as step_mod  # where fit's loop (step.run_steps) looks train_step up
import dormouse.train as train
from dormouse.checkpoints import CorpusChangedError
from dormouse.config import ConfigError, cfg_from_dict, read_snapshot
from dormouse.data import default_corpus_bytes
from dormouse.rundir import RunPaths
from dormouse.testing import assert_same_run, tiny_cfg


@pytest.fixture()
def corpus(tmp_path):
    p = tmp_path / "corpus.bin"
    p.write_bytes(default_corpus_bytes()[:300_000])
    return p


def _cfg(corpus, **kw):
    return tiny_cfg(data=str(corpus), steps=15, ckpt_every=5, keep_ckpts=5, eval=False, **kw)


def _names(run):
    return sorted(p.name for p in RunPaths(run).ckpt_dir.glob("*.dmck"))


def test_corpus_rewritten_mid_run_and_restored_refuses_the_checkpoint(tmp_path, corpus, monkeypatch):
    train.fit(_cfg(corpus), tmp_path / "ref", progress=False)
    raw = corpus.read_bytes()
    real = step_mod.train_step

    def tampered(parts, data, cfg, step, *a, **kw):
        if step == 6:
            corpus.write_bytes(raw[:1000] + bytes(40_000) + raw[41_000:])  # 40 KB rewritten
        if step == 8:
            corpus.write_bytes(raw)  # and restored before anyone looks
        return real(parts, data, cfg, step, *a, **kw)

    monkeypatch.setattr(step_mod, "train_step", tampered)
    with pytest.raises(CorpusChangedError, match=str(corpus)) as e:
        train.fit(_cfg(corpus), tmp_path / "run", progress=False)
    assert "no checkpoint written" in str(e.value)
    assert _names(tmp_path / "run") == ["step_000005.dmck"]  # nothing at step 10: it may have trained on other bytes
    monkeypatch.undo()
    train.fit(_cfg(corpus), tmp_path / "run", resume=True, progress=False)
    assert_same_run(tmp_path / "ref", tmp_path / "run")


def test_corpus_changed_at_a_checkpoint_is_refused_and_the_resume_checks_the_full_hash(tmp_path, corpus, monkeypatch):
    raw = corpus.read_bytes()
    real = step_mod.train_step

    def tampered(parts, data, cfg, step, *a, **kw):
        if step == 7:
            corpus.write_bytes(raw[:-1] + b"!")  # one byte at the end: the end window of the stamp sees it
        return real(parts, data, cfg, step, *a, **kw)

    monkeypatch.setattr(step_mod, "train_step", tampered)
    with pytest.raises(CorpusChangedError, match="sampled bytes differ"):
        train.fit(_cfg(corpus), tmp_path / "run", progress=False)
    monkeypatch.undo()
    snap = cfg_from_dict(read_snapshot(RunPaths(tmp_path / "run").config))  # what `dormouse train --resume` runs
    with pytest.raises(ConfigError, match="the corpus changed"):  # data_sha256 in the plan: the full hash
        train.fit(snap, tmp_path / "run", resume=True, progress=False)


_TRUNCATE = textwrap.dedent("""
    import sys
    import dormouse.step as step_mod
    import dormouse.train as train
    from dormouse.testing import tiny_cfg
    corpus, run = sys.argv[1], sys.argv[2]
    real = step_mod.train_step
    def step(parts, data, cfg, s, *a, **kw):
        if s == 4:  # the batch of step 4 starts past the first page (a mapped page past EOF faults)
            open(corpus, "r+b").truncate(64)  # the corpus shrinks under the running run
        return real(parts, data, cfg, s, *a, **kw)
    step_mod.train_step = step
    try:
        train.fit(tiny_cfg(data=corpus, steps=10, ckpt_every=5, eval=False, batch=8, seq_len=128), run,
                  progress=False)
    except Exception as e:
        print(f"ERROR {type(e).__name__}: {e}")
        sys.exit(3)
""")


def test_corpus_truncated_mid_run_is_an_error_naming_the_file_not_a_signal(tmp_path, corpus):
    r = subprocess.run(
        [sys.executable, "-c", _TRUNCATE, str(corpus), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])  # -7 is SIGBUS
    assert "CorpusError" in r.stdout and str(corpus) in r.stdout and "shrank" in r.stdout, r.stdout
    assert _names(tmp_path / "run") == []  # no checkpoint over the shrunk corpus
