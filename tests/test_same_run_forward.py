"""Issue 12 item 4: the log reads the model. The rows' quant/bf16 columns, the environment's forward entry and the
state fingerprint come from what each FactorLinear actually runs; a load re-applies the forward, and the
fingerprint covers the teacher and both models' forward settings."""

import tempfile

import torch

from dormouse.checkpoints import find_latest, save_run_ckpt
from dormouse.data import corpus_for
from dormouse.parts import build_parts, ran_forward, restore, state_fingerprint, to_run_state
from dormouse.quant import FactorLinear, forward_formats, set_quant_all
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.step import run_probes, train_step
from dormouse.testing import final_ckpt, tiny_cfg
from dormouse.train import fit


def test_fingerprint_covers_teacher_weights_and_both_forwards():
    cfg = tiny_cfg(aux=True)
    base = state_fingerprint(build_parts(cfg))
    changes = {
        "teacher weight": lambda p: next(p.teacher.parameters()).view(-1)[0].add_(1.0),
        "teacher layer format": lambda p: setattr(p.teacher.core.mlp.up, "quant", "int8"),
        "teacher bf16": lambda p: setattr(p.teacher, "bf16", True),
        "student layer format": lambda p: setattr(p.model.head, "quant", "fp8"),
        "student bf16": lambda p: setattr(p.model, "bf16", True),
    }
    for what, change in changes.items():
        p = build_parts(cfg)
        with torch.no_grad():
            change(p)
        assert state_fingerprint(p) != base, f"the fingerprint does not see a change of the {what}"


def test_a_load_into_fresh_parts_runs_the_forward_the_run_ran():
    "A tripped int8 run's checkpoint, restored into fresh parts: every layer of student and teacher runs fp32 again."
    cfg = tiny_cfg(aux=True, quant="int8", quant_check=True, quant_tol=1e-9)
    corpus = corpus_for(cfg)
    p = build_parts(cfg)
    run_probes(p, corpus, cfg, device="cpu", log=lambda *a: None)
    assert p.latch.tripped
    for s in range(3):
        train_step(p, corpus, cfg, s, probe_batches=2, device="cpu")
    with tempfile.TemporaryDirectory() as t:
        save_run_ckpt(t, to_run_state(p, {"threads": 1}), p.tables, keep=1)
        ck, tables, path, *_ = find_latest(t, cfg)
        q = build_parts(cfg)
        assert forward_formats(q.model)["quant"] == "int8"  # fresh parts follow the plan
        restore(q, ck, tables, cfg, path=path)
    for a, b in ((p.model, q.model), (p.teacher, q.teacher)):
        layers = {n: m.quant for n, m in b.named_modules() if isinstance(m, FactorLinear)}
        assert layers and set(layers.values()) == {"fp32"}, layers
        assert forward_formats(b) == forward_formats(a)
    assert state_fingerprint(q) == state_fingerprint(p)
    assert ck.env["forward"] == ran_forward(p)  # the container's record is read off the model
    assert ck.env["forward"] == {**forward_formats(p.model), "compiled": False}


def test_the_row_reports_what_ran_not_what_the_plan_says():
    # (rule: the forward that ran is the forward logged)
    "A model whose forward differs from its plan is logged as what it runs."
    cfg = tiny_cfg(quant="int8")
    corpus = corpus_for(cfg)
    p = build_parts(cfg)
    p.model.head.quant = "fp8"
    assert train_step(p, corpus, cfg, 0, probe_batches=1, device="cpu")["quant"] == "mixed"
    set_quant_all(p.model, "fp32")
    p.model.bf16 = True
    row = train_step(p, corpus, cfg, 1, probe_batches=1, device="cpu")
    assert (row["quant"], row["bf16"], row["latch"]) == ("fp32", True, False)


def test_rows_and_records_read_the_model(tmp_path):
    "An int8 run's rows say int8 until the latch trips them to fp32; bf16 is read off the model too."
    df = fit(tiny_cfg(steps=3, quant="int8"), tmp_path / "int8", progress=False)
    assert list(df.quant) == ["int8"] * 3 and not df.bf16.any()
    lin = read_jsonl(RunPaths(tmp_path / "int8").lineage)
    assert lin[0]["env"]["forward"]["quant"] == "int8" and "quant" not in lin[0]["env"]
    assert final_ckpt(tmp_path / "int8").env["forward"]["layers"]["head"] == "int8"
    tripped = fit(tiny_cfg(steps=3, quant="int8", quant_check=True, quant_tol=1e-9), tmp_path / "t", progress=False)
    assert list(tripped.quant) == ["fp32"] * 3
    assert read_jsonl(RunPaths(tmp_path / "t").lineage)[0]["env"]["forward"]["quant"] == "fp32"  # after the probes
    bf = fit(tiny_cfg(steps=2, bf16=True), tmp_path / "bf16", progress=False)
    assert bf.bf16.all() and read_jsonl(RunPaths(tmp_path / "bf16").lineage)[0]["env"]["forward"]["bf16"] is True
