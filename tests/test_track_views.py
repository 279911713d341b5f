"""Trackers are views (rule: trackers are views): not plan, so adding or removing one on a resume is not drift and the
run is the run without them; a tracker that fails is reported once, marked in lineage.jsonl and switched off, and the
run stays bitwise the run without trackers; a tracker whose package is missing is refused in one line naming the
extra, before anything is written; and a run with trackers leaves no thread and no file of the run open."""

import dataclasses, json, os, shutil, subprocess, sys, threading, time

import pytest

from dormouse.config import ConfigError, field_names
from dormouse import track, track_mlflow
from dormouse.rundir import RunPaths, read_jsonl, read_lineage
from dormouse.testing import assert_same_run, tiny_cfg, train_cmd
from dormouse.track import Tracker
from dormouse.track_mlflow import MLflowTracker
from dormouse.track_tensorboard import TensorBoardTracker, read_scalars
from dormouse.train import fit

CFG = tiny_cfg(steps=30)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    "The run with no tracker at all."
    d = tmp_path_factory.mktemp("plain") / "run"
    fit(CFG, d, progress=False)
    return d


@pytest.fixture(autouse=True)
def no_tracking_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_adding_and_removing_trackers_on_a_resume_is_not_drift_and_the_run_is_the_same(plain, tmp_path):
    run = tmp_path / "run"
    fit(dataclasses.replace(CFG, steps=10), run, progress=False, trackers="tensorboard,mlflow")
    fit(dataclasses.replace(CFG, steps=20), run, resume=True, progress=False)  # removed: not drift
    fit(CFG, run, resume=True, progress=False, trackers=["tensorboard"])  # added again: not drift
    assert_same_run(plain, run)
    assert (run / "config.toml").read_bytes() == (plain / "config.toml").read_bytes()  # the plan never names one
    assert not any("track" in k for k in field_names()), "a tracker is not a config key"
    assert [s.get("trackers") for s in read_lineage(run)] == [["tensorboard", "mlflow"], None, ["tensorboard"]]
    # TensorBoard, added back at step 20, was caught up from metrics.jsonl with the steps it missed: one curve, 0-29
    assert [s for s, _ in read_scalars(run / "tensorboard")["loss"]] == list(range(30))
    told = Told()
    fit(CFG, run, resume=True, progress=False, trackers=[told])  # nothing to train: no segment, nothing to tell
    assert told.calls == [] and len(read_lineage(run)) == 3


class Told(Tracker):
    "A tracker that keeps every call it gets."
    name = "told"

    def __init__(self):
        self.calls = []

    def open(self, run):
        self.calls.append("open")

    def log(self, step, values):
        self.calls.append(step)


class BreaksAt(Tracker):
    "A tracker whose `log` raises at one step, counting every call it gets."
    name = "breaks"

    def __init__(self, step):
        self.step, self.calls = step, []

    def log(self, step, values):
        self.calls.append(step)
        if step == self.step:
            raise OSError(28, "No space left on device")


def test_a_failing_tracker_is_reported_once_switched_off_marked_and_the_run_is_the_run_without(plain, tmp_path, capfd):
    blocker = tmp_path / "a_file"
    blocker.write_text("a regular file where a directory should be")
    breaks = BreaksAt(7)
    trackers = [TensorBoardTracker(logdir=blocker / "tb"),  # cannot create its directory: fails at open
                MLflowTracker(tracking_uri=f"sqlite:///{blocker}/mlflow.db"),  # cannot create its store
                breaks]  # fails mid-run
    df = fit(CFG, tmp_path / "run", progress=False, trackers=trackers)
    assert len(df) == CFG.steps
    err = capfd.readouterr().err
    for name in ("tensorboard", "mlflow", "breaks"):
        assert err.count(f"tracker {name} failed") == 1, err  # reported once
    assert breaks.calls == list(range(8)), "a failed tracker is switched off: never called again"
    off = read_lineage(tmp_path / "run")[-1]["trackers_off"]
    assert set(off) == {"tensorboard", "mlflow", "breaks"} and off["breaks"].startswith("step 7: OSError")
    assert off["tensorboard"].startswith("open: ") and off["mlflow"].startswith("open: ")
    assert_same_run(plain, tmp_path / "run")


class Raises(Tracker):
    "A tracker whose `log` raises `error` at step 7; keeps the steps it is given and how it is closed."

    def __init__(self, name, error):
        self.name, self.error, self.calls, self.closed = name, error, [], []

    def log(self, step, values):
        self.calls.append(step)
        if step == 7:
            raise self.error

    def close(self, status):
        self.closed.append(status)


def test_a_tracker_failing_in_any_way_is_reported_by_its_name_and_a_healthy_one_gets_every_row(plain, tmp_path, capfd):
    "Not only OSError: a ValueError, a RuntimeError, MLflow's and SQLAlchemy's own errors, even SystemExit."
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import OperationalError

    kinds = {"value": ValueError("a bad value"), "runtime": RuntimeError("boom"),
             "mlflow_error": MlflowException("the store said no"),
             "sqlalchemy_error": OperationalError("INSERT INTO metrics", {}, Exception("database is locked")),
             "exits": SystemExit(3)}
    failing, healthy = [Raises(name, e) for name, e in kinds.items()], Told()
    fit(CFG, tmp_path / "run", progress=False, trackers=[*failing, healthy])
    err = capfd.readouterr().err
    off = read_lineage(tmp_path / "run")[-1]["trackers_off"]
    for t in failing:
        said = f"step 7: {type(t.error).__name__}"
        assert err.count(f"tracker {t.name} failed ({said}") == 1, err  # once, by its own name
        assert off[t.name].startswith(said), off
        assert (t.calls, t.closed) == (list(range(8)), ["failed"]), t.name  # closed, never called again
    assert set(off) == set(kinds)
    assert [c for c in healthy.calls if c != "open"] == list(range(CFG.steps))  # the healthy one: every row
    assert_same_run(plain, tmp_path / "run")


def test_a_hung_tracker_is_named_with_the_call_it_is_stuck_in(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(track, "CLOSE_SECS", 2.0)
    release, stuck = threading.Event(), threading.Event()

    class Hangs(Tracker):
        name = "hangs"

        def log(self, step, values):
            if step == 3:
                stuck.set()
                release.wait(120)

    try:
        fit(tiny_cfg(steps=6), tmp_path / "run", progress=False, trackers=[Hangs()])
    finally:
        release.set()
        for t in threading.enumerate():  # the feed left behind finishes once released: none outlives this test
            if t.name == "dormouse-trackers":
                t.join(30)
    assert stuck.is_set()
    said = "step 3: still busy after 2 s, left to finish alone"
    assert f"tracker hangs failed ({said})" in capfd.readouterr().err
    assert read_lineage(tmp_path / "run")[-1]["trackers_off"] == {"hangs": said}


@pytest.mark.parametrize("module, name", [("tensorboard", "tensorboard"), ("mlflow", "mlflow"),
                                          ("sqlalchemy", "mlflow")])
def test_a_tracker_whose_package_is_missing_is_refused_naming_the_extra_before_anything_is_written(
        module, name, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` fails, as where it is not installed
    with pytest.raises(ConfigError, match=rf"tracker {name} needs {module}, not installed: pip install "
                                          r"'dormouse\[track\]'"):
        fit(CFG, tmp_path / "run", progress=False, trackers=[name])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("track, said", [
    ("mlflow", "dormouse: error: tracker mlflow needs mlflow, not installed: pip install 'dormouse[track]'"),
    ("wandb", "dormouse: error: unknown tracker 'wandb': use tensorboard or mlflow, or pass a tracker object"),
    ("", "dormouse: error: argument --track: '' names no tracker: use tensorboard, mlflow or tensorboard,mlflow"),
])
def test_the_command_line_refuses_a_tracker_it_cannot_run_in_one_line(track, said, tmp_path):
    cfg_file = tmp_path / "cfg.toml"
    cfg_file.write_text("steps = 3\n")
    hide = "import sys; sys.modules['mlflow'] = None; from dormouse.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", hide, *train_cmd(cfg_file, tmp_path / "run", "--track", track)[3:]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith(said), r.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_with_trackers_leaves_no_thread_and_no_file_of_the_run_open(tmp_path):
    fit(tiny_cfg(steps=3), tmp_path / "warm", progress=False, trackers="tensorboard,mlflow")  # imports done
    threads = sorted(t.name for t in threading.enumerate())
    run = tmp_path / "run"
    fit(tiny_cfg(steps=12), run, progress=False, trackers="tensorboard,mlflow")
    assert sorted(t.name for t in threading.enumerate()) == threads
    fd_dir = f"/proc/{os.getpid()}/fd"
    held = [os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir) if os.path.exists(f"{fd_dir}/{fd}")]
    assert not [p for p in held if p.startswith(str(run))], "a file of the run is still open"
    assert (run / "mlflow" / "mlflow.db").exists() and list((run / "tensorboard").iterdir())


def test_a_fresh_run_in_a_directory_another_run_left_its_mlflow_store_in_gets_an_mlflow_run_of_its_own(tmp_path):
    run = tmp_path / "run"
    fit(tiny_cfg(steps=3), run, progress=False, trackers="mlflow")
    for p in run.iterdir():  # everything but the MLflow store: a fresh run may start here
        if p.is_dir() and p.name != "mlflow":
            shutil.rmtree(p)
        elif p.is_file():
            p.unlink()
    fit(tiny_cfg(steps=3, seed=2), run, progress=False, trackers="mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{(run / 'mlflow' / 'mlflow.db').resolve()}"
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("dormouse").experiment_id])
    assert len(runs) == 2 and len({r.data.tags["dormouse.run_id"] for r in runs}) == 2  # one per dormouse run
    kept = json.loads((run / "mlflow" / "runs.json").read_text())[uri]
    assert client.get_run(kept).data.tags["dormouse.run_id"] == read_lineage(run)[0]["run_id"]


class Watch(Tracker):
    "Records, on the feed's thread, what the run had written when it was opened and first fed, and its niceness."
    name = "watch"

    def open(self, run):
        time.sleep(1.0)  # a slow store: the loop, were it not waiting, would write rows meanwhile
        self.root = run.root
        self.rows_at_open = len(read_jsonl(RunPaths(run.root).metrics))
        self.nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        self.rows_at_first_log = None

    def log(self, step, values):
        if self.rows_at_first_log is None:
            self.rows_at_first_log = len(read_jsonl(RunPaths(self.root).metrics))



def test_the_trackers_open_before_the_first_step_and_are_fed_in_batches_on_a_nicer_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(track, "FLUSH_SECS", 3600.0)  # the thread wakes only when the segment ends
    nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    w = Watch()
    fit(tiny_cfg(steps=12), tmp_path / "run", progress=False, trackers=[w])
    assert w.rows_at_open == 0  # opened before the loop wrote its first row: imports and stores are not beside a step
    assert w.rows_at_first_log == 12  # no wake-up per row: the rows came in one batch (here, at the segment's end)
    assert w.nice == min(19, nice + track.NICE)  # the feed's thread is nicer than the loop
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == nice  # and the caller's thread as it was


def test_a_store_whose_making_fails_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setattr(track_mlflow, "cache_dir", lambda: tmp_path / "cache")
    real = MlflowClient.search_experiments

    def made_then_fails(self, *a, **kw):  # the half-made store exists when MLflow fails
        real(self, *a, **kw)
        raise RuntimeError("MLflow failed after making the file")

    monkeypatch.setattr(MlflowClient, "search_experiments", made_then_fails)
    with pytest.raises(RuntimeError, match="after making the file"):
        track_mlflow.empty_store(tmp_path / "mlflow.db")
    assert list((tmp_path / "cache" / "mlflow").iterdir()) == []  # no .part, no store
    assert not (tmp_path / "mlflow.db").exists()


def test_a_new_mlflow_store_is_the_cached_empty_store(tmp_path, monkeypatch):
    monkeypatch.setattr(track_mlflow, "cache_dir", lambda: tmp_path / "cache")
    fit(tiny_cfg(steps=3), tmp_path / "a", progress=False, trackers="mlflow")
    made = list((tmp_path / "cache" / "mlflow").glob("empty-*.db"))
    assert len(made) == 1 and not list((tmp_path / "cache" / "mlflow").glob("*.part"))
    os.utime(made[0], (0, 0))  # a second run copies it, never makes it again
    fit(tiny_cfg(steps=3), tmp_path / "b", progress=False, trackers="mlflow")
    assert made[0].stat().st_mtime == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{(tmp_path / 'b' / 'mlflow' / 'mlflow.db').resolve()}")
    assert len(client.search_runs([client.get_experiment_by_name("dormouse").experiment_id])) == 1
