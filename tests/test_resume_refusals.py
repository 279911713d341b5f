"""Resume edge cases: legacy containers say what they lost, numeric-environment drift is refused (or recorded when
allowed), a torn newest checkpoint is skipped loudly, and Ctrl-C stops at a step boundary with a checkpoint."""

import signal, subprocess, sys, time

import pytest

from dormouse.container import load_ckpt, save_ckpt
from dormouse.container_format import CheckpointError
from dormouse.testing import write_v1, write_v2
from dormouse.numerics import EnvDriftError
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.train import fit
from dormouse.testing import stopped_at, tiny_cfg
from dormouse.testing import assert_same_run


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    cfg = tiny_cfg(steps=20, ckpt_every=10, keep_ckpts=10, aux=True, stress=True)
    fit(cfg, root / "ref", progress=False)
    return cfg, root


@pytest.mark.parametrize("version", [1, 2])
def test_legacy_resume_prints_what_is_missing(base, tmp_path, capsys, version):
    cfg, root = base
    run = stopped_at(root / "ref", tmp_path / "legacy", 10)
    p = RunPaths(run).ckpt_dir / "step_000010.dmck"
    ck = load_ckpt(p)
    (write_v1 if version == 1 else write_v2)(p, ck)
    assert load_ckpt(p).legacy
    df = fit(cfg, run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert f"LEGACY checkpoint (v{version})" in out
    assert "stress monitor history" in out and "numeric environment" in out
    assert ("EMA teacher" in out) == (version == 1)  # v2 carries the teacher, v1 does not
    assert out.count("EMA teacher") <= 1 and out.count("stress monitor") == 1  # said once, not twice
    assert list(df.step) == list(range(20))
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["kind"] == "resume" and seg["legacy_missing"], seg


def test_env_drift_is_refused_naming_the_key_and_recorded_when_allowed(base, tmp_path):
    cfg, root = base
    run = stopped_at(root / "ref", tmp_path / "env", 10)
    p = RunPaths(run).ckpt_dir / "step_000010.dmck"
    ck = load_ckpt(p)
    ck.env = {**ck.env, "torch": "1.0.0"}
    save_ckpt(p, ck)
    ck.evidence = None  # a checkpoint that cannot prove the change by replay (issue 22)
    save_ckpt(p, ck)
    with pytest.raises(EnvDriftError, match="torch") as e:
        fit(cfg, run, resume=True, progress=False)
    assert "allow_env_drift" in str(e.value) and "carries no evidence" in str(e.value)
    fit(cfg, run, resume=True, allow_env_drift=True, progress=False)
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["env_drift"]["torch"][0] == "1.0.0", seg["env_drift"]


def test_torn_newest_checkpoint_is_skipped_loudly(base, tmp_path, capsys):
    cfg, root = base
    run = stopped_at(root / "ref", tmp_path / "torn", 20)
    newest = RunPaths(run).ckpt_dir / "step_000020.dmck"
    newest.write_bytes(newest.read_bytes()[:-7])  # torn
    fit(cfg, run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert "skipping step_000020.dmck" in out and "resumed" in out and "at step 10" in out
    assert_same_run(root / "ref", run)


def test_every_checkpoint_torn_is_an_error_not_a_fresh_start(base, tmp_path):
    cfg, root = base
    run = stopped_at(root / "ref", tmp_path / "alltorn", 20)
    for p in RunPaths(run).checkpoints():
        p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(CheckpointError):
        fit(cfg, run, resume=True, progress=False)


def test_ctrl_c_checkpoints_at_a_step_boundary_and_resumes_bitwise(tmp_path):
    cfg_toml = tmp_path / "cfg.toml"
    cfg_toml.write_text(
        "steps = 150\nseq_len = 32\nbatch = 4\nckpt_every = 1000\nlog_every = 5\neval = false\nthreads = 1\n"
        "[model]\nd_model = 32\nn_heads = 2\nfactor_rank = 16\nngram_slots = 1024\nngram_dim = 16\n"
    )
    cmd = [sys.executable, "-m", "dormouse.cli", "train", "--config", str(cfg_toml), "--quiet"]
    run = tmp_path / "int"
    proc = subprocess.Popen(cmd + ["--run-dir", str(run)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    while len(read_jsonl(RunPaths(run).metrics)) < 15 and proc.poll() is None and time.time() - t0 < 120:
        time.sleep(0.01)
    assert proc.poll() is None, "finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    cks = RunPaths(run).checkpoints()
    assert len(cks) == 1, cks  # not a cadence checkpoint (ckpt_every=1000): the one Ctrl-C wrote
    stopped = load_ckpt(cks[0]).step
    assert stopped == len(read_jsonl(RunPaths(run).metrics)) and 15 <= stopped < 150
    assert f"checkpoint written at step {stopped}" in out
    r = subprocess.run(cmd + ["--run-dir", str(run), "--resume"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cmd + ["--run-dir", str(tmp_path / "ref")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert_same_run(tmp_path / "ref", run)
