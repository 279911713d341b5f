"""Table deltas (issue 15 item 3): a checkpoint writes only the n-gram rows touched since the previous one, chained by
id to zero tables (a fresh run) or to a tables file compacted every FULL_EVERY checkpoints. A resume from any
checkpoint of the chain is the same run and writes the same tables files; rotation keeps every file a kept checkpoint
reads; a torn or missing delta is skipped loudly and the checkpoint before it used; a delta applied to another base is
refused by its digest; `dormouse inspect` lists the chain."""

import dataclasses, shutil

import pytest
import torch

from dormouse.checkpoints import list_ckpts, table_chain
from dormouse.cli import main
from dormouse.commit import FULL_EVERY
from dormouse.container_format import CheckpointError
from dormouse.ngram import NgramTables
from dormouse.rng import keyed_randint
from dormouse.rundir import RunPaths
from dormouse.tables_file import save_tables_file, TablesError
from dormouse.deltas import load_chain, save_delta, tables_id
from dormouse.testing import assert_same_run, stopped_at, tiny_cfg
from dormouse.train import fit

# ten checkpoints: a chain and more; tables of 2 x 8192 slots, so that FULL_EVERY (not the bytes) ends a chain
CFG = tiny_cfg(steps=30, ckpt_every=3, log_every=3, eval=False, keep_ckpts=100,
               model=dataclasses.replace(tiny_cfg().model, ngram_slots=8192))


def kinds(run) -> dict:
    "{step: 'ngram' | 'ngdelta'} of a run's tables files."
    return {int(p.stem.split("_")[1]): p.suffix[1:] for p in RunPaths(run).ckpt_dir.iterdir() if p.suffix != ".dmck"}


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    run = tmp_path_factory.mktemp("deltas") / "ref"
    fit(CFG, run, progress=False)
    return run


def test_deltas_on_zero_tables_then_a_compacted_full_sidecar(ref):
    want = {s: "ngdelta" for s in range(3, 22, 3)} | {24: "ngram", 27: "ngdelta", 30: "ngdelta"}
    assert kinds(ref) == want
    assert FULL_EVERY == 8  # the docs' diagram and this table assume it
    chains = {s: len(table_chain(p.with_suffix(f".{want[s]}"))) for s, p in list_ckpts(RunPaths(ref).ckpt_dir)}
    assert max(chains.values()) == FULL_EVERY - 1 and chains[24] == 1 and chains[30] == 3, chains  # compaction


@pytest.mark.parametrize("step", [12, 21, 24, 27])
def test_a_resume_from_any_checkpoint_of_a_chain_is_the_same_run_and_writes_the_same_tables_files(ref, tmp_path, step):
    run = stopped_at(ref, tmp_path / "run", step)
    fit(CFG, run, resume=True, progress=False)
    assert_same_run(ref, run)
    assert kinds(run) == kinds(ref)  # the resumed segment continues the chain on disk
    for p in RunPaths(ref).ckpt_dir.iterdir():  # the same rows, the same bases: the same bytes
        if p.suffix != ".dmck" and int(p.stem.split("_")[1]) > step:
            assert (RunPaths(run).ckpt_dir / p.name).read_bytes() == p.read_bytes(), p.name


def test_rotation_keeps_every_file_a_kept_checkpoint_reads(ref, tmp_path):
    run = tmp_path / "run"
    fit(dataclasses.replace(CFG, steps=21, keep_ckpts=1), run, progress=False)
    names = sorted(p.name for p in RunPaths(run).ckpt_dir.iterdir())
    assert names == sorted(["step_000021.dmck"] + [f"step_{s:06d}.ngdelta" for s in range(3, 22, 3)])
    fit(dataclasses.replace(CFG, keep_ckpts=1), run, resume=True, progress=False)
    assert sorted(p.name for p in RunPaths(run).ckpt_dir.iterdir()) == ["step_000024.ngram", "step_000027.ngdelta",
                                                                        "step_000030.dmck", "step_000030.ngdelta"]
    assert_same_run(ref, run)


@pytest.mark.parametrize("damage, resumed_at", [("torn", 18), ("missing", 18), ("base_missing", 9)])
def test_a_torn_or_missing_delta_is_skipped_loudly_and_the_run_is_the_same(ref, tmp_path, capsys, damage, resumed_at):
    run = stopped_at(ref, tmp_path / "run", 21)
    d = RunPaths(run).ckpt_dir
    if damage == "torn":
        p = d / "step_000021.ngdelta"
        p.write_bytes(p.read_bytes()[:-5])
    elif damage == "missing":
        (d / "step_000021.ngdelta").unlink()
    else:  # a delta in the middle of the chain: every checkpoint from 12 on reads it
        (d / "step_000012.ngdelta").unlink()
    capsys.readouterr()
    fit(CFG, run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert "WARNING: skipping step_000021.dmck" in out and f"at step {resumed_at} from" in out, out
    if damage == "base_missing":
        assert "step_000012.ngram/.ngdelta (train_step 12) is missing" in out, out
    assert_same_run(ref, run)


def test_a_chain_is_compacted_before_its_deltas_outweigh_a_full_sidecar(tmp_path):
    run = tmp_path / "small"  # tables of 2 x 1024 slots: a few deltas weigh half the tables
    fit(dataclasses.replace(CFG, model=tiny_cfg().model), run, progress=False)
    k, whole = kinds(run), 8 * 2 * 1024 * 16
    assert "ngram" in [k[s] for s in sorted(k)][:FULL_EVERY - 1], k  # compacted before FULL_EVERY
    for s, p in list_ckpts(RunPaths(run).ckpt_dir):
        chain = table_chain(p.with_suffix(f".{k[s]}"))
        assert sum(q.stat().st_size for q in chain if q.suffix == ".ngdelta") < whole // 2 + 1024, (s, chain)


def test_another_runs_delta_pair_is_refused_not_skipped(ref, tmp_path):
    "Its delta cannot load here (its base is the other run's file), but the container's pin is checked first."
    other = tmp_path / "other"
    fit(dataclasses.replace(CFG, steps=21, seed=2), other, progress=False)
    run = stopped_at(ref, tmp_path / "run", 18)
    for p in RunPaths(other).ckpt_dir.glob("step_000021.*"):
        shutil.copy(p, RunPaths(run).ckpt_dir)
    assert (RunPaths(run).ckpt_dir / "step_000021.ngdelta").exists()
    with pytest.raises(CheckpointError, match="another run") as e:
        fit(CFG, run, resume=True, progress=False)
    assert "seed (2 there, 1 here)" in str(e.value) and "step_000021.dmck" in str(e.value), str(e.value)


def _stepped(tables, seed, n):
    "n keyed steps of `tables`."
    for s in range(n):
        x = torch.from_numpy(keyed_randint(seed, s, 7, 0, 255, 64).reshape(4, 16).astype("int64"))
        (tables.lookup(x) - 1.0).square().sum().backward()
        tables.step()


def test_a_delta_applied_to_another_base_is_refused_by_its_digest(tmp_path):
    base, other = NgramTables([2, 3], 256, 4), NgramTables([2, 3], 256, 4)
    _stepped(base, 1, 3)
    _stepped(other, 2, 3)
    full = save_tables_file(tmp_path / "step_000003.ngram", base, 3)
    base.take_touched()
    _stepped(base, 3, 2)
    delta = base.delta(base.take_touched())
    good = save_delta(tmp_path / "step_000005.ngdelta", delta, 5, tables_id(full))
    tables, step, _ = load_chain([full, good])
    assert torch.equal(tables.weight, base.weight) and torch.equal(tables.momentum, base.momentum) and step == 5
    # another base with the same steps, and a delta that names it: every header check passes, the digest cannot
    wrong = save_tables_file(tmp_path / "other.ngram", other, 3)
    forged = save_delta(tmp_path / "forged.ngdelta", delta, 5, tables_id(wrong))
    with pytest.raises(TablesError, match="not a delta of that base"):
        load_chain([wrong, forged])
    with pytest.raises(TablesError, match="a delta of another file"):
        load_chain([wrong, good])


def test_inspect_lists_the_chain(ref, capsys):
    rc = main(["inspect", str(RunPaths(ref).ckpt_dir / "step_000012.dmck")])
    out = capsys.readouterr().out
    assert rc == 0, out
    chain = out.split("oldest first):\n")[1].splitlines()[:5]
    assert [ln.split()[0] for ln in chain] == ["(zero", "step_000003.ngdelta", "step_000006.ngdelta",
                                               "step_000009.ngdelta", "step_000012.ngdelta"], out
