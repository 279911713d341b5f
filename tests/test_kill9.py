"""kill -9: a `dormouse train` subprocess SIGKILLed at >= 6 moments, resumed each time, finishes bitwise identical to
a run that was never killed, and never loads a torn checkpoint. Every other kill lands at a seeded random moment; the
others are aimed at a background commit of a tables file (the compaction of the table deltas every FULL_EVERY
checkpoints, the longest write): the process is frozen with SIGSTOP while its `.step_N.ngram` temp file exists and its
loop has trained past step N, then killed. Those land in a background commit by construction, on any machine load;
nothing here counts where random kills happened to land."""

import os, signal, subprocess, time


from dormouse.container import load_ckpt
from dormouse.rng import keyed_uniform
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import train_cmd, assert_same_run

KILLS = 6
# A run whose checkpoints are big (n-gram tables of 2 x 2^17 x 32 floats + momentum ~ 67 MB a tables file) and frequent,
# so that a good share of the wall time is spent inside a save and some kills land there.
CONFIG = """
steps = 200  # the 6th kill lands near step 120 (the aimed ones wait for a compaction, every ~30 steps)
seq_len = 32
batch = 4
ckpt_every = 5
log_every = 5
eval_every = 50
eval_batches = 1
eval_depths = [1]
threads = 1
keep_ckpts = 2
aux = true
[model]
d_model = 32
n_heads = 2
factor_rank = 16
ngram_orders = [2, 3]
ngram_slots = 131072
ngram_dim = 32
"""


def n_rows(run_dir):
    return len(read_jsonl(RunPaths(run_dir).metrics))


def aim_at_a_background_commit(proc, run, t0) -> bool:
    """Freeze `proc` while its commit thread writes a tables file and its loop has trained past that checkpoint;
    True once frozen there (the kill that follows lands in a background commit, whatever the machine's load)."""
    ckpt_dir = RunPaths(run).ckpt_dir
    while proc.poll() is None and time.time() - t0 < 300:
        tmp = list(ckpt_dir.glob(f".step_*.ngram.tmp.{proc.pid}"))
        if tmp and n_rows(run) > int(tmp[0].name.split(".")[1].split("_")[1]):
            os.kill(proc.pid, signal.SIGSTOP)
            if tmp[0].exists():  # still being written: the process is frozen inside the commit
                return True
            os.kill(proc.pid, signal.SIGCONT)  # the commit finished between the look and the freeze: aim again
        time.sleep(0.002)
    return False


def test_kill9_resume_is_bitwise(tmp_path, capsys):
    cfg_file = tmp_path / "cfg.toml"
    cfg_file.write_text(CONFIG)
    ref = tmp_path / "ref"
    r = subprocess.run(train_cmd(cfg_file, ref), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr

    run = tmp_path / "killed"
    kills = in_save = behind_loop = 0
    resumed_from = []
    delays = keyed_uniform(seed=2026, step=0, stream=99, n=200)
    attempt = 0
    while True:
        # resume once a checkpoint exists; a kill before the first one leaves nothing to resume (a resume over that
        # history is refused), so the run starts fresh again
        resume = bool(RunPaths(run).checkpoints())
        proc = subprocess.Popen(
            train_cmd(cfg_file, run, *(["--resume"] if resume else [])),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        killed = False
        if kills < KILLS:
            start_rows = n_rows(run)
            t0 = time.time()
            # wait until this segment has trained at least one new step, then a seeded random extra delay
            # (and until there is a checkpoint: a kill before the first leaves history that a fresh start refuses)
            while proc.poll() is None and (n_rows(run) <= start_rows or not RunPaths(run).checkpoints()) \
                    and time.time() - t0 < 120:
                time.sleep(0.01)
            if attempt % 2:  # aimed, deterministically: frozen (SIGSTOP) inside a background compaction, then killed
                aimed = aim_at_a_background_commit(proc, run, t0)
            else:
                time.sleep(float(delays[attempt]) * 0.6)
                aimed = False
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                killed = True
                kills += 1
                # an atomic save writes `.step_N.dmck.tmp.<pid>` / `.step_N.ngram.tmp.<pid>`:
                # one left by this pid = killed mid-save
                if list(RunPaths(run).ckpt_dir.glob(f".*.tmp.{proc.pid}")):
                    in_save += 1
                behind_loop += aimed  # by construction: frozen while its commit's temp file existed, the loop past it
        out, _ = proc.communicate(timeout=600)
        if not killed:
            assert proc.returncode == 0, out
        for line in out.splitlines():
            if line.startswith("resumed "):
                resumed_from.append(line.rsplit(" ", 1)[-1])
        attempt += 1
        if not killed:
            break
        assert attempt < 200
    with capsys.disabled():  # the report shows in CI's log, not only on failure
        print(
            f"\nkill -9: {kills} kills, {in_save} landed inside a checkpoint commit ({behind_loop} of them while the "
            f"loop trained on past it), {len(resumed_from)} resumes"
        )
    assert kills >= KILLS, f"the run finished after only {kills} kills"
    assert behind_loop == KILLS // 2, f"{behind_loop} of the {KILLS // 2} aimed kills landed in a background commit"
    # every resume named a checkpoint that exists as a complete container or was rotated away later; none was torn
    assert all(name.endswith(".dmck") for name in resumed_from)
    for p in RunPaths(run).checkpoints():
        load_ckpt(p)  # what is left loads cleanly
    assert_same_run(ref, run)
