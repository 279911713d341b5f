"""Issue 12 item 1: the checkpoint pins the plan and the run. An edited config.toml, another run's checkpoint and a
tables file of another table shape are refused on resume; generate takes the network's shape from the container."""

import dataclasses, shutil

import pytest

from dormouse.checkpoints import load_run_ckpt, plan_sha256
from dormouse.tables_file import save_tables_file
from dormouse.cli import main
from dormouse.config import DriftError, cfg_from_dict, read_snapshot
from dormouse.container import load_ckpt, save_ckpt
from dormouse.container_format import CheckpointError
from dormouse.infer import generate, load_model_weights
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, stopped_at, tiny_cfg
from dormouse.train import fit


def _cfg(**kw):
    return tiny_cfg(steps=20, ckpt_every=10, keep_ckpts=5, eval=False, **kw)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pinned")
    fit(_cfg(), root / "ref", progress=False)
    fit(_cfg(seed=2), root / "seed2", progress=False)
    fit(_cfg(), root / "twin", progress=False)  # the same plan, started again: another run
    m = dataclasses.replace(_cfg().model, ngram_slots=2048)
    fit(_cfg(model=m), root / "slots2048", progress=False)
    return root


def _graft(src_run, dst_run, step):
    "Copy another run's checkpoint pair at `step` into `dst_run`'s ckpt/."
    for suf in (".dmck", ".ngram", ".ngdelta"):  # the container and its tables file, whichever kind it is
        name = f"step_{step:06d}{suf}"
        if (RunPaths(src_run).ckpt_dir / name).exists():
            shutil.copy(RunPaths(src_run).ckpt_dir / name, RunPaths(dst_run).ckpt_dir / name)


def test_container_pins_plan_and_run_and_lineage_first_row_has_the_run_id(runs):
    rows = read_jsonl(RunPaths(runs / "ref").lineage)
    run_id = rows[0]["run_id"]
    for s in (10, 20):
        ck = load_ckpt(RunPaths(runs / "ref").ckpt_dir / f"step_{s:06d}.dmck")
        assert ck.identity["run_id"] == run_id
        assert ck.identity["plan_sha256"] == plan_sha256(cfg_from_dict(read_snapshot(RunPaths(runs / "ref").config)))
        assert "lr = 0.003" in ck.identity["plan"]
    other = read_jsonl(RunPaths(runs / "twin").lineage)[0]["run_id"]
    assert other != run_id


def test_edited_config_toml_is_drift_naming_the_key_and_the_checkpoint(runs, tmp_path, capsys):
    run = stopped_at(runs / "ref", tmp_path / "edited", 10)
    cf = RunPaths(run).config
    cf.write_text(cf.read_text().replace("\nlr = 0.003\n", "\nlr = 0.02\n").replace("\nseed = 1\n", "\nseed = 5\n"))
    rc = main(["train", "--run-dir", str(run), "--resume", "--steps", "20"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "lr: 0.003 -> 0.02" in err and "seed: 1 -> 5" in err and "step_000010.dmck" in err, err
    assert not (RunPaths(run).ckpt_dir / "step_000020.dmck").exists()
    # the Python API with the edited file's plan is refused the same way
    with pytest.raises(DriftError, match="plan pinned in the checkpoint") as e:
        fit(cfg_from_dict(read_snapshot(cf)), run, resume=True, progress=False)
    assert set(e.value.diffs) == {"lr", "seed"}


def test_an_unedited_resume_is_still_the_same_run(runs, tmp_path):
    run = stopped_at(runs / "ref", tmp_path / "plain", 10)
    fit(_cfg(), run, resume=True, progress=False)
    assert_same_run(runs / "ref", run)
    rows = read_jsonl(RunPaths(run).lineage)
    assert rows[-1]["kind"] == "resume" and rows[-1]["run_id"] == rows[0]["run_id"]
    assert load_ckpt(RunPaths(run).ckpt_dir / "step_000020.dmck").identity["run_id"] == rows[0]["run_id"]


@pytest.mark.parametrize("other, says", [("seed2", "seed (2 there, 1 here)"), ("twin", "same plan")])
def test_another_runs_checkpoint_is_refused_naming_what_differs(runs, tmp_path, other, says):
    run = stopped_at(runs / "ref", tmp_path / f"foreign_{other}", 10)
    _graft(runs / other, run, 20)
    with pytest.raises(CheckpointError, match="another run") as e:
        fit(_cfg(), run, resume=True, progress=False)
    assert says in str(e.value) and "step_000020.dmck" in str(e.value), str(e.value)


def test_a_sidecar_of_another_table_shape_is_refused_naming_both_shapes(runs, tmp_path):
    run = stopped_at(runs / "ref", tmp_path / "shape", 10)
    _graft(runs / "slots2048", run, 20)
    with pytest.raises(CheckpointError) as e:
        fit(_cfg(), run, resume=True, progress=False)
    msg = str(e.value)
    # the container's pin is checked before its tables: another run, whose plan names both shapes
    assert "model.ngram_slots (2048 there, 1024 here)" in msg and "step_000020.dmck" in msg, msg


def test_a_sidecar_alone_of_another_shape_is_refused(runs, tmp_path):
    "Only the .ngram replaced (a pre-pin container with no tables id would have accepted it)."
    run = stopped_at(runs / "ref", tmp_path / "shape_sc", 10)
    ck_path = RunPaths(run).ckpt_dir / "step_000010.dmck"
    save_ckpt(ck_path, dataclasses.replace(load_ckpt(ck_path), tables_id=None, identity=None, missing=["x: converted"]))
    other = load_run_ckpt(RunPaths(runs / "slots2048").ckpt_dir / "step_000010.dmck")[1]
    save_tables_file(ck_path.with_suffix(".ngram"), other, 10)  # a pre-pin container pairs with the .ngram beside it
    with pytest.raises(CheckpointError, match="slots=2048.*slots=1024"):
        fit(_cfg(), run, resume=True, progress=False)


def test_generate_takes_the_shape_from_the_container_not_config_toml(runs, tmp_path):
    run = stopped_at(runs / "ref", tmp_path / "gen", 20)
    ck = RunPaths(run).ckpt_dir / "step_000020.dmck"
    want = generate(load_model_weights(ck), "def ", max_bytes=24, seed=3)
    cf = RunPaths(run).config
    cf.write_text(cf.read_text().replace("n_heads = 2", "n_heads = 4").replace("\ndepth = 2\n", "\ndepth = 3\n"))
    m = load_model_weights(ck)
    assert (m.cfg.model.n_heads, m.depth) == (2, 2)
    assert any("model.n_heads" in n and "model.depth" in n for n in m.notes), m.notes
    assert generate(m, "def ", max_bytes=24, seed=3) == want


def test_a_container_without_a_plan_still_loads_and_resumes_against_config_toml(runs, tmp_path, capsys):
    run = stopped_at(runs / "ref", tmp_path / "prepin", 10)
    ck_path = RunPaths(run).ckpt_dir / "step_000010.dmck"
    save_ckpt(ck_path, dataclasses.replace(load_ckpt(ck_path), identity=None))
    assert load_ckpt(ck_path).identity is None
    m = load_model_weights(ck_path)
    assert any("predates plan pinning" in n for n in m.notes), m.notes
    fit(_cfg(), run, resume=True, progress=False)
    assert "predates plan pinning" in capsys.readouterr().out
    assert_same_run(runs / "ref", run)
