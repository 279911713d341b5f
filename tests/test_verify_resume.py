"""Issue 22: resume anywhere, proven. Every checkpoint carries the evidence of the interval before it; every resume
compares the steps it re-trains with the run's rows; an environment change is verified by replaying an interval
(refused only when the replay differs or cannot run); `dormouse verify` replays a run's intervals, writing nothing."""

import dataclasses, json, os, subprocess, sys
from pathlib import Path

import pytest

from dormouse.config import TrainCfg
from dormouse.container import load_ckpt, save_ckpt
from dormouse.container_format import CheckpointError
from dormouse.numerics import EnvDriftError, numeric_env
from dormouse.parts import build_parts, to_run_state
from dormouse.checkpoints import save_run_ckpt
from dormouse.precompute import precompute_jepa_targets
from dormouse.evidence import Evidence, row_check
from dormouse.replay import UnverifiableError
from dormouse.rundir import RunDirError, RunLock, RunPaths, read_jsonl, read_lineage
from dormouse.testing import assert_same_run, dormouse_cli, rewrite_ckpt, stopped_at, tiny_cfg
from dormouse.train import fit
from dormouse.verify import verify

from conftest import REF_CFG as CFG
ROOT = Path(__file__).resolve().parents[1]


def _listing(run):
    return sorted((str(p.relative_to(run)), p.stat().st_size, p.stat().st_mtime_ns) for p in Path(run).rglob("*"))


# 1. evidence in the container


def test_every_checkpoint_carries_the_evidence_of_its_interval(ref):
    rows = read_jsonl(RunPaths(ref).metrics)
    fps = {r["step"]: r["fingerprint"] for r in rows if r["fingerprint"]}
    starts = []
    for p in RunPaths(ref).checkpoints():
        ev = Evidence.from_json(load_ckpt(p).evidence)
        assert ev.end == load_ckpt(p).step
        assert list(ev.losses) == [r["loss"] for r in rows[ev.start : ev.end]]
        assert ev.fingerprints == {s: fps[s] for s in range(ev.start, ev.end) if s in fps}
        assert ev.start == 0 or ev.start_fingerprint == fps[ev.start - 1]
        starts.append(ev.start)
    assert starts == [0, 10, 20]
    assert all(r["check"] == row_check(r) for r in rows)  # every row sealed


def test_an_older_container_without_evidence_loads_and_bad_evidence_is_refused(ref, tmp_path):
    p = tmp_path / "c.dmck"
    ck = load_ckpt(RunPaths(ref).checkpoints()[-1])
    ck.evidence = None
    save_ckpt(p, ck)
    assert load_ckpt(p).evidence is None and load_ckpt(p).step == 30
    ck.evidence = {**Evidence(0, "0" * 16, (1.0,), {0: "1" * 16}).to_json(), "losses": ["x"]}
    save_ckpt(p, ck)
    with pytest.raises(CheckpointError, match="evidence.losses"):
        load_ckpt(p)


# 2. the overlap check


def test_a_killed_run_resumes_comparing_every_step_it_re_trains(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)  # rows 20..29 were written after checkpoint 20
    df = fit(CFG, run, resume=True, progress=False)
    assert df.attrs["overlap_compared"] == 10 and read_lineage(run)[-1]["overlap_rows"] == 10
    assert_same_run(ref, run)


def _edit_row(run, step, **changes):
    "Edit one metrics row; its check recomputed, so it reads as trustworthy (a forged or a differing record)."
    p = RunPaths(run).metrics
    rows = read_jsonl(p)
    rows[step].update(changes)
    rows[step]["check"] = row_check(rows[step])
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_re_trained_step_that_differs_stops_the_resume_before_its_checkpoint(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 10)  # a kill after checkpoint 10: rows 10..29 remain
    _edit_row(run, 19, fingerprint="00000000000000ff")  # the row of step 19, whose checkpoint (20) follows it
    before = RunPaths(run).metrics.read_bytes()
    with pytest.raises(EnvDriftError, match=r"resume stopped at step 19: .*fingerprint 00000000000000ff recorded, "):
        fit(CFG, run, resume=True, progress=False)
    assert not (RunPaths(run).ckpt_dir / "step_000020.dmck").exists()  # nothing of the diverged trajectory
    assert RunPaths(run).metrics.read_bytes() == before  # the run's rows, as they were


def test_an_edited_row_is_said_and_skipped(ref, tmp_path, capsys):
    run = stopped_at(ref, tmp_path / "run", 20)
    p = RunPaths(run).metrics
    rows = read_jsonl(p)
    rows[23]["loss"] = 9.0  # edited by hand: its check no longer matches
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = fit(CFG, run, resume=True, progress=False)
    assert "steps 23: not evidence (edited" in capsys.readouterr().out
    assert df.attrs["overlap_compared"] == 9
    assert_same_run(ref, run)


# 3. an environment change verified by replay


def test_a_thread_change_is_verified_by_replay_and_the_run_is_the_same(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)
    fit(dataclasses.replace(CFG, threads=2), run, resume=True, progress=False)
    seg = read_lineage(run)[-1]
    assert seg["env_drift"] == {"threads": [1, 2]} and not seg["env_waived"]
    assert seg["env_verified"] == {"from_step": 10, "to_step": 20, "interval": [10, 20], "losses": 10,
                                   "fingerprints": 3, "keys": ["threads"]}
    assert_same_run(ref, run)


def test_two_threads_back_to_one_is_verified_too(ref, tmp_path):
    run = tmp_path / "run"
    fit(dataclasses.replace(CFG, steps=20, threads=2), run, progress=False)
    fit(CFG, run, resume=True, progress=False)
    assert read_lineage(run)[-1]["env_verified"]["keys"] == ["threads"]
    assert_same_run(ref, run)


def test_an_unverifiable_change_is_refused_saying_why_and_the_waiver_is_recorded(ref, tmp_path):
    two = dataclasses.replace(CFG, threads=2)
    run = stopped_at(ref, tmp_path / "run", 20)
    rewrite_ckpt(RunPaths(run).ckpt_dir / "step_000020.dmck", evidence=None)
    with pytest.raises(UnverifiableError, match="carries no evidence"):
        fit(two, run, resume=True, progress=False)
    run2 = stopped_at(ref, tmp_path / "run2", 20)
    for q in RunPaths(run2).ckpt_dir.glob("step_000010.*"):
        if q.suffix == ".dmck":
            q.unlink()  # the interval's start is gone
    with pytest.raises(UnverifiableError, match="step_000010.dmck is no longer in"):
        fit(two, run2, resume=True, progress=False)
    fit(two, run, resume=True, allow_env_drift=True, progress=False)
    seg = read_lineage(run)[-1]
    assert seg["env_waived"] and seg["env_verified"] is None


def test_a_replay_that_differs_is_refused_naming_the_step(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)
    p = RunPaths(run).ckpt_dir / "step_000020.dmck"
    ev = load_ckpt(p).evidence
    ev["fingerprints"][0][1] = "00000000000000ee"  # step 14's: as if this environment computed other bits
    rewrite_ckpt(p, evidence=ev)
    with pytest.raises(EnvDriftError, match=r"(?s)threads: 1 -> 2.*step 14: fingerprint 00000000000000ee recorded"):
        fit(dataclasses.replace(CFG, threads=2), run, resume=True, progress=False)
    assert not (RunPaths(run).ckpt_dir / "step_000030.dmck").exists()


def test_a_changed_definition_is_refused_plainly(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)
    p = RunPaths(run).ckpt_dir / "step_000020.dmck"
    rewrite_ckpt(p, env={**load_ckpt(p).env, "def_fingerprint": 0})
    with pytest.raises(EnvDriftError, match="def_fingerprint v0 -> v1.*cannot be verified"):
        fit(CFG, run, resume=True, progress=False)


MATRIX = {  # every case has n-gram tables (tiny_cfg's orders 2, 3) and, but "stream", the shuffled data order
    "fp8": dict(quant="fp8", quant_check=True),
    "int8": dict(quant="int8"),
    "aux": dict(aux=True),
    "aux-targets": dict(aux=True, jepa_targets="targets"),  # offline JEPA targets, made below from the init state
    "rand-stress": dict(rand_depth=True, stress=True, stress_refuse=True, stress_k=1.5),
    "stream": dict(data_order="stream"),
}


def _with_targets(cfg, tmp_path):
    "`cfg` reading offline JEPA targets precomputed from its own init state (a frozen teacher), in tmp_path."
    cfg = dataclasses.replace(cfg, jepa_targets=str(tmp_path / cfg.jepa_targets))
    parts = build_parts(cfg)
    init = save_run_ckpt(tmp_path / "init", to_run_state(parts, numeric_env(threads=cfg.threads)), parts.tables, keep=1)
    precompute_jepa_targets(cfg, init, cfg.jepa_targets, progress=False)
    return cfg


@pytest.mark.parametrize("name", list(MATRIX))
def test_a_thread_change_is_verified_for_each_feature_set(name, tmp_path):
    cfg = tiny_cfg(steps=12, ckpt_every=4, log_every=2, keep_ckpts=10, eval=False, **MATRIX[name])
    cfg = _with_targets(cfg, tmp_path) if cfg.jepa_targets else cfg
    fit(cfg, tmp_path / "ref", progress=False)
    run = stopped_at(tmp_path / "ref", tmp_path / "run", 8)
    df = fit(dataclasses.replace(cfg, threads=2), run, resume=True, progress=False)
    assert read_lineage(run)[-1]["env_verified"]["from_step"] == 4 and df.attrs["overlap_compared"] == 4
    assert_same_run(tmp_path / "ref", run)
    if cfg.jepa_targets:  # the aux objective ran, on the targets, with no teacher in any checkpoint
        assert all(r["jepa"] > 0 for r in read_jsonl(RunPaths(run).metrics))
        assert all(load_ckpt(p).teacher is None for p in RunPaths(run).checkpoints())


@pytest.mark.default_size
@pytest.mark.parametrize("threads", [(1, 2), (2, 1)])
def test_the_default_model_resumed_on_another_thread_count_is_verified(threads, tmp_path):
    "The default model is not thread-invariant without MKL's STRICT mode (issue 22): run_scope applies it."
    cfg = TrainCfg(steps=6, ckpt_every=3, log_every=1, batch=2, seq_len=64, eval=False, threads=threads[0])
    fit(cfg, tmp_path / "ref", progress=False)
    run = stopped_at(tmp_path / "ref", tmp_path / "run", 3)
    fit(dataclasses.replace(cfg, threads=threads[1]), run, resume=True, progress=False)
    assert read_lineage(run)[-1]["env_verified"] == {"from_step": 0, "to_step": 3, "interval": [0, 3], "losses": 3,
                                                     "fingerprints": 4, "keys": ["threads"]}
    assert_same_run(tmp_path / "ref", run)


@pytest.mark.default_size
@pytest.mark.parametrize("features", [
    dict(aux=True, quant="fp8", quant_check=True, rand_depth=True, stress=True),
    dict(quant="int8", data_order="stream"),
], ids=["aux-fp8-check-rand-stress", "int8-stream"])
def test_the_default_model_with_every_feature_is_verified_across_threads(features, tmp_path):
    "The feature sets of the resume matrix at the default model size (n-gram tables included), 1 -> 2 threads."
    cfg = TrainCfg(steps=6, ckpt_every=3, log_every=1, batch=2, seq_len=64, eval=False, threads=1, **features)
    fit(cfg, tmp_path / "ref", progress=False)
    run = stopped_at(tmp_path / "ref", tmp_path / "run", 3)
    fit(dataclasses.replace(cfg, threads=2), run, resume=True, progress=False)
    assert read_lineage(run)[-1]["env_verified"]["keys"] == ["threads"]
    assert_same_run(tmp_path / "ref", run)


# 4. dormouse verify


def _verify_cli(*args):
    return dormouse_cli("verify", *args, "--quiet", timeout=300)


def test_dormouse_verify_reproduces_every_interval_and_writes_nothing(ref):
    before = _listing(ref)
    r = _verify_cli(ref, "--threads", 2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [ln.split(":")[0] for ln in r.stdout.splitlines() if "reproduced bit for bit (" in ln] == \
        ["steps 0-9", "steps 10-19", "steps 20-29"]
    assert "3 of 3 interval(s) reproduced bit for bit" in r.stdout
    assert _listing(ref) == before


def test_dormouse_verify_names_the_first_differing_step(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 30)
    p = RunPaths(run).ckpt_dir / "step_000020.dmck"
    ev = load_ckpt(p).evidence
    ev["losses"][3] = ev["losses"][3] + 1.0
    rewrite_ckpt(p, evidence=ev)
    before = _listing(run)
    r = _verify_cli(run, "--interval", 20)
    assert r.returncode == 1 and "steps 10-19: DIFFERS: step 13: loss" in r.stdout, r.stdout + r.stderr
    assert _listing(run) == before


def test_dormouse_verify_bad_input_is_one_line(ref, tmp_path):
    r = _verify_cli(tmp_path)
    assert r.returncode == 2 and "not a run directory" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    run = stopped_at(ref, tmp_path / "run", 30)
    bad = RunPaths(run).ckpt_dir / "step_000020.dmck"
    ev = load_ckpt(bad).evidence
    ev["fingerprints"] = ev["fingerprints"][:-1]  # no longer ends at its checkpoint's step: torn
    rewrite_ckpt(bad, evidence=ev)
    r = _verify_cli(run)
    assert r.returncode == 3, r.stdout + r.stderr  # what can be verified is, the rest is said: not verified
    assert "step_000020.dmck: not verifiable: its fingerprints are not at increasing steps" in r.stdout
    assert "steps 0-9: reproduced" in r.stdout and "steps 20-29: not verifiable" not in r.stdout
    for p in RunPaths(run).checkpoints():
        rewrite_ckpt(p, evidence=None)
    r = _verify_cli(run)
    assert r.returncode == 3 and "nothing in" in r.stderr and "carries no evidence" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_dormouse_verify_is_refused_while_the_run_is_written(ref):
    with RunLock(RunPaths(ref).lock):  # what fit holds while it trains
        with pytest.raises(RunDirError, match="being written by another process"):
            verify(ref, progress=False)


def test_bf16_across_a_thread_change_is_refused_naming_the_first_step(tmp_path):
    """bf16 autocast's kernels are not MKL's, and they can differ across thread counts whatever MKL's mode (an Intel
    Xeon: the default model's 1 and 2 threads from the third step; an AMD EPYC reproduced those steps): a refused
    thread change of a bf16 run says so. Step 0's recorded loss is moved (a legitimate file, checksums recomputed), so
    the replay differs there on any CPU."""
    cfg = tiny_cfg(steps=3, ckpt_every=3, log_every=1, bf16=True, eval=False, threads=1)
    fit(cfg, tmp_path / "run", progress=False)
    p = RunPaths(tmp_path / "run").ckpt_dir / "step_000003.dmck"
    ev = load_ckpt(p).evidence
    ev["losses"][0] = ev["losses"][0] + 1.0
    rewrite_ckpt(p, evidence=ev)
    before = [f for f in _listing(tmp_path / "run") if f[0] != "run.lock"]  # the lock's note names its writer
    with pytest.raises(EnvDriftError, match=r"(?s)threads: 1 -> 2.*does not reproduce the run: step 0: loss "
                       r"[0-9.]+ recorded, [0-9.]+ replayed.*bf16 autocast runs kernels that are not MKL's"):
        fit(dataclasses.replace(cfg, steps=6, threads=2), tmp_path / "run", resume=True, progress=False)
    assert [f for f in _listing(tmp_path / "run") if f[0] != "run.lock"] == before  # refused, nothing written


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on a GPU machine the check itself runs")
def test_gpu_check_without_cuda_says_why_and_fails():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py")], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1 and "no CUDA device" in r.stdout and len(r.stdout.splitlines()) == 1, r.stdout + r.stderr
