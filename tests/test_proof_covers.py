"""Issue 55: the proof covers every number a reader sees. Every column of a metrics row (eval figures included) is
evidence, replayed and compared by `dormouse verify`; the kit's code is every module of the package (and its
notebooks' exported cells), a function replaced in the process included; the replay before trust is a prefix that
says so, and `verify_steps="all"` replays the whole interval; a moved corpus that is not there, or is other bytes, is
refused in one line before anything is replayed."""

import json, shutil
from pathlib import Path

import pytest

import dormouse
import dormouse.step
from dormouse.cli import main
from dormouse.container import load_ckpt
from dormouse.evidence import Evidence, seal
from dormouse.kit import kit_code, kit_notebooks, kit_replaced
from dormouse.numerics import EnvDriftError
from dormouse.rundir import RunPaths, read_jsonl, read_lineage
from dormouse.testing import assert_same_run, rewrite_ckpt, source_copy, stopped_at, tiny_cfg
from dormouse.train import fit
from dormouse.verify import verify

from conftest import REF_CFG as CFG


def _listing(run):
    return sorted((str(p.relative_to(run)), p.stat().st_size) for p in Path(run).rglob("*") if p.name != "run.lock")


# 1. every column is evidence


def test_verify_names_each_column_edited_and_resealed_and_the_replay_compares_eval_figures(ref, tmp_path):
    """A reader's numbers, each edited in one row and resealed (as a person making a curve look better would): verify
    names each by column and step. The evidence's eval figure at step 19 edited in its checkpoint: the replay, which
    evaluates where the run did, names it too."""
    run = stopped_at(ref, tmp_path / "run", 30)
    p = RunPaths(run).metrics
    rows = read_jsonl(p)
    edits = {2: ("ce", 0.5), 3: ("jepa", 1.0), 4: ("grad_norm", 0.25), 5: ("lr", 0.0), 6: ("depth", 3),
             7: ("quant", "int8"), 8: ("refused", True), 9: ("eval_cold_d1", 1.0), 11: ("latch", True),
             19: ("eval_cold_bpb_d2", 1.0), 22: ("loss", 1.0), 24: ("fingerprint", "0" * 16), 26: ("bf16", True)}
    for step, (key, value) in edits.items():
        assert key in rows[step] and rows[step][key] != value, (step, key)
        rows[step] = seal({**rows[step], key: value})
    rows[13] = seal({**rows[13], "eval_cold_d1": 1.0})  # an eval figure where the run did not evaluate
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ck = RunPaths(run).ckpt_dir / "step_000020.dmck"
    ev = load_ckpt(ck).evidence
    ev["columns"]["eval_cold_d2"][9] = ev["columns"]["eval_cold_d2"][9] / 2  # step 19's, in the evidence itself
    rewrite_ckpt(ck, evidence=ev)
    got = verify(run, progress=False, log=lambda m: None)
    named = {k.removeprefix("edited: it differs from the evidence in "): v for k, v in got.curve.disagree.items() if v}
    assert named == {key: [step] for step, (key, _) in edits.items()} | {"eval_cold_d1": [9, 13],
                                                                          "eval_cold_d2": [19]}, named
    assert [i.verdict for i in got.intervals] == ["reproduced", "differs", "reproduced"], got.intervals
    assert got.intervals[1].detail.startswith("DIFFERS: step 19: eval_cold_d2 "), got.intervals[1].detail
    assert "columns compared with the evidence: loss, bf16, ce, depth, eval_cold_bpb_d1" in "\n".join(got.coverage())


def test_every_column_of_a_logged_row_is_in_its_checkpoints_evidence(ref):
    rows = read_jsonl(RunPaths(ref).metrics)
    for p in RunPaths(ref).checkpoints():
        ev = Evidence.from_json(load_ckpt(p).evidence)
        for s in range(ev.start, ev.end):
            logged = {k: v for k, v in rows[s].items() if k not in ("step", "segment", "t", "check") and v is not None}
            assert ev.row(s) == logged, s


# 2. the whole kit is code


def test_an_edit_of_any_module_of_the_package_or_an_exported_cell_changes_the_code_hash(tmp_path):
    kit = source_copy(tmp_path / "src")
    assert kit_code(kit) == kit_code()
    modules = sorted(kit.glob("*.py"))
    assert {"numerics.py", "step.py", "train.py", "replay.py", "model.py", "verify.py"} <= {p.name for p in modules}
    for p in modules:  # an in-place edit of each, as a re-export after a notebook edit makes it
        text = p.read_bytes()
        p.write_bytes(text + b"\n# edited\n")
        assert kit_code(kit) != kit_code(), p.name
        p.write_bytes(text)
    assert kit_code(kit) == kit_code()
    for nb in [nb for nb in kit_notebooks(kit) if nb.stem in ("13_numerics", "38_step", "44_train")]:
        text = nb.read_text()  # installed from source: an exported cell edited in the notebook that exports it
        cells = json.loads(text)
        cell = next(c for c in cells["cells"] if "".join(c["source"]).startswith("#| export"))
        cell["source"] = ["#| export\n", "# edited\n"] + cell["source"][1:]
        nb.write_text(json.dumps(cells))
        assert kit_code(kit) != kit_code(), nb.name
        nb.write_text(text)
    assert kit_code(kit) == kit_code()


def test_a_kit_function_replaced_in_the_process_is_a_change_of_code_replayed_in_full(ref, tmp_path):
    """What a notebook cell does: `dormouse.step.lr_at` replaced by one that differs only at step 17, past the first
    steps a resume replays by default. It is a change of the kit's code, so the whole interval is replayed: refused,
    naming step 17 and the function, before anything is written; put back, the same run."""
    run = stopped_at(ref, tmp_path / "run", 20)
    before = _listing(run)
    orig = dormouse.step.lr_at
    dormouse.step.lr_at = lambda cfg, step: orig(cfg, step) * (1.5 if step == 17 else 1.0)
    try:
        assert kit_replaced() == ["dormouse.step.lr_at"]
        with pytest.raises(EnvDriftError, match=r"(?s)kit_replaced: \[\] -> \['dormouse.step.lr_at'\].*Replaying "
                                                r"steps 10-19 .*step 17: lr "):
            fit(CFG, run, resume=True, progress=False, verify_steps=4)
    finally:
        dormouse.step.lr_at = orig
    assert kit_replaced() == [] and _listing(run) == before
    fit(CFG, run, resume=True, progress=False, verify_steps=4)
    assert_same_run(ref, run)


# 3. the replay before trust is a prefix, and says so; "all" replays the whole interval


def test_the_default_replay_is_a_prefix_that_says_so_and_all_replays_the_whole_interval(ref, tmp_path, capsys):
    """The checkpoint's evidence for step 17 edited: a prefix of 4 steps does not reach it, and the resume says which
    steps it left out; verify_steps="all" (--verify-steps all) replays the interval and refuses naming step 17."""
    run = stopped_at(ref, tmp_path / "run", 20)
    p = RunPaths(run).ckpt_dir / "step_000020.dmck"
    ev = load_ckpt(p).evidence
    ev["losses"][7] = ev["losses"][7] + 1.0
    rewrite_ckpt(p, evidence=ev)
    other = stopped_at(run, tmp_path / "other", 20)
    before = _listing(other)
    with pytest.raises(EnvDriftError, match=r"replaying steps 10-19 \(the interval step_000020.dmck ends\) does not "
                                            r"reproduce the run: step 17: loss"):
        fit(CFG, other, resume=True, progress=False, verify_steps="all")
    assert _listing(other) == before
    capsys.readouterr()
    fit(CFG, run, resume=True, progress=False, verify_steps=4)  # the prefix does not reach step 17: it says so
    out = capsys.readouterr().out
    assert "replaying steps 10-13 in memory (the first 4 of the interval's 10) before trusting step_000020.dmck" in out
    assert "steps 14-19 not replayed (verify_steps=\"all\", --verify-steps all, replays them; dormouse verify proves " \
           "every kept interval)" in out, out
    assert read_lineage(run)[-1]["replayed"] == {"from_step": 10, "to_step": 14, "interval": [10, 20], "losses": 4,
                                                 "fingerprints": 1}
    r = main(["verify", str(run), "--quiet", "--interval", "20"])  # the whole proof finds it
    assert r == 1 and "steps 10-19: DIFFERS: step 17: loss" in capsys.readouterr().out


# 4. a moved corpus: not there, or other bytes, refused in one line before any replay


@pytest.fixture(scope="module")
def on_a_file(tmp_path_factory):
    "A tiny run on a corpus file of its own (4 steps, a checkpoint every 2)."
    root = tmp_path_factory.mktemp("moved")
    corpus = root / "corpus.txt"
    corpus.write_bytes(b"".join(p.read_bytes() for p in sorted(Path(dormouse.__file__).parent.glob("*.py"))))
    fit(tiny_cfg(steps=4, ckpt_every=2, log_every=2, eval=False, data=str(corpus)), root / "run", progress=False)
    return root


def test_verify_data_that_is_not_there_or_other_bytes_is_refused_in_one_line(on_a_file, capsys):
    run, corpus = on_a_file / "run", on_a_file / "corpus.txt"
    tail = on_a_file / "tail.txt"  # the corpus with its held-out tail changed: another corpus
    tail.write_bytes(corpus.read_bytes()[:-10] + b"0123456789")
    capsys.readouterr()
    for data, says in [(on_a_file / "nowhere.txt", f"data='{on_a_file / 'nowhere.txt'}': no such file or directory"),
                       (tail, f"data='{tail}' is not the run's corpus: data_sha256 in the plan")]:
        assert main(["verify", str(run), "--quiet", "--data", str(data)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"dormouse: error: {says}"), (out, err)
    moved = on_a_file / "moved.txt"
    shutil.copy(corpus, moved)  # the same bytes elsewhere: the run's corpus, verified
    assert main(["verify", str(run), "--quiet", "--data", str(moved)]) == 0, capsys.readouterr()
