"""TensorBoard and MLflow across a kill and a resume, read by their own readers: `dormouse train --track
tensorboard,mlflow` SIGKILLed after its checkpoint at step 10 with steps 10-13 logged (and shown by both trackers),
then resumed; and another stopped by SIGTERM and resumed. TensorBoard's reader (EventAccumulator) shows exactly one
value per step, metrics.jsonl's rounded to float32; MLflow's client shows one run, with the id the run directory
kept before the kill, one value per step equal to metrics.jsonl's, the plan's strict keys as params, and the events.
Every moment the test acts on is a hold in the training process (`dormouse.testing.held_train_cmd`), never a guess."""

import json, os, signal, subprocess

import numpy as np
import pytest

from dormouse.config import ENV_KEYS, PROGRESS_KEYS, flatten, read_snapshot
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import held_train_cmd, save_snapshot, tiny_cfg, train_cmd, wait_for
from dormouse.track_tensorboard import read_scalars, read_texts

# a seconds-scale plan, written by save_snapshot
CONFIG = tiny_cfg(steps=30, ckpt_every=10, eval_every=10, eval_batches=1, eval_depths=[1])
TRACK = ("--track", "tensorboard,mlflow")
HELD = 14  # the hold: steps 0-13 logged, the checkpoint at step 10 behind them


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "cfg.toml"
    save_snapshot(CONFIG, p)
    return p


def mlflow_client(run):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{(run / 'mlflow' / 'mlflow.db').resolve()}")


def kept_run_id(run) -> str:
    (run_id,) = json.loads((run / "mlflow" / "runs.json").read_text()).values()
    return run_id


def tb_last_step(run) -> int:
    return max((s for s, _ in read_scalars(run / "tensorboard").get("loss", [])), default=-1)


def mlflow_last_step(run) -> int:
    if not (run / "mlflow" / "runs.json").exists():
        return -1
    return max((m.step for m in mlflow_client(run).get_metric_history(kept_run_id(run), "loss")), default=-1)


def held_run(cfg_file, run, flag):
    "A training process held after HELD steps, once both trackers show step HELD - 1 and the checkpoint is written."
    proc = subprocess.Popen(held_train_cmd(cfg_file, run, *TRACK, at=HELD, flag=flag), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    wait_for("the hold", lambda: flag.with_suffix(".reached").exists(), proc)
    wait_for("the checkpoint at step 10", lambda: (RunPaths(run).ckpt_dir / "step_000010.dmck").exists(), proc)
    wait_for("TensorBoard's steps to 13", lambda: tb_last_step(run) == HELD - 1, proc)
    wait_for("MLflow's steps to 13", lambda: mlflow_last_step(run) == HELD - 1, proc)
    return proc


def measured(rows) -> set:
    "The keys a row measures: its numbers, not its flags, without step, segment and wall time."
    return {k for r in rows for k, v in r.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)} - {"step", "segment", "t"}


def assert_one_value_per_step(run, run_id: str) -> None:
    "TensorBoard and MLflow each show every step once, with metrics.jsonl's value; MLflow has the one run, kept."
    rows = read_jsonl(RunPaths(run).metrics)
    assert [r["step"] for r in rows] == list(range(30))
    keys = measured(rows)
    assert {"loss", "ce", "grad_norm", "lr", "depth", "eval_cold_d1"} <= keys
    tb = read_scalars(run / "tensorboard")
    assert set(tb) == keys
    for k in keys:
        assert tb[k] == [(r["step"], float(np.float32(r[k]))) for r in rows if k in r], f"TensorBoard's {k}"
    client = mlflow_client(run)
    runs = client.search_runs([client.get_experiment_by_name("dormouse").experiment_id])
    assert [r.info.run_id for r in runs] == [run_id], "one MLflow run per dormouse run, the one kept before"
    (only,) = runs
    assert set(only.data.metrics) == keys
    for k in keys:
        got = sorted((m.step, m.value) for m in client.get_metric_history(run_id, k))
        assert got == [(r["step"], r[k]) for r in rows if k in r], f"MLflow's {k}"
    plan = flatten(read_snapshot(RunPaths(run).config))
    assert only.data.params == {k: str(v) for k, v in plan.items() if k not in PROGRESS_KEYS | ENV_KEYS}
    assert {k: only.data.tags[f"plan.{k}"] for k in PROGRESS_KEYS | ENV_KEYS} == {
        k: str(plan[k]) for k in PROGRESS_KEYS | ENV_KEYS}
    assert only.info.status == "FINISHED" and only.info.run_name == run.name
    assert [a.path for a in client.list_artifacts(run_id)] == ["loss.png"]


def test_killed_after_its_checkpoint_and_resumed_each_tracker_shows_one_value_per_step(cfg_file, tmp_path):
    run = tmp_path / "run"
    proc = held_run(cfg_file, run, tmp_path / "hold")
    run_id = kept_run_id(run)
    proc.kill()  # SIGKILL, held after step 13: steps 10-13 are in metrics.jsonl, TensorBoard and MLflow
    proc.wait()
    assert len(read_jsonl(RunPaths(run).metrics)) == HELD
    r = subprocess.run(train_cmd(cfg_file, run, "--resume", *TRACK), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "at step 10 from step_000010.dmck" in r.stdout and "steps 10-13 are re-trained" in r.stdout, r.stdout
    assert_one_value_per_step(run, run_id)
    texts = read_texts(run / "tensorboard")
    ((at, said),) = texts["events/resume"]
    assert at == 10 and "re-trains 4 logged step(s)" in said
    assert [s for s, _ in texts["plan"]] == [0, 10]
    tags = mlflow_client(run).get_run(run_id).data.tags
    assert tags["event.000000010.resume"] == said
    assert tags["segment.1"] and json.loads(tags["segment.1"])["overlap_rows"] == 4
    assert json.loads(tags["segment.1"])["trackers"] == ["tensorboard", "mlflow"]


def test_killed_before_the_first_flush_after_its_checkpoint_and_resumed_each_tracker_shows_every_step(cfg_file,
                                                                                                     tmp_path):
    """The feed never flushed a row (FLUSH_SECS an hour in the killed process): both stores hold none of steps 0-13 when
    the run is SIGKILLed after its checkpoint at step 10. The resume catches each view up from metrics.jsonl (steps
    0-9, after the last step each store holds, read from the store), then re-trains 10-29: one value per step."""
    run, flag = tmp_path / "run", tmp_path / "hold"
    cmd = held_train_cmd(cfg_file, run, *TRACK, at=HELD, flag=flag)
    cmd[2] = "import dormouse.track\ndormouse.track.FLUSH_SECS = 3600.0\n" + cmd[2]  # no flush after the open
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for("the hold", lambda: flag.with_suffix(".reached").exists(), proc)
    wait_for("the checkpoint at step 10", lambda: (RunPaths(run).ckpt_dir / "step_000010.dmck").exists(), proc)
    run_id = kept_run_id(run)  # opened, its MLflow run made: but no row sent yet
    assert (tb_last_step(run), mlflow_last_step(run)) == (-1, -1)
    proc.kill()
    proc.wait()
    assert len(read_jsonl(RunPaths(run).metrics)) == HELD
    r = subprocess.run(train_cmd(cfg_file, run, "--resume", *TRACK), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_one_value_per_step(run, run_id)


def test_stopped_by_sigterm_and_resumed_each_tracker_shows_one_value_per_step(cfg_file, tmp_path):
    run, flag = tmp_path / "run", tmp_path / "hold"
    proc = held_run(cfg_file, run, flag)
    run_id = kept_run_id(run)
    os.kill(proc.pid, signal.SIGTERM)  # handled in the held loop: the next step is the last, then a checkpoint
    flag.with_suffix(".go").write_text("")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, out
    stop = HELD + 1  # steps 0-14 trained, the checkpoint at step 15
    assert len(read_jsonl(RunPaths(run).metrics)) == stop
    assert (RunPaths(run).ckpt_dir / f"step_{stop:06d}.dmck").exists()
    client = mlflow_client(run)
    assert client.get_run(run_id).info.status == "KILLED"  # stopped by a signal, resumable
    assert [s for s, _ in read_texts(run / "tensorboard")["events/stop"]] == [stop - 1]
    r = subprocess.run(train_cmd(cfg_file, run, "--resume", *TRACK), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_one_value_per_step(run, run_id)
    texts = read_texts(run / "tensorboard")
    assert [s for s, _ in texts["events/stop"]] == [stop - 1] and [s for s, _ in texts["events/resume"]] == [stop]
    tags = client.get_run(run_id).data.tags
    assert f"event.{stop - 1:09d}.stop" in tags and f"event.{stop:09d}.resume" in tags
