"""Issue 22, the rest of the matrix: a resume across 1 <-> 3 threads, and a process started under
`ATEN_CPU_CAPABILITY=avx2`, are judged by the replay, never silently accepted: verified and bitwise the run they
continue where this CPU reproduces the bits, refused naming the first differing step where it does not."""

import dataclasses, os, re, subprocess
from pathlib import Path

import pytest

from dormouse.numerics import EnvDriftError
from dormouse.rundir import RunPaths, read_lineage
from dormouse.testing import assert_same_run, stopped_at, tiny_cfg, train_cmd
from dormouse.train import fit

CFG = tiny_cfg(steps=20, ckpt_every=10, log_every=5, keep_ckpts=10, eval=False)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    "An uninterrupted tiny run at one thread, started without ATEN_CPU_CAPABILITY: checkpoints at 10 and 20."
    run = tmp_path_factory.mktemp("matrix") / "ref"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ATEN_CPU_CAPABILITY", raising=False)
        fit(CFG, run, progress=False)
    return run


@pytest.mark.parametrize("threads", [(1, 3), (3, 1)])
def test_a_resume_across_one_and_three_threads_is_judged_by_the_replay(threads, ref, tmp_path):
    """One thread and three resume each other only through the replay. Whether the tiny model gives the same bits at
    1 and 3 threads is the CPU's: an Intel Xeon reproduced it, and the resume is verified, recorded in lineage and the
    same run; an AMD EPYC differs at step 4's loss, and the resume is refused naming that step, writing nothing."""
    a, b = threads
    run = tmp_path / "run"
    if a == 1:
        run = stopped_at(ref, run, 10)
    else:
        fit(dataclasses.replace(CFG, steps=10, threads=a), run, progress=False)
    before = [p.name for p in RunPaths(run).checkpoints()]
    try:
        fit(dataclasses.replace(CFG, threads=b), run, resume=True, progress=False)
    except EnvDriftError as e:  # this CPU's bits differ: refused, naming the key and the first differing step
        assert f"threads: {a} -> {b}" in str(e), e
        assert re.search(r"does not reproduce the run: step \d+: [a-z_0-9]+ ", str(e)), e  # its first differing column
        assert [p.name for p in RunPaths(run).checkpoints()] == before == ["step_000010.dmck"]
        return
    seg = read_lineage(run)[-1]
    assert seg["env_drift"] == {"threads": [a, b]} and not seg["env_waived"]
    assert seg["env_verified"] == {"from_step": 0, "to_step": 10, "interval": [0, 10], "losses": 10, "fingerprints": 3,
                                   "keys": ["threads"]}
    assert_same_run(ref, run)  # verified: the interval's bits are the one-thread run's, and so is what follows


def test_aten_avx2_is_judged_by_the_evidence(ref, tmp_path):
    """A process started under ATEN_CPU_CAPABILITY=avx2 (on an AVX512 machine: ATen's own kernels change) resumes
    only through the replay: refused naming the first differing step (what this machine's Xeon does: step 4's loss
    differs), or, where avx2 reproduces the run bit for bit, verified and recorded in lineage's env_verified."""
    run = stopped_at(ref, tmp_path / "run", 10)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(train_cmd(RunPaths(run).config, run, "--resume"), capture_output=True, text=True, timeout=300,
                       env=env)
    assert "Traceback" not in r.stderr, r.stderr
    assert "replaying steps 0-9 in memory" in r.stdout, r.stdout + r.stderr
    if r.returncode == 0:  # reproduced: verified, recorded, and the run the same
        seg = read_lineage(run)[-1]
        assert "ATEN_CPU_CAPABILITY" in seg["env_verified"]["keys"] and not seg["env_waived"], seg
        assert_same_run(ref, run)
        return
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ATEN_CPU_CAPABILITY: None -> 'avx2'" in r.stderr, r.stderr
    assert re.search(r"does not reproduce the run: step \d+: (loss|fingerprint) ", r.stderr), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr  # one line: the error, nothing else
    assert [p.name for p in RunPaths(run).checkpoints()] == ["step_000010.dmck"]  # nothing written after the refusal
