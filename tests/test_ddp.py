"""Scale-out: torchrun + DistributedDataParallel (gloo, 2 ranks on CPU) keeps the resume guarantee."""

import os, signal, subprocess, time
from pathlib import Path

import pytest

from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import train_cmd, torchrun, assert_same_run

CONFIG = """
steps = 24
seq_len = 32
batch = 4
ckpt_every = 4
log_every = 4
eval_every = 8
eval_batches = 1
eval_depths = [1, 2]
threads = 1
keep_ckpts = 100
aux = true
rand_depth = true
stress = true
[model]
d_model = 32
n_heads = 2
factor_rank = 16
ngram_orders = [2, 3]
ngram_slots = 1024
ngram_dim = 16
"""


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("ddp") / "cfg.toml"
    p.write_text(CONFIG)
    return p


@pytest.fixture(scope="module")
def uninterrupted(cfg_file):
    run = cfg_file.parent / "uninterrupted"
    r = torchrun(cfg_file, run)
    assert r.returncode == 0, r.stdout + r.stderr
    return run


def test_two_rank_run_records_world_size_and_agrees(uninterrupted):
    lin = read_jsonl(RunPaths(uninterrupted).lineage)
    assert lin[0]["env"]["world_size"] == 2
    rows = read_jsonl(RunPaths(uninterrupted).metrics)
    assert [r["step"] for r in rows] == list(range(24))  # rank 0 alone wrote metrics: one row per step
    assert all(r["fingerprint"] for r in rows if (r["step"] + 1) % 4 == 0)  # ranks' fingerprints were checked equal


def test_two_rank_resume_is_bitwise(cfg_file, uninterrupted, tmp_path):
    run = tmp_path / "resumed"
    r = torchrun(cfg_file, run, "--steps", 12)
    assert r.returncode == 0, r.stdout + r.stderr
    r = torchrun(cfg_file, run, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed" in r.stdout + r.stderr
    assert_same_run(uninterrupted, run)


def test_two_rank_resume_is_bitwise_stream_order(cfg_file, tmp_path):
    "The same guarantee in the contiguous `stream` order (the runs above use the default, shuffled)."
    stream = tmp_path / "stream.toml"
    stream.write_text(cfg_file.read_text().replace("stress = true\n", "stress = true\ndata_order = \"stream\"\n"))
    assert 'data_order = "stream"' in stream.read_text()
    for run, first in [(tmp_path / "whole", []), (tmp_path / "resumed", ["--steps", 12])]:
        r = torchrun(stream, run, *first)
        assert r.returncode == 0, r.stdout + r.stderr
    r = torchrun(stream, tmp_path / "resumed", "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert_same_run(tmp_path / "whole", tmp_path / "resumed")


def test_resume_under_another_world_size_is_refused(cfg_file, uninterrupted, tmp_path):
    import shutil

    run = tmp_path / "one"
    shutil.copytree(uninterrupted, run)
    cmd = train_cmd(cfg_file, run, "--resume", "--steps", 28)  # one process, where the run had two ranks
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "world_size" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_killing_one_rank_fails_loudly_and_resume_is_bitwise(cfg_file, tmp_path):
    long_cfg = tmp_path / "long.toml"  # long enough that the kill lands mid-run on a fast machine too
    long_cfg.write_text(cfg_file.read_text().replace("steps = 24", "steps = 120"))
    ref = tmp_path / "ref"
    r = torchrun(long_cfg, ref)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "killed"
    proc = torchrun(long_cfg, run, wait=False)
    t0 = time.time()
    while len(read_jsonl(RunPaths(run).metrics)) < 6 and proc.poll() is None and time.time() - t0 < 300:
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before a rank could be killed"
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    ranks = [int(p) for p in workers if "dormouse.cli" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(ranks) == 2, f"expected 2 rank processes under torchrun, found {workers}"
    os.kill(ranks[-1], signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, "killing a rank must fail the job"
    r = torchrun(long_cfg, run, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert_same_run(ref, run)
