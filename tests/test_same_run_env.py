"""Issue 12 item 2: the numeric environment is complete. Every setting that changes bits is recorded by name, and a
resume under another value is verified by replay (issue 22) and recorded in lineage.jsonl naming it (or refused where
the replay differs); an older record without the new keys still resumes, and lineage says which keys it could not
check."""

import dataclasses, os, shutil, subprocess
from pathlib import Path

import pytest

from dormouse.container import load_ckpt, save_ckpt
from dormouse.numerics import numeric_env
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import train_cmd, assert_same_run, tiny_cfg
from dormouse.train import fit

VARS = (
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KMP_DETERMINISTIC_REDUCTION",
)
CFG = tiny_cfg(steps=20, ckpt_every=10, keep_ckpts=10)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    "An uninterrupted run, made with none of the library variables set."
    root = tmp_path_factory.mktemp("env")
    with pytest.MonkeyPatch.context() as mp:
        for k in VARS:
            mp.delenv(k, raising=False)
        fit(CFG, root / "ref", progress=False)
    return root / "ref"


def _at_10(ref, dst):
    "A copy of the reference run as if it had stopped after its step-10 checkpoint."
    shutil.copytree(ref, dst)
    for p in RunPaths(dst).ckpt_dir.glob("step_000020.*"):  # the container and its tables file (a delta)
        p.unlink()
    return dst


def test_the_record_names_every_setting_that_changes_bits():
    env = numeric_env(1)
    need = {
        "torch",
        "torch_git",
        "torch_config",
        "threads",
        "cpu_model",
        "cpu_flags",
        "cpu_capability",
        "device",
        "world_size",
        "deterministic",
        "float32_matmul_precision",
        "default_dtype",
        *VARS,
    }
    assert need <= set(env), sorted(need - set(env))
    info = Path("/proc/cpuinfo")
    if info.exists() and "model name" in info.read_text():
        model = next(ln for ln in info.read_text().splitlines() if ln.startswith("model name"))
        assert env["cpu_model"] == model.split(":", 1)[1].strip()
    for k in VARS:
        assert env[k] == os.environ.get(k), k


@pytest.mark.parametrize("var,value", [("MKL_CBWR", "COMPATIBLE"), ("ONEDNN_MAX_CPU_ISA", "AVX2")])
def test_a_library_variable_set_on_resume_is_named_and_verified(ref, tmp_path, monkeypatch, var, value):
    "Set inside the process, after MKL and oneDNN have read theirs, it changes nothing: the replay shows it."
    run = _at_10(ref, tmp_path / "run")
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(var, value)
    fit(CFG, run, resume=True, progress=False)
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["kind"] == "resume" and seg["env_drift"] == {var: [None, value]}, seg["env_drift"]
    assert seg["env_verified"]["keys"] == [var]
    assert_same_run(ref, run)


def test_a_process_started_under_a_lowered_isa_is_refused(ref, tmp_path):
    "The real thing: the variable is in the environment the process starts with, as MKL and oneDNN read it."
    run = _at_10(ref, tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    env.update(ONEDNN_MAX_CPU_ISA="AVX2", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    cmd = train_cmd(RunPaths(run).config, run, "--resume")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "ONEDNN_MAX_CPU_ISA: None -> 'AVX2'" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_an_older_record_resumes_and_lineage_names_what_it_could_not_check(ref, tmp_path):
    run = _at_10(ref, tmp_path / "run")
    p = RunPaths(run).ckpt_dir / "step_000010.dmck"
    ck = load_ckpt(p)
    old_keys = (
        "torch",
        "threads",
        "cpu_capability",
        "device",
        "world_size",
        "default_dtype",
        "float32_matmul_precision",
        "deterministic",
    )
    ck.env = {**{k: ck.env[k] for k in old_keys}, "bf16_autocast": False, "quant": "fp32"}  # as written before
    save_ckpt(p, ck)
    fit(CFG, run, resume=True, progress=False)
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["kind"] == "resume" and seg["env_drift"] == {}
    assert {"MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "cpu_model", "torch_git"} <= set(seg["env_unrecorded"])
    assert not set(old_keys) & set(seg["env_unrecorded"])
    assert_same_run(ref, run)
    p20 = RunPaths(run).ckpt_dir / "step_000020.dmck"  # the newest, now
    ck = load_ckpt(p20)
    ck.env = {**{k: ck.env[k] for k in old_keys}, "threads": 3}  # a key both records have is still compared
    save_ckpt(p20, ck)
    fit(dataclasses.replace(CFG, steps=24), run, resume=True, progress=False)  # verified: steps 10-19 replayed
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["env_drift"] == {"threads": [3, 1]} and seg["env_verified"]["keys"] == ["threads"]


def test_threads_changed_on_resume_is_environment_drift(ref, tmp_path):
    run = _at_10(ref, tmp_path / "run")
    two = dataclasses.replace(CFG, threads=2)
    fit(two, run, resume=True, allow_env_drift=True, progress=False)  # waived: no replay, recorded
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["kind"] == "resume" and seg["env_drift"]["threads"] == [1, 2]
    assert seg["env"]["threads"] == 2 and seg["env_waived"] and seg["env_verified"] is None
