"""What `fit` does to the process that calls it (issue 23): a stop asked during an eval of any size is honoured within
one batch and checkpoints the step; a second `fit` from another thread is refused before it touches anything; the
caller's torch settings, environment, warnings filters and file descriptors are as they were after a run, failed or
not."""

import os, signal, subprocess, sys, textwrap, threading

import pytest
import torch

import dormouse.train as train_mod
from dormouse.container import load_ckpt
from dormouse.data import Corpus
from dormouse.dist import ProcessBusyError
from dormouse.rundir import RunPaths
from dormouse.testing import tiny_cfg
from dormouse.train import fit


def test_a_stop_during_an_endless_eval_is_honoured_within_one_batch_and_checkpoints_the_step(tmp_path, monkeypatch):
    cfg = tiny_cfg(steps=20, eval_every=4, eval_batches=10**9, ckpt_every=100, log_every=100)
    real, calls = Corpus.eval_batch, []

    def eval_batch(self, j, batch, seq_len):
        calls.append(j)
        if len(calls) == 3:  # the third batch of the first eval: a scheduler's SIGTERM arrives
            os.kill(os.getpid(), signal.SIGTERM)
        assert len(calls) < 50, "the eval went on after the stop"
        return real(self, j, batch, seq_len)

    monkeypatch.setattr(Corpus, "eval_batch", eval_batch)
    df = fit(cfg, tmp_path / "r", progress=False)
    assert len(calls) == 3  # the eval asked nothing after the stop: abandoned, not finished
    assert df.attrs["interrupted"] and df.attrs["signal"] == "SIGTERM"
    (ck,) = RunPaths(tmp_path / "r").checkpoints()
    assert load_ckpt(ck).step == 4 and len(df) == 4  # the step whose eval was abandoned is checkpointed
    assert not any(c.startswith("eval_") for c in df.columns if df[c].notna().any())  # no half-eval in the row


def test_a_second_fit_from_another_thread_is_refused_and_changes_no_setting(tmp_path, monkeypatch):
    started, release, errors = threading.Event(), threading.Event(), []
    real_pin = train_mod.pin_inputs

    def pin_and_wait(cfg, *args, **kwargs):
        assert not started.is_set(), "a second fit got past the one-run guard"  # fails at once, not after a wait
        started.set()
        assert release.wait(60)
        return real_pin(cfg, *args, **kwargs)

    monkeypatch.setattr(train_mod, "pin_inputs", pin_and_wait)
    caller = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)  # process-wide, unlike the thread count (OpenMP's is per thread)
    try:
        def first():
            try:
                fit(tiny_cfg(steps=2, eval=False), tmp_path / "a", progress=False)
            except BaseException as e:  # surfaced below
                errors.append(e)

        t = threading.Thread(target=first)
        t.start()
        assert started.wait(60)
        assert torch.are_deterministic_algorithms_enabled()  # the first run's setting
        with pytest.raises(ProcessBusyError, match="another run is training in this process"):
            fit(tiny_cfg(steps=2, eval=False), tmp_path / "b", progress=False)
        assert torch.are_deterministic_algorithms_enabled() and not (tmp_path / "b").exists()  # it touched nothing
        release.set()
        t.join(120)
        assert not errors, errors
        assert not torch.are_deterministic_algorithms_enabled()  # the caller's own, put back by the run that set it
    finally:
        release.set()
        torch.use_deterministic_algorithms(caller[0], warn_only=caller[1])


# In a fresh interpreter: torch's lazy imports happen at the first run of a process, and only there.
FRESH = textwrap.dedent("""
    import os, sys, warnings, torch
    from dormouse.testing import tiny_cfg
    from dormouse.train import fit
    torch.set_num_threads(2)
    env, filters = dict(os.environ), list(warnings.filters)
    fit(tiny_cfg(steps=2, eval=False), sys.argv[1] + "/ok", progress=False)  # the process's first deterministic mode
    assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
    assert list(warnings.filters) == filters, "a warnings filter was left behind"
    torch.use_deterministic_algorithms(True, warn_only=True)
    fit(tiny_cfg(steps=2, eval=False), sys.argv[1] + "/ok2", progress=False)
    fds = len(os.listdir("/proc/self/fd"))
    errors = []
    for _ in range(3):  # a fresh start over history is refused: each failed fit keeps its traceback alive here
        try:
            fit(tiny_cfg(steps=2, eval=False), sys.argv[1] + "/ok", progress=False)
        except Exception as e:
            errors.append(e)
    assert len(errors) == 3, errors
    assert len(os.listdir("/proc/self/fd")) == fds, "a failed fit kept files open"
    assert torch.get_num_threads() == 2
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    print("ok")
""")


def test_fit_leaves_the_callers_process_as_it_was(tmp_path):
    r = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
