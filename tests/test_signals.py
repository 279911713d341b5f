"""SIGTERM is Ctrl-C: what a batch scheduler sends stops the run at the next step boundary with a checkpoint, in one
process and under torchrun, and the resume is bitwise the run that was never stopped."""

import dataclasses, os, signal, subprocess, threading, time

import pytest

from dormouse.config import load_cfg
from dormouse.container import load_ckpt
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, save_snapshot, tiny_cfg, torchrun, train_cmd
from dormouse.train import fit

CONFIG = tiny_cfg(steps=100, ckpt_every=1000, eval=False)  # a seconds-scale plan, written by save_snapshot


def rows(run):
    return len(read_jsonl(RunPaths(run).metrics))


def stopped_at(run, steps):
    "The one checkpoint (not a cadence one: ckpt_every is past the end) is at the step the rows reach."
    cks = RunPaths(run).checkpoints()
    assert len(cks) == 1, cks
    step = load_ckpt(cks[0]).step
    assert step == rows(run) and 10 <= step < steps, (step, rows(run))
    return step


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("signals") / "cfg.toml"
    save_snapshot(CONFIG, p)
    return p


def test_sigterm_in_process_stops_at_a_step_boundary_and_resumes_bitwise(cfg_file, tmp_path):
    cfg = load_cfg(cfg_file)
    run = tmp_path / "run"
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def term_after_10_rows():
        t0 = time.time()
        while rows(run) < 10 and time.time() - t0 < 120:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=term_after_10_rows, daemon=True).start()
    df = fit(cfg, run, progress=False)
    assert df.attrs == {"interrupted": True, "signal": "SIGTERM", "exit_status": 143, "overlap_compared": 0}, df.attrs
    step = stopped_at(run, cfg.steps)
    assert list(df.step) == list(range(step))
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers  # the caller's, again
    done = fit(cfg, run, resume=True, progress=False)
    assert done.attrs["exit_status"] == 0 and len(done) == cfg.steps
    fit(cfg, tmp_path / "ref", progress=False)
    assert_same_run(tmp_path / "ref", run)


def test_cli_sigterm_exits_143_with_a_checkpoint(cfg_file, tmp_path):
    run = tmp_path / "run"
    cmd = train_cmd(cfg_file, run)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    while rows(run) < 10 and proc.poll() is None and time.time() - t0 < 120:
        time.sleep(0.01)
    assert proc.poll() is None, "finished before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out
    step = stopped_at(run, 100)
    assert f"checkpoint written at step {step}" in out and "SIGTERM: stopping after this step" in out, out


def test_sigterm_under_torchrun_checkpoints_every_rank_and_resumes_bitwise(cfg_file, tmp_path):
    small = tmp_path / "cfg.toml"  # 2 ranks: the same rows, half the batch each (a microbatch a rank)
    save_snapshot(dataclasses.replace(CONFIG, steps=40, micro_batch=2), small)
    run = tmp_path / "run"
    proc = torchrun(small, run, wait=False)
    try:
        t0 = time.time()
        while rows(run) < 10 and proc.poll() is None and time.time() - t0 < 300:
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be stopped"
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        ranks = [int(p) for p in workers if "dormouse.cli" in open(f"/proc/{p}/cmdline").read()]
        assert len(ranks) == 2, workers
        for pid in ranks:  # a scheduler signals every process, the ranks and torchrun, not all at the same instant
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)  # torchrun forwards its copy to the ranks while they finish the step
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    step = stopped_at(run, 40)
    assert f"checkpoint written at step {step}" in out, out
    assert "KeyboardInterrupt" not in out, out  # torchrun's forwarded copy of the signal did not abort the stop
    r = torchrun(small, run, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(train_cmd(small, tmp_path / "ref"), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr  # one process accumulating both microbatches: the same run
    assert_same_run(tmp_path / "ref", run)
