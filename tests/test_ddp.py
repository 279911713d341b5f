"""Scale-out under torchrun (gloo on CPU, 1 to 4 ranks): one canonical sum. A run with micro_batch < batch is the same
run bit for bit on 1, 2 and 4 processes, moves between them on a resume (the world-size change verified by replaying
an interval: with offline targets here, and 2 -> 1 -> 4 with every other feature in the continuity chapter, whose
assertions CI runs), and `dormouse verify` reproduces a torchrun run in one process or under torchrun; a killed rank
fails the job and the resume is the same run, in the `stream` order too."""

import dataclasses, os, re, signal, subprocess, sys, time
from pathlib import Path

import pytest

import dormouse
from dormouse.config import load_cfg
from dormouse.precompute import precompute_jepa_targets
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, save_snapshot, train_cmd, torchrun
from dormouse.train import fit

CONFIG = """
steps = 24
seq_len = 32
batch = 4
micro_batch = 1
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
quant = "fp8"
quant_check = true
[model]
d_model = 32
n_heads = 2
factor_rank = 16
ngram_orders = [2, 3]
ngram_slots = 1024
ngram_dim = 16
"""


def run_ok(cmd, **kw):
    "A finished subprocess that exited 0 (else the assertion shows its output)."
    r = cmd if isinstance(cmd, subprocess.CompletedProcess) else subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}, **kw)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def verify_cmd(run_dir, nproc: int = 0):
    "`dormouse verify RUN_DIR --quiet`, in one process (nproc 0) or under torchrun with `nproc` ranks."
    launch = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                                 if nproc else [])
    return launch + ["-m", "dormouse.cli", "verify", str(run_dir), "--quiet"]


KIT = {str(Path(dormouse.__file__).parent) + os.sep, str(Path(dormouse.__file__).resolve().parent) + os.sep}


def no_dormouse_traceback(r) -> bool:
    """No frame of the kit's own modules in the output, wherever the checkout lives and whatever it is called
    (torchrun's own report of a failed rank carries its frames, under a checkout's .venv named dormouse too)."""
    frames = re.findall(r'File "([^"]+)"', r.stderr or r.stdout)  # torchrun prefixes a rank's lines: "[rank0]: "
    return not any(f.startswith(k) for f in frames for k in KIT)


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("ddp") / "cfg.toml"
    p.write_text(CONFIG)
    return p


@pytest.fixture(scope="module")
def single(cfg_file):
    "The plan trained in one process, accumulating its 4 microbatches a step: the reference."
    run = cfg_file.parent / "single"
    run_ok(train_cmd(cfg_file, run))
    return run


@pytest.fixture(scope="module")
def two_ranks(cfg_file):
    run = cfg_file.parent / "two_ranks"
    run_ok(torchrun(cfg_file, run))
    return run


def test_two_ranks_train_the_one_process_run(single, two_ranks):
    lin = read_jsonl(RunPaths(two_ranks).lineage)
    assert lin[0]["env"]["world_size"] == 2
    rows = read_jsonl(RunPaths(two_ranks).metrics)
    assert [r["step"] for r in rows] == list(range(24))  # rank 0 alone wrote metrics: one row per step
    assert all(r["fingerprint"] for r in rows if (r["step"] + 1) % 4 == 0)  # ranks' fingerprints were checked equal
    assert_same_run(single, two_ranks)  # every loss, fingerprint and the final state: the same run


def test_verify_of_a_torchrun_run_in_one_process_and_under_torchrun(two_ranks):
    whole = "6 of 6 interval(s) reproduced bit for bit; verified: every kept interval reproduced and every logged row"
    r = run_ok(verify_cmd(two_ranks))
    lines = r.stdout.strip().splitlines()
    intervals = [ln for ln in lines if ln.startswith("steps ")]
    assert len(intervals) == 6 and lines[-1].startswith(whole), r.stdout
    done = r"reproduced bit for bit \(4 steps in 1[04] columns, 2 fingerprints\) \(environment: world_size 2 -> 1\)$"
    assert all(re.search(done, ln) for ln in intervals), r.stdout  # 14 columns in the intervals with an eval step
    assert "curve: 24 of 24 logged steps compared with the evidence; every one agrees" in lines, r.stdout
    r = run_ok(verify_cmd(two_ranks, nproc=4))
    assert r.stdout.count("reproduced bit for bit (") == 6 and "world_size 2 -> 4" in r.stdout, r.stdout  # said once
    assert r.stdout.count(whole) == 1 and r.stdout.strip().splitlines()[-1].startswith(whole), r.stdout
    odd = subprocess.run(verify_cmd(two_ranks, nproc=3), capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert odd.returncode != 0 and no_dormouse_traceback(odd), odd.stdout + odd.stderr
    assert odd.stdout.count("which 3 workers cannot share evenly: valid world sizes are 1, 2, 4") == 6, odd.stdout


def test_a_run_with_one_microbatch_under_torchrun_is_refused_in_one_line(cfg_file, tmp_path):
    whole = tmp_path / "whole.toml"
    whole.write_text(cfg_file.read_text().replace("micro_batch = 1\n", ""))
    r = torchrun(whole, tmp_path / "run")
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("dormouse: error:")]
    assert r.returncode != 0 and said and no_dormouse_traceback(r), r.stdout + r.stderr
    assert set(said) == {"dormouse: error: micro_batch = 0 makes 1 microbatch a step (batch = 4), which 2 workers "
                         "cannot share evenly: valid world sizes are 1. Run on one of them, or start a new run with a "
                         "micro_batch 2 workers can share (e.g. micro_batch = 2)"}, said
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_ranks_in_different_numeric_environments_are_refused_in_one_line_before_anything_is_written(cfg_file, tmp_path):
    "MKL_CBWR set on one rank only: refused at the start on every rank, naming rank 1, the key and both values."
    one_rank = tmp_path / "rank1_env.py"
    one_rank.write_text("import os, sys\nif os.environ['RANK'] == '1':\n"
                        "    os.environ['MKL_CBWR'] = 'COMPATIBLE,STRICT'\n"
                        "from dormouse.cli import main\nsys.exit(main())\n")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(one_rank), *train_cmd(cfg_file, tmp_path / "run")[3:]], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    said = {ln for ln in r.stderr.splitlines() if ln.startswith("dormouse: error:")}
    assert r.returncode != 0 and no_dormouse_traceback(r), r.stdout + r.stderr
    assert len(said) == 1 and next(iter(said)).startswith(
        "dormouse: error: rank 1's numeric environment differs from rank 0's: MKL_CBWR is 'COMPATIBLE,STRICT' on rank "
        "1, "), said
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_offline_targets_move_between_worker_counts_bit_for_bit(tmp_path):
    """The same with offline JEPA targets (no teacher in the run): 1 process = 2 ranks -> 1 process (2 -> 1 -> 4 with a
    teacher is the continuity chapter's)."""
    plan = tmp_path / "targets.toml"
    plan.write_text(CONFIG.replace("steps = 24", "steps = 12"))
    cfg = dataclasses.replace(load_cfg(plan), jepa_targets=str(tmp_path / "targets"))
    fit(dataclasses.replace(cfg, aux=False, stress=False, steps=6, ckpt_every=6, eval=False), tmp_path / "teacher",
        progress=False)
    precompute_jepa_targets(cfg, tmp_path / "teacher", cfg.jepa_targets, progress=False)
    save_snapshot(cfg, plan)
    run_ok(train_cmd(plan, tmp_path / "single"))
    run_ok(torchrun(plan, tmp_path / "elastic", "--steps", 4))
    run_ok(train_cmd(plan, tmp_path / "elastic", "--resume"))
    assert [s["env"]["world_size"] for s in read_jsonl(RunPaths(tmp_path / "elastic").lineage)] == [2, 1]
    assert all(r["jepa"] > 0 for r in read_jsonl(RunPaths(tmp_path / "single").metrics))  # the targets were used
    assert_same_run(tmp_path / "single", tmp_path / "elastic")


def test_killing_one_rank_fails_loudly_and_resume_is_bitwise(cfg_file, tmp_path):
    """A rank SIGKILLed mid-run fails the job in one line, and the resume is the one-process run bit for bit: in the
    contiguous `stream` order (the runs above use the default, shuffled), a microbatch a rank."""
    long_cfg = tmp_path / "long.toml"  # long enough that the kill lands mid-run on a fast machine too
    long_cfg.write_text(cfg_file.read_text().replace("steps = 24", "steps = 40")
                        .replace("stress = true\n", "stress = true\ndata_order = \"stream\"\n")
                        .replace("micro_batch = 1", "micro_batch = 2"))
    assert 'data_order = "stream"' in long_cfg.read_text() and "micro_batch = 2" in long_cfg.read_text()
    ref = tmp_path / "ref"
    run_ok(train_cmd(long_cfg, ref))  # one process: the same run as any number of ranks
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
    # the surviving rank says it lost its peer in one line (PeerLostError), never in gloo's traceback through the kit
    assert no_dormouse_traceback(subprocess.CompletedProcess(proc.args, proc.returncode, "", out)), out
    run_ok(torchrun(long_cfg, run, "--resume"))
    assert_same_run(ref, run)
