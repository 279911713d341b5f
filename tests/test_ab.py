"""`dormouse ab` as a user runs it, killed with SIGKILL in the middle and run again with the same command: the runs
finished before the kill are skipped, the one it hit resumes, and the verdict is the one an A/B never killed reaches."""

import os
import signal
import subprocess
import sys
import time

from dormouse.ab import ab, run_path
from dormouse.testing import save_snapshot, tiny_cfg

A = tiny_cfg(steps=12, ckpt_every=4, eval_every=6)  # checkpoints at 4, 8 and 12: a kill after the first leaves 8 steps
B = tiny_cfg(steps=12, ckpt_every=4, eval_every=6, lr=1e-3)


def _ab_cmd(a_file, b_file, run_dir) -> list[str]:
    return [sys.executable, "-m", "dormouse.cli", "ab", str(a_file), str(b_file), "--seeds", "2", "--run-dir",
            str(run_dir), "--quiet"]


def test_a_sigkilled_ab_run_again_skips_what_finished_and_prints_the_identical_verdict(tmp_path):
    ref = ab(A, B, tmp_path / "ref", seeds=2, progress=False, log=lambda s: None)  # never killed
    a_file, b_file, d = tmp_path / "a.toml", tmp_path / "b.toml", tmp_path / "ab"
    save_snapshot(A, a_file)
    save_snapshot(B, b_file)
    proc = subprocess.Popen(_ab_cmd(a_file, b_file, d), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    first = run_path(d, "B", 1) / "ckpt" / "step_000004.dmck"  # B at seed 1 has its first checkpoint: A's is done
    deadline = time.time() + 120
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, proc.returncode  # killed, not finished on its own
    again = subprocess.run(_ab_cmd(a_file, b_file, d), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    out = again.stdout.splitlines()
    assert "A/seed_1: finished: skipped" in out, out  # finished before B's first checkpoint existed
    assert "A/seed_2: trained" in out and "B/seed_2: trained" in out, out  # never started before the kill
    assert out[-1] == str(ref).splitlines()[-1], (out[-1], str(ref))  # the verdict, printed last, identical
    assert out[-len(ref.seeds) - 5:] == str(ref).splitlines()[-len(ref.seeds) - 5:]  # and the scores behind it
    assert out[-1].startswith("B − A: +") and ref.ci[0] > 0  # a real effect: the interval excludes 0
    assert ref.unpaired[0] < 0  # which the unpaired interval of the same runs cannot tell
    assert "init: shared, bit for bit (all 38 parameter tensors)" in again.stdout  # the same seeds: the same weights
