"""History is evidence: a resume never restarts over a run's history, never silently cuts a damaged JSON-lines file,
and a `steps` at or below the reached step trains and writes nothing; the files a resume reads are written durably."""

import dataclasses, os, shutil

import pytest

from dormouse.fsio import atomic_write
from dormouse.config import ConfigError
from dormouse.rundir import RunDirError, RunPaths, refuse_fresh_over_history, write_jsonl
from dormouse.testing import assert_same_run, tiny_cfg
from dormouse.train import fit


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    cfg = tiny_cfg(steps=20, ckpt_every=10, keep_ckpts=10)
    fit(cfg, root / "ref", progress=False)
    fit(dataclasses.replace(cfg, steps=10), root / "half", progress=False)  # a run stopped at its checkpoint 10
    return cfg, root


def files(run):
    "Every file of a run directory but its lock (whose holder line each locker rewrites) -> bytes."
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != "run.lock"}


def copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("leave", ["nothing", "tables files"])
def test_resume_with_history_but_no_checkpoint_is_refused_naming_it(base, tmp_path, leave):
    cfg, root = base
    run = copy(root / "ref", tmp_path / "run")
    for p in RunPaths(run).ckpt_dir.iterdir():
        if leave == "nothing" or p.suffix == ".dmck":
            p.unlink()
    before = files(run)
    with pytest.raises(RunDirError) as e:
        fit(cfg, run, resume=True, progress=False)
    msg = str(e.value)
    assert "20 metrics rows" in msg and "1 lineage segment" in msg and "config.toml" in msg, msg
    assert ("step_000010.ngdelta" in msg) == (leave == "tables files"), msg  # the tables files left are named
    assert "\n" not in msg
    assert files(run) == before  # metrics and lineage untouched: not "starting from step 0"


BAD_ROWS = {
    "bad JSON": b'{"step": 3, "lo\n',
    "a list": b"[1, 2, 3]\n",
    "a number": b"7\n",
    "no step": b'{"x": 1}\n',
    "not UTF-8": b'{"step": 3, "q": "\xff\xfe"}\n',
}


@pytest.mark.parametrize("what", list(BAD_ROWS))
def test_a_bad_metrics_row_in_the_middle_is_an_error_naming_file_and_line(base, tmp_path, what):
    cfg, root = base
    run = copy(root / "half", tmp_path / "run")
    m = RunPaths(run).metrics
    lines = m.read_bytes().splitlines(keepends=True)
    m.write_bytes(b"".join(lines[:3] + [BAD_ROWS[what]] + lines[3:]))
    before = files(run)
    with pytest.raises(RunDirError, match=r"metrics\.jsonl line 4"):
        fit(cfg, run, resume=True, progress=False)
    assert files(run) == before  # no row after the bad one was cut


@pytest.mark.parametrize("what", ["garbage", "a number"])
def test_a_bad_first_lineage_line_does_not_replace_the_history(base, tmp_path, what):
    cfg, root = base
    run = copy(root / "half", tmp_path / "run")
    lin = RunPaths(run).lineage
    lin.write_bytes((b"garbage\n" if what == "garbage" else b"7\n") + lin.read_bytes())
    before = files(run)
    with pytest.raises(RunDirError, match=r"lineage\.jsonl line 1"):
        fit(cfg, run, resume=True, progress=False)
    assert files(run) == before


def test_a_garbage_only_lineage_is_not_a_torn_tail(base, tmp_path):
    cfg, root = base
    run = copy(root / "half", tmp_path / "run")
    RunPaths(run).lineage.write_bytes(b"garbage")  # lineage is replaced whole, never appended: no torn tail to forgive
    with pytest.raises(RunDirError, match=r"lineage\.jsonl line 1"):
        fit(cfg, run, resume=True, progress=False)


def test_a_torn_last_metrics_line_is_dropped_and_the_resume_is_bitwise(base, tmp_path):
    cfg, root = base
    run = copy(root / "half", tmp_path / "run")
    with open(RunPaths(run).metrics, "ab") as f:
        f.write(b'{"step": 10, "loss": 4.')  # a kill mid-append
    fit(cfg, run, resume=True, progress=False)
    assert_same_run(root / "ref", run)


def test_steps_below_the_reached_step_is_refused_before_anything_is_written(base, tmp_path):
    cfg, root = base
    run = copy(root / "ref", tmp_path / "run")
    before = files(run)
    with pytest.raises(ConfigError, match="below step 20") as e:
        fit(dataclasses.replace(cfg, steps=15), run, resume=True, progress=False)
    assert "steps=15" in str(e.value)
    assert files(run) == before


def test_steps_equal_to_the_reached_step_says_already_and_writes_nothing(base, tmp_path, capsys):
    cfg, root = base
    run = copy(root / "ref", tmp_path / "run")
    before = files(run)
    df = fit(cfg, run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert "already at step 20" in out and "resumed" in out, out
    assert list(df.step) == list(range(20)) and not df.attrs["interrupted"] and df.attrs["exit_status"] == 0
    assert files(run) == before


def test_writes_a_resume_reads_are_fsynced_with_their_directory(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    write_jsonl(tmp_path / "m.jsonl", [{"step": 0}])
    atomic_write(tmp_path / "config.toml", "x = 1\n")
    assert synced.count(str(tmp_path)) == 2, synced  # the directory after each rename
    synced.clear()
    fit(tiny_cfg(steps=2, ckpt_every=2), tmp_path / "run", progress=False)
    run = str(tmp_path / "run")
    assert any(p.startswith(run + "/.config.toml.tmp") for p in synced), synced  # the snapshot's content
    assert any(p.startswith(run + "/.lineage.jsonl.tmp") for p in synced), synced
    assert synced.count(run) >= 3, synced  # the run directory after config.toml, metrics.jsonl, lineage.jsonl
    assert (tmp_path / "run" / "config.toml").read_text().startswith("# dormouse config snapshot")


HISTORY = {  # what a run that died before its first checkpoint (or a part of it) leaves, and how the refusal names it
    "the whole of it": (("config.toml", "metrics.jsonl", "lineage.jsonl"), "metrics.jsonl (20 rows)"),
    "config.toml": (("config.toml",), "config.toml (the plan)"),
    "metrics.jsonl": (("metrics.jsonl",), "metrics.jsonl (20 rows)"),
    "lineage.jsonl": (("lineage.jsonl",), "lineage.jsonl (1 segment(s))"),
    "tables files only": (("ckpt",), "ckpt/ ("),
}


@pytest.mark.parametrize("what", list(HISTORY))
def test_a_fresh_start_over_history_is_refused_naming_it_and_the_two_ways_on(base, tmp_path, what):
    cfg, root = base
    keep, words = HISTORY[what]
    run = tmp_path / "run"
    run.mkdir()
    for name in keep:
        src = root / "ref" / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, run / name)
    for p in (run / "ckpt").glob("*.dmck"):  # no container: the refusal must not depend on checkpoints
        p.unlink()
    before = files(run)
    with pytest.raises(RunDirError) as e:
        refuse_fresh_over_history(RunPaths(run))
    msg = str(e.value)
    assert words in msg and "a fresh run would replace it" in msg, msg
    assert "Resume that run" in msg and "new run directory" in msg and "\n" not in msg, msg
    assert files(run) == before


def test_no_history_is_no_refusal(tmp_path):
    refuse_fresh_over_history(RunPaths(tmp_path / "missing"))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "run.lock").write_text("pid 1: x\n")  # a lock note and an empty ckpt/ are not a run's history
    refuse_fresh_over_history(RunPaths(tmp_path))
    assert RunPaths(tmp_path).history() == []


@pytest.mark.parametrize("checkpoints", ["kept", "gone"])
def test_a_second_fresh_fit_in_one_directory_is_refused_and_every_row_is_still_there(base, tmp_path, checkpoints):
    "A run that died before its first checkpoint (its ckpt/ gone), or one that has them: `fit` again without resume."
    cfg, root = base
    run = copy(root / "ref", tmp_path / "run")
    if checkpoints == "gone":
        shutil.rmtree(run / "ckpt")
    before = files(run)
    with pytest.raises(RunDirError) as e:
        fit(dataclasses.replace(cfg, seed=7), run, progress=False)
    msg = str(e.value)
    assert "metrics.jsonl (20 rows)" in msg and "config.toml (the plan)" in msg and "Resume that run" in msg, msg
    assert files(run) == before  # all 20 rows, the lineage and the old plan


def _long_history(root, n):
    "A run directory whose metrics hold `n` rows shaped like the loop's."
    root.mkdir()
    row = ('{"step": %d, "loss": %r, "ce": 1.0, "jepa": null, "grad_norm": 0.5, "depth": 2, "lr": 0.001, '
           '"quant": "fp32", "fingerprint": %s, "segment": 0, "t": 1.0, "eval_cold_d1": %s}\n')
    with open(RunPaths(root).metrics, "w") as f:
        f.writelines(row % (s, 5.0 / (1 + s), '"ab"' if s % 10 == 0 else "null", "2.5" if s % 7 == 0 else "null")
                     for s in range(n))
    return root


def test_compare_and_plot_stream_a_long_history_in_bounded_memory(tmp_path):
    "Issue 23: a long run's history is streamed, never held whole (the old reader held every row as a dict)."
    import tracemalloc

    import matplotlib

    matplotlib.use("Agg")
    from dormouse.view import compare_runs, plot_run

    n = 20_000
    a, b = _long_history(tmp_path / "a", n), _long_history(tmp_path / "b", n)
    tracemalloc.start()
    try:
        res = compare_runs(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(res) == f"identical through step {n - 1} ({n} common steps, losses and fingerprints)"
    assert peak < 1 << 20, f"compare held {peak:,} bytes for {n} rows"  # every row as a dict: tens of MB
    fig = plot_run(a, baselines=False)
    ax = fig.axes[0]
    assert all(len(line.get_xdata()) <= 4096 for line in ax.lines)  # a bounded curve, whatever the run's length
    assert f"{n} steps" in ax.get_title()


def test_a_resume_holds_a_bounded_tail_of_the_history_and_keeps_every_row(tmp_path, monkeypatch):
    "Issue 23: a resume streams the history (the last PANEL_ROWS rows in memory), and the file keeps every row."
    import dormouse.train as train_mod
    from dormouse.rundir import read_metrics, rows_before
    from dormouse.testing import assert_same_run

    cfg = tiny_cfg(steps=20, ckpt_every=5, eval=False)
    fit(cfg, tmp_path / "ref", progress=False)
    fit(dataclasses.replace(cfg, steps=10), tmp_path / "r", progress=False)
    held, at_resume = [], []

    def small_tail(path, step):
        held.append(rows_before(path, step, keep=3))
        at_resume.append([r["step"] for r in held[-1]])
        return held[-1]

    monkeypatch.setattr(train_mod, "rows_before", small_tail)
    fit(cfg, tmp_path / "r", resume=True, progress=False)
    assert at_resume == [[7, 8, 9]] and held[0].maxlen == 3
    assert [r["step"] for r in held[0]] == [17, 18, 19]  # the loop's rows stay within the bound too
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == list(range(20))
    assert_same_run(tmp_path / "ref", tmp_path / "r")
