"""Issue 39: the proof cannot be fooled. Every resume replays the first steps of its checkpoint's interval before it
trusts it, whatever the environment record says (an SDPA switch flipped in a notebook cell is caught); the kit's own
code is environment (an edited exported module is refused naming the step, a comment-only edit resumes, verified);
and `dormouse verify` proves the curve a reader sees (an edited row fails, resealed or not)."""

import dataclasses, json, os, subprocess, sys, textwrap
from pathlib import Path

import pytest
import torch

from dormouse.cli import main
from dormouse.config import ConfigError
from dormouse.container import load_ckpt
from dormouse.evidence import seal
from dormouse.checkpoints import save_run_ckpt
from dormouse.kit import kit_code
from dormouse.numerics import EnvDriftError, numeric_env
from dormouse.parts import build_parts, to_run_state
from dormouse.precompute import precompute_jepa_targets
from dormouse.rundir import RunPaths, read_jsonl, read_lineage
from dormouse.testing import assert_same_run, dormouse_cli, rewrite_ckpt, source_copy, stopped_at, tiny_cfg
from dormouse.train import fit
from dormouse.verify import verify

from conftest import REF_CFG as CFG


def _listing(run):
    return sorted((str(p.relative_to(run)), p.stat().st_size) for p in Path(run).rglob("*") if p.name != "run.lock")


# 1. every resume replays before it trusts


def test_every_resume_replays_the_first_steps_of_its_interval_and_lineage_says_which(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)
    fit(CFG, run, resume=True, progress=False, verify_steps=4)
    seg = read_lineage(run)[-1]
    assert seg["replayed"] == {"from_step": 10, "to_step": 14, "interval": [10, 20], "losses": 4, "fingerprints": 1}
    assert seg["unverified"] is None and seg["env_verified"] is None and not seg["env_waived"]
    assert_same_run(ref, run)


def test_a_changed_record_still_replays_the_whole_interval(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)
    fit(dataclasses.replace(CFG, threads=2), run, resume=True, progress=False, verify_steps=4)
    assert read_lineage(run)[-1]["env_verified"] == {"from_step": 10, "to_step": 20, "interval": [10, 20], "losses": 10,
                                                     "fingerprints": 3, "keys": ["threads"]}


def test_a_resume_after_flipping_an_sdpa_switch_is_refused_naming_the_step(ref, tmp_path):
    """What a notebook cell does: `torch.backends.cuda.enable_flash_sdp(False)` also steers which CPU kernel
    scaled_dot_product_attention picks, and no key of the environment record sees it. The replay does."""
    run = stopped_at(ref, tmp_path / "run", 20)
    before = _listing(run)
    was = torch.backends.cuda.flash_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(False)
    try:
        with pytest.raises(EnvDriftError, match=r"(?s)replaying steps 10-19 .*does not reproduce the run: step 1\d: "
                           r".*No key of the environment record differs.*enable_flash_sdp"):
            fit(CFG, run, resume=True, progress=False)
    finally:
        torch.backends.cuda.enable_flash_sdp(was)
    assert _listing(run) == before  # refused before anything was written
    fit(CFG, run, resume=True, progress=False)  # the switch put back: the same run
    assert_same_run(ref, run)


def test_nothing_to_replay_with_the_record_unchanged_resumes_unverified_and_says_so(ref, tmp_path, capsys):
    "(rule: replay before trust) The interval's start rotated away: said in one line, recorded, no waiver needed."
    run = stopped_at(ref, tmp_path / "run", 20)
    for p in RunPaths(run).ckpt_dir.glob("step_000010.*"):
        p.unlink()
    capsys.readouterr()
    fit(CFG, run, resume=True, progress=False)
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("not verified:")]
    assert len(said) == 1 and "step_000010.dmck is no longer in" in said[0], said
    seg = read_lineage(run)[-1]
    assert seg["replayed"] is None and "step_000010.dmck is no longer in" in seg["unverified"]
    assert_same_run(ref, run)


def test_the_waiver_skips_the_replay_and_is_recorded(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 20)
    fit(CFG, run, resume=True, progress=False, allow_env_drift=True)
    seg = read_lineage(run)[-1]
    assert seg["env_waived"] and seg["replayed"] is None and seg["unverified"] == "allow_env_drift"


def test_a_checkpoint_of_another_kit_version_is_replayed_not_trusted(ref, tmp_path):
    "Definitions unchanged, the version string differs: a change like any other, the whole interval replayed."
    run = stopped_at(ref, tmp_path / "run", 20)
    p = RunPaths(run).ckpt_dir / "step_000020.dmck"
    rewrite_ckpt(p, env={**load_ckpt(p).env, "dormouse": "0.0.9"})
    fit(CFG, run, resume=True, progress=False)
    assert read_lineage(run)[-1]["env_verified"] == {"from_step": 10, "to_step": 20, "interval": [10, 20], "losses": 10,
                                                     "fingerprints": 3, "keys": ["dormouse"]}
    run2 = stopped_at(ref, tmp_path / "run2", 20)
    p2 = RunPaths(run2).ckpt_dir / "step_000020.dmck"
    ev = load_ckpt(p2).evidence
    ev["losses"][7] = ev["losses"][7] + 1.0  # the replay is what proves it: a difference at step 17 is found
    rewrite_ckpt(p2, env={**load_ckpt(p2).env, "dormouse": "0.0.9"}, evidence=ev)
    with pytest.raises(EnvDriftError, match=r"(?s)dormouse: '0.0.9' -> .*step 17: loss"):
        fit(CFG, run2, resume=True, progress=False)


def test_a_killed_run_resumed_with_another_log_every_is_the_same_run(ref, tmp_path):
    "log_every is a progress key: the re-trained steps are compared where the run logged them, at its old cadence."
    run = stopped_at(ref, tmp_path / "run", 20)  # rows 20..29 were logged after checkpoint 20, fingerprints at 24, 29
    df = fit(dataclasses.replace(CFG, log_every=3), run, resume=True, progress=False)
    seg = read_lineage(run)[-1]
    assert seg["progress_changes"] == {"log_every": [5, 3]} and seg["overlap_rows"] == 10
    assert df.attrs["overlap_compared"] == 10
    rows = {r["step"]: r for r in read_jsonl(RunPaths(run).metrics)}
    assert rows[24]["fingerprint"] == {r["step"]: r for r in read_jsonl(RunPaths(ref).metrics)}[24]["fingerprint"]
    assert rows[26]["fingerprint"] and not rows[25]["fingerprint"]  # the new cadence (done % 3) and the old one
    assert_same_run(ref, run)


# 2. the kit's own code is environment


def _kit_copy(tmp_path) -> Path:
    "A copy of the kit (its notebooks too, from source), to edit as a user edits a notebook and re-exports it."
    root = tmp_path / "kit"
    assert kit_code(source_copy(root)) == kit_code()
    return root


def _resume_with(kit: Path, run: Path):
    "Resume `run` in a new process that imports the kit copy at `kit`."
    code = textwrap.dedent(f"""
        import dataclasses
        from dormouse.testing import tiny_cfg
        from dormouse.train import fit
        fit(tiny_cfg(steps=30, ckpt_every=10, log_every=5, keep_ckpts=10), {str(run)!r}, resume=True, progress=False)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(kit)}, cwd=kit)


def test_a_kit_edited_in_place_is_refused_naming_the_step_and_a_comment_edit_resumes(ref, tmp_path):
    """Issue 55's repro: an off-by-one edit of the data index in the loop fit runs (`step.run_steps`, which the
    replay runs too), then a resume: refused naming step 10. Issue 39's: the GELU's tanh form in model.py."""
    kit = _kit_copy(tmp_path)
    step, model = kit / "dormouse" / "step.py", kit / "dormouse" / "model.py"
    index, src = step.read_text(), model.read_text()
    assert index.count("probe_batches=pre_batches(cfg), device=device") == 1 and src.count("F.gelu(self.up(x))") == 1
    step.write_text(index.replace("probe_batches=pre_batches(cfg), device=device",
                                  "probe_batches=pre_batches(cfg) + 1, device=device"))
    run = stopped_at(ref, tmp_path / "run", 20)
    before = _listing(run)
    r = _resume_with(kit, run)
    assert r.returncode != 0 and "Replaying steps 10-19 under this environment does not reproduce the run: step 10: " \
        "loss" in r.stderr, r.stdout + r.stderr
    step.write_text(index)
    model.write_text(src.replace("F.gelu(self.up(x))", 'F.gelu(self.up(x), approximate="tanh")'))
    before = _listing(run)
    r = _resume_with(kit, run)
    assert r.returncode != 0 and "EnvDriftError" in r.stderr, r.stdout + r.stderr
    assert "kit_code: " in r.stderr and "Replaying steps 10-19 under this environment does not reproduce the run: " \
        "step 10: loss" in r.stderr, r.stderr
    assert _listing(run) == before
    model.write_text(src.replace("F.gelu(self.up(x)))", "F.gelu(self.up(x)))  # the MLP's nonlinearity"))
    r = _resume_with(kit, run)
    assert r.returncode == 0, r.stdout + r.stderr
    seg = read_lineage(run)[-1]
    assert seg["env_verified"]["keys"] == ["kit_code"] and seg["env_verified"]["to_step"] == 20
    assert_same_run(ref, run)


# 3. verify proves the curve a reader sees


def _verify(*args):
    return dormouse_cli("verify", *args, "--quiet", timeout=300)


@pytest.mark.parametrize("resealed", [False, True], ids=["edited", "edited-and-resealed"])
def test_verify_of_an_edited_row_fails_naming_the_step(ref, tmp_path, resealed):
    run = stopped_at(ref, tmp_path / "run", 30)
    p = RunPaths(run).metrics
    rows = read_jsonl(p)
    for s in (12, 13):  # halve two rows' loss, as a person making a curve look better would
        rows[s]["loss"] = rows[s]["loss"] / 2
        rows[s] = seal(rows[s]) if resealed else rows[s]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _verify(run)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "metrics.jsonl, steps 12, 13: edited: it differs from the evidence" in r.stdout, r.stdout
    assert "3 of 3 interval(s) reproduced bit for bit; DIFFERS" in r.stdout  # the replay alone would have passed


def test_verify_names_missing_and_duplicated_rows_and_says_what_it_covered(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 30)
    p = RunPaths(run).metrics
    rows = read_jsonl(p)
    rows = rows[:5] + rows[6:] + [rows[20]]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = verify(run, progress=False, log=lambda m: None)
    assert got.status == "differs" and got.curve.disagree["missing: the evidence has the step, the curve does not"] \
        == [5] and got.curve.disagree["duplicated: the step is logged twice"] == [20]
    ok = verify(ref, progress=False, log=lambda m: None)
    assert ok.coverage()[:2] == ["replayed: 30 of the run's 30 steps reproduced bit for bit",
                                 "curve: 30 of 30 logged steps compared with the evidence; every one agrees"]
    assert ok.coverage()[2].startswith("columns compared with the evidence: loss, bf16, ce, depth, eval_cold_bpb_d1, ")


def test_verify_of_a_run_with_a_corrupt_newest_checkpoint_exits_non_zero(ref, tmp_path):
    run = stopped_at(ref, tmp_path / "run", 30)
    newest = RunPaths(run).ckpt_dir / "step_000030.dmck"
    blob = bytearray(newest.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    newest.write_bytes(bytes(blob))
    r = _verify(run)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "step_000030.dmck: not verifiable" in r.stdout and "2 of 3 interval(s) reproduced" in r.stdout
    assert "NOT VERIFIED" in r.stdout and "curve: 20 of 30 logged steps" in r.stdout, r.stdout


def test_verify_of_a_run_on_offline_jepa_targets_reproduces_it(tmp_path):
    cfg = tiny_cfg(steps=12, ckpt_every=4, log_every=2, keep_ckpts=10, eval=False, aux=True,
                   jepa_targets=str(tmp_path / "targets"))
    parts = build_parts(cfg)  # offline targets from the init state: a frozen teacher, no EMA teacher in the run
    init = save_run_ckpt(tmp_path / "init", to_run_state(parts, numeric_env(threads=cfg.threads)), parts.tables, keep=1)
    precompute_jepa_targets(cfg, init, cfg.jepa_targets, progress=False)
    fit(cfg, tmp_path / "run", progress=False)
    got = verify(tmp_path / "run", progress=False, log=lambda m: None)
    assert [i.verdict for i in got.intervals] == ["reproduced"] * 3 and got.status == "reproduced"
    assert got.replayed == 12 and got.curve.compared == 12


# 5. one line for every bad input, before output starts


@pytest.mark.parametrize("args,says", [
    (["--threads", "0"], "threads=0"), (["--threads", "-3"], "threads=-3"),
    (["--threads", str((os.cpu_count() or 1) + 1)], "the cores this machine has"),
    (["--device", "tpu"], "is not a torch device"), (["--device", "xla"], "dormouse trains on cpu or cuda"),
] + ([(["--device", "cuda"], "torch sees no CUDA device")] if not torch.cuda.is_available() else []))
def test_verify_bad_arguments_are_one_line_before_any_output(ref, args, says, capsys):
    capsys.readouterr()
    rc = main(["verify", str(ref), "--quiet", *args])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith("dormouse: error: ") and len(err.splitlines()) == 1, (out, err)
    assert says in err, err


@pytest.mark.parametrize("call,says", [
    (lambda run: fit({"steps": 3}, run), "expected a TrainCfg, not dict"),
    (lambda run: fit(None, run), "expected a TrainCfg, not NoneType"),
    (lambda run: fit(tiny_cfg(model={"d_model": 8}), run), "model = {\"d_model\": 8}: expected a table (ModelCfg)"),
    (lambda run: fit(tiny_cfg(), run, device=0), "device=0: use"),
    (lambda run: fit(tiny_cfg(), run, progress="x"), "progress='x'"),
    (lambda run: fit(tiny_cfg(), run, verify_steps="a"), "verify_steps='a': use an integer >= 1"),
    (lambda run: fit(tiny_cfg(), run, verify_steps=0), "verify_steps=0"),
    (lambda run: fit(tiny_cfg(), run, trackers=42), "trackers=42: use \"tensorboard\""),
    (lambda run: fit(tiny_cfg(), run, trackers=""), "trackers='' names no tracker"),
], ids=["dict", "None", "model dict", "device 0", "progress x", "verify_steps a", "verify_steps 0", "trackers 42",
        "trackers empty"])
def test_fit_refuses_each_bad_argument_in_one_line_naming_it(tmp_path, call, says):
    with pytest.raises(ConfigError) as e:
        call(tmp_path / "run")
    assert says in str(e.value), str(e.value)
    assert not (tmp_path / "run").exists()


def test_ctrl_c_while_the_command_imports_is_one_line_and_130(tmp_path):
    "A real SIGINT, sent while Python imports torch for the command: `dormouse: interrupted`, exit 130."
    code = textwrap.dedent("""
        import builtins, os, signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell starts it (a test runner may ignore it)
        real = builtins.__import__
        def importing(name, *a, **kw):
            if name == "torch":
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, delivered at the next bytecode: inside the import
            return real(name, *a, **kw)
        builtins.__import__ = importing
        from dormouse.console import main
        sys.argv = ["dormouse", "inspect", "nothing.dmck"]
        sys.exit(main())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 130 and r.stderr == "dormouse: interrupted\n", (r.returncode, r.stderr)
