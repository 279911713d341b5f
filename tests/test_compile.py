"""`compile = true`: the training step through torch.compile is a numeric path of its own, and every guarantee holds
for it. A resume in another process is bitwise the uninterrupted run; a thread change is judged by the replay; the
log and the checkpoints say the step ran compiled; switching it on a resume is drift; a machine that cannot build it,
a run that would need more graphs than the cap, and a torchrun job are refused before anything is written."""

import dataclasses, os, re, subprocess, sys
from pathlib import Path

import pytest
import torch

import dormouse.parts as parts_mod
from dormouse.checkpoints import load_ckpt
from dormouse.config import ConfigError, DriftError
from dormouse.dist import DistInfo
from dormouse.numerics import EnvDriftError
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, stopped_at, tiny_cfg, train_cmd
from dormouse.train import fit, open_segment
from dormouse.verify import verify

CFG = tiny_cfg(steps=20, ckpt_every=10, log_every=5, keep_ckpts=10, eval_every=10, compile=True)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    "An uninterrupted compiled tiny run at one thread: checkpoints at 10 and 20."
    run = tmp_path_factory.mktemp("compiled") / "ref"
    fit(CFG, run, progress=False)
    return run


def _train(run, *extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(train_cmd(RunPaths(run).config, run, *extra), capture_output=True, text=True, timeout=300,
                          env=env)


def test_a_compiled_run_resumed_in_another_process_is_the_uninterrupted_run(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 10)
    r = _train(run, "--resume")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "compile = true: the first step at each depth compiles it" in r.stdout, r.stdout
    assert_same_run(ref, run)  # a fresh process compiles again, and the bits are the same


def test_every_step_runs_through_the_compiled_model(monkeypatch, tmp_path):
    "The step's forward is the compiled wrapper's, every step: a plan that says compiled and trains eagerly fails."
    calls, real = [], parts_mod.compiled_forward

    def spy(model, cfg):
        compiled = real(model, cfg)

        def forward(*args, **kwargs):
            calls.append(kwargs.get("match") is not None)
            return compiled(*args, **kwargs)
        return forward

    monkeypatch.setattr(parts_mod, "compiled_forward", spy)
    fit(dataclasses.replace(CFG, steps=3, ckpt_every=3, eval=False), tmp_path / "r", progress=False)
    assert calls == [True, True, True]  # the probes and eval run the model itself, eagerly


def test_the_log_and_the_checkpoints_say_the_step_ran_compiled(ref, tmp_path):
    assert read_jsonl(RunPaths(ref).lineage)[-1]["env"]["forward"]["compiled"] is True
    assert all(load_ckpt(p).env["forward"]["compiled"] is True for p in RunPaths(ref).checkpoints())
    eager = tmp_path / "eager"
    fit(dataclasses.replace(CFG, compile=False, steps=2, ckpt_every=2), eager, progress=False)
    assert read_jsonl(RunPaths(eager).lineage)[-1]["env"]["forward"]["compiled"] is False
    assert load_ckpt(RunPaths(eager).checkpoints()[-1]).env["forward"]["compiled"] is False


@pytest.mark.parametrize("compiled", [True, False])
def test_switching_compile_on_a_resume_is_drift(compiled, ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 10)
    if not compiled:  # an eager run at step 10, resumed with compile = true
        run = tmp_path / "eager"
        fit(dataclasses.replace(CFG, compile=False, steps=10), run, progress=False)
    before = [p.name for p in RunPaths(run).checkpoints()]
    with pytest.raises(DriftError, match=re.escape(f"compile: {compiled} -> {not compiled}")):
        fit(dataclasses.replace(CFG, compile=not compiled), run, resume=True, progress=False)
    assert [p.name for p in RunPaths(run).checkpoints()] == before


def test_verify_replays_a_compiled_run_through_the_compiled_step(ref):
    "`dormouse verify` of a compiled run rebuilds the compiled step from the plan and reproduces both intervals."
    got = verify(ref, progress=False, log=lambda *a: None)
    assert [(i.start, i.end, i.verdict) for i in got.intervals] == [(0, 10, "reproduced"), (10, 20, "reproduced")], got
    assert got.status == "reproduced" and got.curve.compared == 20, got


def test_a_thread_change_of_a_compiled_run_is_judged_by_the_replay(ref, tmp_path):
    """Inductor's kernels at two threads: verified by replaying steps 0-9 compiled, and then the same run, or refused
    naming the first differing step and writing nothing (whichever this CPU does; never silently accepted)."""
    run = stopped_at(ref, tmp_path / "run", 10)
    try:
        fit(dataclasses.replace(CFG, threads=2), run, resume=True, progress=False)
    except EnvDriftError as e:
        assert "threads: 1 -> 2" in str(e), e
        assert re.search(r"does not reproduce the run: step \d+: (loss|fingerprint) ", str(e)), e
        assert [p.name for p in RunPaths(run).checkpoints()] == ["step_000010.dmck"]
        return
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["env_drift"] == {"threads": [1, 2]} and not seg["env_waived"], seg
    assert seg["env_verified"]["keys"] == ["threads"] and seg["env_verified"]["to_step"] == 10, seg
    assert_same_run(ref, run)


def test_a_machine_without_a_cxx_compiler_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++")
    with pytest.raises(ConfigError, match=r"needs a C\+\+ compiler \('no-such-c\+\+' is not on PATH"):
        fit(CFG, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_missing_python_headers_are_named(monkeypatch, tmp_path):
    assert parts_mod.compile_toolchain() == ""  # this machine builds Inductor's kernels (the tests above need it)
    monkeypatch.setattr(parts_mod.sysconfig, "get_paths", lambda: {"include": str(tmp_path / "include")})
    assert "Python's C headers" in parts_mod.compile_toolchain() and "python3-dev" in parts_mod.compile_toolchain()
    monkeypatch.setenv("CXX", sys.executable)  # a file on PATH: only the headers are missing
    assert " and " not in parts_mod.compile_toolchain()


def test_more_graphs_than_the_cap_are_refused_up_front(tmp_path):
    wide = dataclasses.replace(CFG, rand_depth=True, model=dataclasses.replace(CFG.model, depth_min=1, depth_max=33))
    with pytest.raises(ConfigError, match=r"1\.\.33 needs up to 66, over the cap of 64"):
        fit(wide, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    narrow = dataclasses.replace(wide, model=dataclasses.replace(CFG.model, depth_min=1, depth_max=32))
    assert parts_mod.build_parts(narrow).compiled  # 64 graphs: at the cap, allowed


def test_a_torchrun_job_with_compile_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="compile = true trains in one process; this run has 2"):
        open_segment(CFG, RunPaths(tmp_path / "run"), None, resume=False, allow_env_drift=False, device="cpu",
                     dist_info=DistInfo(rank=0, world=2, local_rank=0))
    assert not (tmp_path / "run").exists()


def _children() -> set[str]:
    "This process's child processes (Linux: /proc); a thread that ends while they are read has none."
    pids = set()
    for t in Path("/proc/self/task").iterdir():
        try:
            pids.update((t / "children").read_text().split())
        except FileNotFoundError:  # the thread ended between the listing and the read
            pass
    return pids


def test_a_compiled_fit_leaves_the_caller_as_found(tmp_path):
    """Inductor is process-wide: the compiled step must leave threads, deterministic mode, matmul precision and the
    environment as they were, and no compile workers behind."""

    def state():
        return (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
                torch.get_float32_matmul_precision(), dict(os.environ), _children())

    before = state()
    fit(dataclasses.replace(CFG, steps=4, ckpt_every=2, threads=2, seed=5), tmp_path / "r", progress=False)
    assert state() == before
