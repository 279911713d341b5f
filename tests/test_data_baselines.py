"""The final score and the compressor baselines where a user reads them: `dormouse train`'s last lines and `plot_run`.

The score is the compressor-like one (`dormouse.scorecard`, computed by `fit(score=True)`), on exactly the bytes the
compressors get; the baselines are cached per corpus, and neither an unwritable cache nor Ctrl-C during them turns a
finished run into a failed one.
"""

import re
from pathlib import Path

import pytest

import dormouse.baselines as baselines_mod
import dormouse.corpus_cache as cache_mod
from dormouse.cli import main
from dormouse.baselines import QUICK, compressor_baselines
from dormouse.data import load_corpus
from dormouse.infer import load_model_weights
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.score import score
from dormouse.view import plot_run, run_baselines

CONFIG = """
data = "{data}"
steps = 6
seq_len = 32
batch = 4
eval_every = 3
eval_batches = 2
eval_depths = [1, 2]
ckpt_every = 3
log_every = 3
[model]
d_model = 32
n_heads = 2
factor_rank = 16
ngram_orders = [2]
ngram_slots = 256
ngram_dim = 8
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("baselines")
    mp = pytest.MonkeyPatch()
    mp.setenv("DORMOUSE_CACHE", str(root / "cache"))  # a fresh cache: baselines computed here, for this corpus
    mp.setenv("DORMOUSE_SCORE_MIX", "1")  # the report as a user gets it: mixed with counts
    text = root / "corpus.txt"
    text.write_bytes(b"".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n".encode() for i in range(3000)))
    cfg = root / "cfg.toml"
    cfg.write_text(CONFIG.format(data=text))
    yield root, cfg, text
    mp.undo()


def test_train_prints_the_score_beside_the_compressors_on_the_same_bytes(run, capsys):
    root, cfg, text = run
    assert main(["train", "--config", str(cfg), "--run-dir", str(root / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("held-out score: "))
    assert re.match(r"held-out score: \d+\.\d+ bits/byte \(static, mixed with counts\), on ", line)
    alone = next(ln for ln in out.splitlines() if ln.startswith("  the model alone: "))
    printed = re.match(r"  the model alone: (\d+\.\d+) bits/byte static, the run's weights", alone).group(1)
    corpus = load_corpus(text, 0.05, 32)
    im = load_model_weights(RunPaths(root / "r").checkpoints()[-1], quant="stored")
    sc = score(im.model, im.tables, corpus, 32, 2)  # the final checkpoint, scored again: what fit scored in memory
    assert printed == f"{sc.bits_per_byte:.3f}" and f"{sc.nbytes:,} bytes" in line
    base = compressor_baselines(corpus)
    assert (base.sha256, base.nbytes) == (sc.sha256, sc.nbytes)  # exactly the scored bytes
    lines = out.splitlines()
    assert lines[lines.index(line) + 3].startswith("  the strongest compressor ")  # the gap, first
    for name in QUICK:  # each beside the model in the ranked table, best first
        assert any(ln.startswith(f"    {base.bits[name]:.3f}  {name} alone") for ln in lines), out
    last = [r for r in read_jsonl(RunPaths(root / "r").metrics) if "eval_cold_bpb_d2" in r][-1]
    assert f"cold 32-byte windows (no context before each): {last['eval_cold_bpb_d2']:.3f}" in out  # beside it
    assert run_baselines(root / "r") == {n: base.bits[n] for n in base.bits if "+" not in n}


def test_an_unwritable_cache_costs_the_cache_not_the_run(run, capsys, monkeypatch, tmp_path):
    _, cfg, _ = run
    monkeypatch.setenv("DORMOUSE_CACHE", "/dev/null/x")  # cannot be a directory
    monkeypatch.setattr(cache_mod, "_STAND_IN", [])  # this process has no stand-in yet: it makes one and says so
    assert main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "r"), "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "the cache /dev/null/x cannot be used (Not a directory): this process prepares its corpus in " in cap.err
    assert "set DORMOUSE_CACHE to a writable directory" in cap.err
    assert cache_mod.cache_dir() == cache_mod._STAND_IN[0] and list(Path(cache_mod._STAND_IN[0]).glob("match-*.bin"))
    assert "  every figure on these bytes, in bits/byte, best first " in cap.out
    assert RunPaths(tmp_path / "r").checkpoints()


def test_ctrl_c_during_the_baselines_leaves_a_finished_run_finished(run, capsys, monkeypatch, tmp_path):
    _, cfg, _ = run
    monkeypatch.setenv("DORMOUSE_CACHE", str(tmp_path / "cache"))  # a miss: the compressors run

    def interrupted(*a, **kw):
        raise KeyboardInterrupt  # what Ctrl-C raises between two chunks fed to a compressor

    monkeypatch.setattr(baselines_mod, "compressed_size", interrupted)
    assert main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "r"), "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "final score interrupted; the run is complete (checkpoint step_000006.dmck)" in cap.err
    assert "interrupted:" not in cap.out and "dormouse: interrupted" not in cap.err
    assert [p.name for p in RunPaths(tmp_path / "r").checkpoints()][-1] == "step_000006.dmck"


def test_plot_run_draws_the_baselines(run):
    import matplotlib

    matplotlib.use("Agg")
    root, _, text = run
    if not (root / "r").exists():
        pytest.skip("needs the run of the first test")
    fig = plot_run(root / "r")
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    base = run_baselines(root / "r")
    assert set(QUICK) <= set(base)
    for name, bpb in base.items():
        assert f"{name}: {bpb:.3f} bits/byte" in labels
    bare = [ln.get_label() for ln in plot_run(root / "r", baselines=False).axes[0].get_lines()]
    assert not any("bits/byte" in lb for lb in bare)


def test_the_baselines_command_computes_what_the_report_then_reads_from_the_cache(run, capsys, monkeypatch, tmp_path):
    import shutil

    _, cfg, text = run
    monkeypatch.setenv("DORMOUSE_CACHE", str(tmp_path / "cache"))
    per_file = ["--per-file"] if shutil.which("zpaq") else []  # the held-out files, each after the training text
    assert main(["baselines", "--config", str(cfg), "--quiet", *per_file]) == 0
    out = capsys.readouterr().out
    corpus = load_corpus(text, 0.05, 32)
    base = compressor_baselines(corpus)  # the held-out stream, read back: the command's figures, now in the cache
    assert out.startswith(f"held-out: {base.nbytes:,} bytes (sha256 {base.sha256[:16]})")
    slow = ["PPMd"] + (["zpaq -m5"] if shutil.which("zpaq") else [])
    for name in slow:
        for key in (name, name + " +train"):
            assert base.origin[key] == "cache" and key not in base.missing  # computed once, read by every run after
        assert f"  {name:9s} alone {base.bits[name]:.4f}" in out
    assert main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "r"), "--quiet"]) == 0
    report = capsys.readouterr().out
    v = base.ppmd_order["PPMd"]  # PPMd's best variant and order, named in the ranked table
    assert f"    {base.bits['PPMd']:.3f}  PPMd variant {v[0]} order {v[1:]} alone (cache)" in report, report
    assert "not computed for these bytes yet" not in report
    if per_file:  # the gap file by file, from the figures the command cached
        each = base.per_file["zpaq -m5 +train"]
        rival = f"zpaq -m5 given the training text {sum(each) / base.nbytes:.3f} bits/byte (cache)"
        assert f"each of {len(each)} files after it alone: {sum(each) / base.nbytes:.4f} bits/byte (now)" in out
        assert f"  matched per file (each file after the training text alone, as the kit reads it): {rival}; " in report
        assert "paired standard error across files" in report
