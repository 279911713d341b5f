"""Which keys of the plan a resume may change besides the progress flags (issue 23): the checkpoints rotation keeps
may (no step reads them); the corpus path may, when the bytes there are the pinned ones in the run's form (issue 39:
a corpus is its bytes), and a refusal says how to go on."""

import dataclasses, shutil

import pytest

from dormouse.cli import main
from dormouse.config import ConfigError, DriftError, cfg_from_dict, cfg_to_dict, check_drift, diff_keys, read_snapshot
from dormouse.corpus_cache import build_dir_corpus
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, tiny_cfg
from dormouse.train import fit


def test_keep_ckpts_may_change_on_a_resume_and_the_run_is_the_same(tmp_path):
    cfg = tiny_cfg(steps=20, ckpt_every=5, keep_ckpts=3, eval=False)
    fit(cfg, tmp_path / "ref", progress=False)
    fit(dataclasses.replace(cfg, steps=10), tmp_path / "r", progress=False)
    fit(dataclasses.replace(cfg, keep_ckpts=1), tmp_path / "r", resume=True, progress=False)
    assert len(RunPaths(tmp_path / "r").checkpoints()) == 1  # the new count is what rotation keeps now
    assert_same_run(tmp_path / "ref", tmp_path / "r")


def _corpus(path):
    "A small corpus file: this test's source and some bytes (enough for tiny_cfg's splits)."
    shutil.copyfile(__file__, path)
    with open(path, "ab") as f:
        f.write(bytes(range(256)) * 64)
    return path


def test_a_run_moved_with_its_corpus_resumes_and_verifies_with_data(tmp_path, capsys):
    "Issue 39: a corpus is its bytes (data_sha256), not its path: the same bytes at a new path resume and verify."
    src = _corpus(tmp_path / "corpus.bin")
    cfg = tiny_cfg(steps=10, ckpt_every=5, eval=False, data=str(src))
    fit(cfg, tmp_path / "ref", progress=False)
    fit(dataclasses.replace(cfg, steps=5), tmp_path / "r", progress=False)
    there = tmp_path / "other-machine"  # the run and its corpus, moved together
    there.mkdir()
    shutil.move(tmp_path / "r", there / "r")
    moved = src.rename(there / "corpus.bin")
    assert main(["train", "--run-dir", str(there / "r"), "--resume", "--steps", "10", "--data", str(moved),
                 "--quiet"]) == 0
    assert read_jsonl(RunPaths(there / "r").lineage)[-1]["data"] == str(moved)  # the path this segment used
    assert_same_run(tmp_path / "ref", there / "r")
    capsys.readouterr()
    assert main(["verify", str(there / "r"), "--quiet"]) == 3  # the first checkpoint pins the old path
    assert "--data" in capsys.readouterr().out
    assert main(["verify", str(there / "r"), "--data", str(moved), "--quiet"]) == 0
    assert "2 of 2 interval(s) reproduced bit for bit; verified" in capsys.readouterr().out


def test_other_bytes_at_any_path_are_refused_and_an_older_plan_names_its_path(tmp_path):
    src = _corpus(tmp_path / "corpus.bin")
    cfg = tiny_cfg(steps=10, ckpt_every=5, eval=False, data=str(src))
    fit(dataclasses.replace(cfg, steps=5), tmp_path / "r", progress=False)
    other = tmp_path / "other.bin"
    other.write_bytes(src.read_bytes()[::-1])
    before = RunPaths(tmp_path / "r").lineage.read_bytes()
    with pytest.raises(ConfigError, match="the corpus changed"):  # the pinned hash, checked where the bytes are
        fit(dataclasses.replace(read_plan(tmp_path / "r"), data=str(other)), tmp_path / "r", resume=True,
            progress=False)
    with pytest.raises(DriftError, match="data_sha256"):  # a plan that does not pin it: both keys named
        fit(dataclasses.replace(cfg, data=str(other)), tmp_path / "r", resume=True, progress=False)
    assert RunPaths(tmp_path / "r").lineage.read_bytes() == before  # refused before anything was written
    unpinned = {k: v for k, v in cfg_to_dict(read_plan(tmp_path / "r")).items()}
    unpinned["data_sha256"] = ""
    assert list(diff_keys(unpinned, dataclasses.replace(cfg, data=str(other), data_sha256=""))) == ["data"]
    with pytest.raises(DriftError, match="put it back there, or link it there"):
        check_drift(unpinned, dataclasses.replace(cfg, data=str(other), data_sha256=""))


def test_the_same_bytes_in_another_form_are_refused(tmp_path):
    "A directory splits by whole files, a file at its tail: a directory's build given as a file is not the corpus."
    d = tmp_path / "corpus"
    d.mkdir()
    for i in range(4):
        _corpus(d / f"part{i}.py")
    cfg = tiny_cfg(steps=10, ckpt_every=5, eval=False, data=str(d), holdout_frac=0.25)
    fit(dataclasses.replace(cfg, steps=5), tmp_path / "r", progress=False)
    build, _ = build_dir_corpus(d, "", 0.25)  # the directory's bytes, laid out in one file: the same sha256
    flat = shutil.copyfile(build, tmp_path / "flat.bin")
    with pytest.raises(ConfigError, match="as a single file, but the run read them as a directory"):
        fit(dataclasses.replace(read_plan(tmp_path / "r"), data=str(flat)), tmp_path / "r", resume=True,
            progress=False)


def read_plan(run):
    "The plan a run's snapshot holds (its corpus hash pinned)."
    return cfg_from_dict(read_snapshot(RunPaths(run).config))


def test_an_older_kits_none_precisions_are_not_environment_drift():
    "Issue 23: a record whose fp32 precisions say 'none' (an older kit's raw value) means 'ieee', not drift."
    from dormouse.numerics import CPU_FP32_KEYS, env_diff, numeric_env

    now = numeric_env(1, "cpu", 1)
    assert env_diff({**now, **{k: "none" for k in CPU_FP32_KEYS}}, now) == {}
    assert "fp32_precision" in env_diff({**now, "fp32_precision": "tf32"}, now)  # one that acts differently is drift
