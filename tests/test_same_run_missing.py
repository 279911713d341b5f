"""Issue 12 item 6: missing state is a hard error. A v3 container lacking a section the plan needs is a
CheckpointError naming the file and the section; a legacy container is resumed, saying exactly what this plan needs
and the file does not carry."""

import dataclasses, shutil

import pytest

from dormouse.container import load_ckpt, save_ckpt
from dormouse.container_format import CheckpointError
from dormouse.testing import write_v1, write_v2
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import tiny_cfg
from dormouse.train import fit

AUX_STRESS = tiny_cfg(steps=10, ckpt_every=5, keep_ckpts=10, aux=True, stress=True, quant="int8")
PLAIN = tiny_cfg(steps=10, ckpt_every=5, keep_ckpts=10)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("missing")
    fit(AUX_STRESS, root / "aux_stress", progress=False)
    fit(PLAIN, root / "plain", progress=False)
    return root


@pytest.mark.parametrize("cut", [("teacher", "stress"), ("teacher",), ("stress",)])
def test_a_v3_container_lacking_what_the_plan_needs_is_refused(runs, tmp_path, cut):
    run = tmp_path / "run"
    shutil.copytree(runs / "aux_stress", run)
    p = RunPaths(run).ckpt_dir / "step_000010.dmck"
    save_ckpt(p, dataclasses.replace(load_ckpt(p), **{k: None for k in cut}))
    with pytest.raises(CheckpointError) as e:
        fit(dataclasses.replace(AUX_STRESS, steps=15), run, resume=True, progress=False)
    assert e.value.path == str(p) and e.value.section == ", ".join(cut), str(e.value)
    assert f"step_000010.dmck: [{', '.join(cut)}]" in str(e.value)
    assert len(read_jsonl(RunPaths(run).lineage)) == 1  # refused before anything was written


@pytest.mark.parametrize(
    "version,plan,lacks",
    [
        (
            1,
            "aux_stress",
            ["EMA teacher", "fp32-factor fallback latch", "stress monitor history", "numeric environment"],
        ),
        (2, "aux_stress", ["stress monitor history", "numeric environment"]),
        (1, "plain", ["numeric environment"]),  # an fp32 plan without aux or stress needs none of the rest
    ],
)
def test_a_legacy_container_reports_exactly_what_this_plan_lacks(runs, tmp_path, capsys, version, plan, lacks):
    cfg = AUX_STRESS if plan == "aux_stress" else PLAIN
    run = tmp_path / "run"
    shutil.copytree(runs / plan, run)
    p = RunPaths(run).ckpt_dir / "step_000010.dmck"
    (write_v1 if version == 1 else write_v2)(p, load_ckpt(p))
    capsys.readouterr()
    fit(dataclasses.replace(cfg, steps=12), run, resume=True, progress=False)
    out = capsys.readouterr().out
    assert f"LEGACY checkpoint (v{version}) {p}" in out, out
    said = [ln.strip()[2:] for ln in out.splitlines() if ln.startswith("  - ")]
    # ... and how its tables file was paired (a legacy container records no tables id): said, not hidden
    assert [s.split(":")[0] for s in said] == lacks + ["n-gram tables id"], said
    seg = read_jsonl(RunPaths(run).lineage)[-1]
    assert seg["kind"] == "resume" and seg["legacy_missing"] == said
