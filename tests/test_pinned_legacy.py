"""Legacy (v1/v2) runs resume. Without a tables file when the plan has no n-gram tables; with a tables file
only when its table step equals the container's step, said loudly and recorded in lineage.jsonl. The legacy list
names what this plan needs and the container lacks."""

import dataclasses, shutil

import pytest

from dormouse.checkpoints import load_run_ckpt
from dormouse.container import load_ckpt
from dormouse.container_format import CheckpointError
from dormouse.testing import write_v1, write_v2
from dormouse.tables_file import load_tables_file, save_tables_file
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, tiny_cfg
from dormouse.train import fit


def _cfg(orders=(2, 3), **kw):
    c = tiny_cfg(steps=20, ckpt_every=10, keep_ckpts=5, eval=False, **kw)
    return dataclasses.replace(c, model=dataclasses.replace(c.model, ngram_orders=list(orders)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("legacy")
    fit(_cfg(orders=()), root / "notables", progress=False)
    fit(_cfg(), root / "tables", progress=False)
    return root


def _legacy_at(src, dst, step, version, with_tables: bool):
    "A copy of `src` stopped after checkpoint `step`, rewritten as an old dormouse wrote it: v1/v2 + a tables file."
    shutil.copytree(src, dst)
    d = RunPaths(dst).ckpt_dir
    p = d / f"step_{step:06d}.dmck"
    tables = load_run_ckpt(p)[1]  # whatever chain of table deltas the run wrote
    for q in d.iterdir():
        if int(q.stem.split("_")[1]) != step or q.suffix != ".dmck":
            q.unlink()
    (write_v1 if version == 1 else write_v2)(p, load_ckpt(p))
    if with_tables:
        save_tables_file(p.with_suffix(".ngram"), tables, step)
    return p


@pytest.mark.parametrize("version", [1, 2])
def test_legacy_container_resumes_without_a_sidecar_when_the_plan_has_no_tables(runs, tmp_path, capsys, version):
    run = tmp_path / f"v{version}"
    _legacy_at(runs / "notables", run, 10, version, with_tables=False)
    fit(_cfg(orders=()), run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert f"LEGACY checkpoint (v{version})" in out and "resumed" in out, out
    # what this plan (fp32, no aux, no stress) needs and the container lacks: the environment record only
    assert "numeric environment" in out
    assert "EMA teacher" not in out and "stress monitor" not in out and "fallback latch" not in out, out
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["kind"] == "resume" and [m.split(":")[0] for m in seg["legacy_missing"]] == ["numeric environment"]
    assert_same_run(runs / "notables", run)  # nothing this plan needs was lost: bitwise the uninterrupted run


@pytest.mark.parametrize("version", [1, 2])
def test_legacy_container_with_a_sidecar_of_its_step_resumes_loudly(runs, tmp_path, capsys, version):
    run = tmp_path / f"sc{version}"
    _legacy_at(runs / "tables", run, 10, version, with_tables=True)
    fit(_cfg(), run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert "n-gram tables id" in out and "table step equals the container's step (10)" in out, out
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert any(m.startswith("n-gram tables id") for m in seg["legacy_missing"]), seg
    assert_same_run(runs / "tables", run)


def test_legacy_sidecar_whose_table_step_is_not_the_containers_step_is_refused(runs, tmp_path):
    run = tmp_path / "badstep"
    p = _legacy_at(runs / "tables", run, 10, 2, with_tables=True)
    tables, train_step, _ = load_tables_file(p.with_suffix(".ngram"))
    tables.table_step = 9
    save_tables_file(p.with_suffix(".ngram"), tables, train_step)
    with pytest.raises(CheckpointError, match="table_step 9.*equals the container's step \\(10\\)"):
        fit(_cfg(), run, resume=True, progress=False)


def test_missing_sidecar_of_a_v1_container_does_not_claim_it_was_written_with_one(runs, tmp_path):
    run = tmp_path / "nosc"
    _legacy_at(runs / "tables", run, 10, 1, with_tables=False)
    with pytest.raises(CheckpointError) as e:
        fit(_cfg(), run, resume=True, progress=False)
    msg = str(e.value)
    assert "written with one" not in msg and "records no n-gram tables" in msg, msg
