"""One writer per run directory: a second `dormouse train` into a directory another process is writing — fresh or
resumed — is refused with one line naming the holder's pid and command and writes nothing, even after its note
`run.lock` was deleted (the lock is on the directory); a killed holder never blocks the next resume (the kernel drops
its flock); a reader (a verifier) holds the run shared and writes nothing."""

import dataclasses, os, subprocess, time

import pytest

from dormouse.config import load_cfg
from dormouse.testing import save_snapshot, tiny_cfg, train_cmd, wait_for
from dormouse.rundir import RunDirError, RunLock, RunPaths, read_jsonl
from dormouse.train import fit

CONFIG = tiny_cfg(steps=3000, ckpt_every=20, eval=False)  # a seconds-scale plan, written by save_snapshot


def holder(run):
    lock = RunPaths(run).lock
    return lock.read_text() if lock.exists() else ""


def assert_refused(r, pid):
    "Exit 2, one line on stderr naming the holder's pid and command, no traceback, no training."
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "\n" not in err and "Traceback" not in err, err
    assert f"pid {pid}:" in err and "dormouse.cli train" in err and "run.lock" in err, err
    assert "resumed" not in r.stdout and "step " not in r.stdout, r.stdout


def test_second_fresh_run_into_a_busy_dir_is_refused_and_a_killed_holder_does_not_block(tmp_path):
    cfg = tmp_path / "cfg.toml"
    save_snapshot(CONFIG, cfg)
    run = tmp_path / "run"
    a = subprocess.Popen(train_cmd(cfg, run, "--seed", 1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for("a checkpoint", lambda: holder(run).startswith(f"pid {a.pid}:") and RunPaths(run).checkpoints(), a)
        config, lineage = RunPaths(run).config.read_bytes(), RunPaths(run).lineage.read_bytes()
        b = subprocess.run(
            train_cmd(cfg, run, "--seed", 2, "--steps", 300), capture_output=True, text=True, timeout=300
        )
        assert_refused(b, a.pid)
        assert a.poll() is None, "the holder stopped"
        assert holder(run).startswith(f"pid {a.pid}:"), holder(run)  # the refused writer did not touch the lock file
        assert RunPaths(run).config.read_bytes() == config and RunPaths(run).lineage.read_bytes() == lineage
        assert "seed = 1\n" in config.decode()
    finally:
        a.kill()
        a.communicate()
    reached = int(RunPaths(run).checkpoints()[-1].stem.split("_")[1])
    c = subprocess.run(
        train_cmd(cfg, run, "--resume", "--steps", reached + 3), capture_output=True, text=True, timeout=300
    )
    assert c.returncode == 0, c.stdout + c.stderr
    assert f"resumed {run} at step {reached}" in c.stdout
    assert [r["step"] for r in read_jsonl(RunPaths(run).metrics)] == list(range(reached + 3))
    assert [s["kind"] for s in read_jsonl(RunPaths(run).lineage)] == ["fresh", "resume"]


def test_two_concurrent_resumes_exactly_one_proceeds(tmp_path):
    cfg = tmp_path / "cfg.toml"
    save_snapshot(CONFIG, cfg)
    run = tmp_path / "run"
    fit(dataclasses.replace(load_cfg(cfg), steps=10), run, progress=False)  # a run at its checkpoint 10
    procs = [
        subprocess.Popen(train_cmd(cfg, run, "--resume"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        t0 = time.time()
        while all(p.poll() is None for p in procs):
            assert time.time() - t0 < 180, "neither resume was refused"
            time.sleep(0.02)
        loser = next(p for p in procs if p.poll() is not None)
        winner = next(p for p in procs if p is not loser)
        out, err = loser.communicate()
        assert winner.poll() is None, "both resumes ended: " + out + err
        assert_refused(subprocess.CompletedProcess(loser.args, loser.returncode, out, err), winner.pid)
        wait_for("the winner training", lambda: len(read_jsonl(RunPaths(run).metrics)) > 12, winner, 180)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    lineage = read_jsonl(RunPaths(run).lineage)
    assert [s["kind"] for s in lineage] == ["fresh", "resume"], lineage  # the loser added no segment
    steps = [r["step"] for r in read_jsonl(RunPaths(run).metrics)]
    assert steps == list(range(len(steps))), steps  # one row per step: no interleaved writer


def test_a_run_refused_before_writing_leaves_no_lock_and_no_directory(tmp_path):
    from dormouse.corpus_cache import CorpusError

    bad = tiny_cfg(data=str(tmp_path / "no-such-corpus"))
    with pytest.raises(CorpusError):
        fit(bad, tmp_path / "new", progress=False)  # fails under the lock, before anything is written
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError):
        fit(bad, tmp_path / "empty", progress=False)
    assert list((tmp_path / "empty").iterdir()) == []


def test_deleting_the_lock_note_does_not_let_a_second_writer_in(tmp_path):
    "The lock is on the directory: `rm run.lock` while A writes, and B (fresh or resumed) is still refused, naming A."
    cfg = tmp_path / "cfg.toml"
    save_snapshot(CONFIG, cfg)
    run = tmp_path / "run"
    a = subprocess.Popen(train_cmd(cfg, run, "--seed", 1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for("a checkpoint", lambda: holder(run).startswith(f"pid {a.pid}:") and RunPaths(run).checkpoints(), a)
        RunPaths(run).lock.unlink()
        for extra in (["--resume"], ["--seed", 2]):
            b = subprocess.run(train_cmd(cfg, run, *extra), capture_output=True, text=True, timeout=300)
            assert_refused(b, a.pid)
            assert not RunPaths(run).lock.exists(), "the refused writer wrote a note"
        assert a.poll() is None, "the holder stopped"
    finally:
        a.kill()
        a.communicate()


def test_the_lock_survives_its_note_being_deleted_or_replaced(tmp_path):
    note = tmp_path / "run.lock"
    with RunLock(note):
        note.unlink()
        with pytest.raises(RunDirError, match=rf"being written by another process \(pid {os.getpid()}: "):
            RunLock(note).__enter__()
        note.write_text("pid 1: someone else\n")  # a forged note does not name the holder either
        with pytest.raises(RunDirError, match=rf"\(pid {os.getpid()}: "):
            RunLock(note).__enter__()
    with RunLock(note):  # released: the next writer gets it and writes its own note
        assert note.read_text().startswith(f"pid {os.getpid()}: ")


def test_readers_share_the_lock_write_nothing_and_keep_writers_out(tmp_path):
    "A verifier holds the run shared: readers together, never beside a writer; a reader writes no note."
    run = tmp_path / "run"
    run.mkdir()
    note = RunPaths(run).lock
    with RunLock(note, shared=True), RunLock(note, shared=True):
        assert not note.exists()
        with pytest.raises(RunDirError, match="is being read by another process"):
            fit(tiny_cfg(steps=2), run, progress=False)
    assert [p.name for p in run.iterdir()] == [], "a refused writer or a reader left a file"
    with RunLock(note):
        with pytest.raises(RunDirError, match=rf"being written by another process \(pid {os.getpid()}: "):
            RunLock(note, shared=True).__enter__()
