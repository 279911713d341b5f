"""Scale-out: torchrun + DistributedDataParallel (gloo, 2 ranks on CPU) keeps the resume guarantee."""

import os, re, shutil, signal, subprocess, time
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


def _replayed_or_refused(r, run, frm, to, interval):
    """A world-size change went through the replay: verified and recorded in lineage, or refused (exit 2 from rank 0)
    naming the first differing step and world_size, with no traceback of dormouse's."""
    out = r.stdout + r.stderr
    assert "before trusting the environment change (world_size" in out, out
    assert f"replaying steps {interval} in memory" in out, out
    assert 'dormouse/' not in "".join(ln for ln in r.stderr.splitlines() if ln.lstrip().startswith("File ")), out
    if r.returncode == 0:
        seg = read_jsonl(RunPaths(run).lineage)[-1]
        assert seg["env_drift"]["world_size"] == [frm, to] and "world_size" in seg["env_verified"]["keys"], seg
        return
    assert f"world_size: {frm} -> {to}" in r.stderr, out
    assert re.search(rf"Replaying steps {interval} under this environment does not reproduce the run: step \d+: ",
                     r.stderr), out


def test_resume_under_another_world_size_goes_through_the_replay(cfg_file, uninterrupted, tmp_path):
    """2 ranks resumed as 1 process, and a 1-process run resumed under 2 ranks: each replays the last interval
    under the new world size. On CPU (gloo) the gradient's mean is summed in another order, so here both are
    refused at the interval's first step; a replay that reproduced would be verified and recorded instead."""
    run = tmp_path / "one"
    shutil.copytree(uninterrupted, run)
    cmd = train_cmd(cfg_file, run, "--resume", "--steps", 28)  # one process, where the run had two ranks
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    _replayed_or_refused(r, run, 2, 1, "20-23")
    short = tmp_path / "short.toml"  # the reverse: a one-process run of 8 steps, resumed under torchrun
    short.write_text(cfg_file.read_text().replace("steps = 24", "steps = 8"))
    r = subprocess.run(train_cmd(short, tmp_path / "solo"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = torchrun(short, tmp_path / "solo", "--resume", "--steps", 12)
    _replayed_or_refused(r, tmp_path / "solo", 1, 2, "4-7")


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
