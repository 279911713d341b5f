"""Compressor baselines where a user reads them: `dormouse train`'s final line and `plot_run`'s reference lines."""

import math, re

import pytest

from dormouse.cli import main
from dormouse.data import COMPRESSORS, compressor_baselines, load_corpus
from dormouse.rundir import RunPaths, read_jsonl
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
    text = root / "corpus.txt"
    text.write_bytes(b"".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n".encode() for i in range(3000)))
    cfg = root / "cfg.toml"
    cfg.write_text(CONFIG.format(data=text))
    yield root, cfg, text
    mp.undo()


def test_train_prints_bits_per_byte_beside_the_compressors(run, capsys):
    root, cfg, text = run
    assert main(["train", "--config", str(cfg), "--run-dir", str(root / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("held-out "))
    base = compressor_baselines(load_corpus(text, 0.05, 32))
    model = re.match(r"held-out (\d+\.\d+) bits/byte \(depth 2\)", line).group(1)
    last = [r for r in read_jsonl(RunPaths(root / "r").metrics) if "eval_bpb_d2" in r][-1]
    assert model == f"{last['eval_bpb_d2']:.3f}" and last["eval_bpb_d2"] == last["eval_d2"] / math.log(2)
    for name in COMPRESSORS:
        assert f"{name} {base[name]:.3f}" in line and f"{name} {base[name + ' +train']:.3f}" in line
    assert run_baselines(root / "r") == base


def test_plot_run_draws_the_baselines(run):
    import matplotlib

    matplotlib.use("Agg")
    root, _, text = run
    if not (root / "r").exists():
        pytest.skip("needs the run of the test above")
    fig = plot_run(root / "r")
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    base = run_baselines(root / "r")
    for name in COMPRESSORS:
        assert f"{name}: {base[name]:.3f} bits/byte" in labels
    bare = [ln.get_label() for ln in plot_run(root / "r", baselines=False).axes[0].get_lines()]
    assert not any("bits/byte" in lb for lb in bare)
