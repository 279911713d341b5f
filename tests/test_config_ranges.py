"""One validation boundary for every config value (issue 23): every key has a rule, every value that would reach torch
or arithmetic unchecked — or train silently wrong — is refused by `validate` in one `ConfigError` before anything is
allocated, the CLI says it in one line (exit 2) and creates nothing, and a plan whose memory exceeds the machine's is
refused with both figures."""

import argparse
import dataclasses
import re

import pytest
import torch

from dormouse.cli import main
from dormouse.flags import train_cfg_from_args
from dormouse.config import ConfigError, ModelCfg, TrainCfg, field_names
from dormouse.validate import MAX_NGRAM_ORDERS, RULES, memory_problems, plan_memory, validate
from dormouse.model import DormouseModel
from dormouse.quant import FactorLinear
from dormouse.train import fit
from dormouse.testing import tiny_cfg

# (flags, the key the one line must name, the words it must hold): the issue's findings, then the rest of the table
FLAG_CASES = [
    (["--lr", "-1"], "lr = -1.0", "must be > 0"),
    (["--lr", "0"], "lr = 0.0", "must be > 0"),
    (["--weight-decay", "-1"], "weight_decay = -1.0", "must be >= 0"),
    (["--beta1", "1.5"], "beta1 = 1.5", "must be in [0, 1)"),
    (["--beta1", "-0.1"], "beta1 = -0.1", "must be in [0, 1)"),
    (["--beta2", "1.0"], "beta2 = 1.0", "must be in [0, 1)"),
    (["--model.mlp-mult", "0"], "model.mlp_mult = 0", "must be >= 1"),
    (["--model.ngram-dim", "0"], "model.ngram_dim = 0", "must be >= 1"),
    (["--model.n-heads", "0"], "model.n_heads = 0", "must be >= 1"),
    (["--model.d-model", "0"], "model.d_model = 0", "must be >= 1"),
    (["--aux", "--model.pred-mult", "0"], "model.pred_mult = 0", "must be >= 1"),
    (["--model.factor-rank", "0"], "model.factor_rank = 0", "must be >= 1"),
    (["--min-lr", "-0.001"], "min_lr = -0.001", "must be >= 0"),
    (["--min-lr", "0.5", "--lr", "0.1"], "min_lr = 0.5", "must be <= lr = 0.1"),
    (["--ngram-momentum", "1"], "ngram_momentum = 1.0", "must be in [0, 1)"),
    (["--ngram-momentum", "-0.5"], "ngram_momentum = -0.5", "must be in [0, 1)"),
    (["--ngram-lr", "-1"], "ngram_lr = -1.0", "must be >= 0"),
    (["--jepa-weight", "-0.1"], "jepa_weight = -0.1", "must be >= 0"),
    (["--stress-k", "0"], "stress_k = 0.0", "must be > 0"),
    (["--stress-k", "-2"], "stress_k = -2.0", "must be > 0"),
    (["--quant-tol", "-0.01"], "quant_tol = -0.01", "must be >= 0"),
    (["--grad-clip", "-1"], "grad_clip = -1.0", "must be >= 0"),
    (["--warmup", "-1"], "warmup = -1", "must be >= 0"),
    (["--decay-start", "-5"], "decay_start = -5", "must be >= 0"),
    (["--decay-steps", "-5"], "decay_steps = -5", "must be >= 0"),
    (["--seed", "-1"], "seed = -1", "must be in [0, 2^64 - 1]"),
    (["--lr", "1e999"], "lr = Infinity", "must be a finite number"),
    (["--lr", "nan"], "lr = NaN", "must be a finite number"),
    (["--model.ngram-orders", ",".join(map(str, range(2, 67)))], "model.ngram_orders", "at most 64 entries"),
    (["--model.ngram-orders", "2,0"], "model.ngram_orders = [2, 0]", "every entry must be >= 1 (0 is not)"),
    (["--model.ngram-orders", "2,4000", "--seq-len", "32"], "model.ngram_orders", "must be <= seq_len = 32"),
    (["--model.d-model", "48", "--model.n-heads", "16"], "model.d_model = 48", "heads of even width"),
    (["--steps", "1" * 5000], "--steps 111111111111...", "an integer of 5000 digits, too large to mean anything"),
    (["--seed", "9" * 25], "--seed 999999999999...", "an integer of 25 digits"),
    (["--steps", "9" * 20], "steps = 99999999999999999999", "must be in [0, 2^63 - 1]"),
    (["--model.ngram-orders", "2," + "3" * 4400], "--model.ngram-orders 2,3333333333...", "an integer of 4400 digits"),
    (["--data", "corpus-\udcff.txt"], "--data corpus-\\xff.txt", "the path has byte 0xff at position 7"),
    (["--model.ngram-slots", "3000000000"], "the plan needs at least ~", "n-gram tables (weight, momentum, row"),
    (["--model.d-model", str(1 << 20), "--model.n-heads", "2"], "the plan needs at least ~", "weights formed by one"),
]


@pytest.mark.parametrize("argv,key,words", FLAG_CASES, ids=[" ".join(a)[:40] for a, _, _ in FLAG_CASES])
def test_a_bad_value_on_the_command_line_is_one_line_exit_2_and_creates_nothing(argv, key, words, tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(["train", "--run-dir", str(run), "--quiet", *argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("dormouse: error: ") and "Traceback" not in err, err
    assert key in err and words in err, err
    assert not run.exists()


def test_every_problem_is_listed_in_one_error():
    bad = TrainCfg(lr=-1.0, beta1=1.5, beta2=1.0, ngram_momentum=1.0, stress_k=0.0, model=ModelCfg(mlp_mult=0))
    with pytest.raises(ConfigError) as e:
        validate(bad)
    msg = str(e.value)
    assert "6 problem(s)" in msg
    for k in ["lr = ", "beta1 = ", "beta2 = ", "ngram_momentum = ", "stress_k = ", "model.mlp_mult = "]:
        assert k in msg, (k, msg)


def test_fit_refuses_before_anything_is_allocated_or_written(tmp_path, monkeypatch):
    import dormouse.train as train

    def never(*a, **k):
        raise AssertionError("fit allocated the model before validating the plan")

    monkeypatch.setattr(train, "build_parts", never)
    monkeypatch.setattr(train, "corpus_for", never)
    with pytest.raises(ConfigError, match="model.ngram_slots|n-gram tables"):
        fit(tiny_cfg(model=dataclasses.replace(tiny_cfg().model, ngram_slots=3_000_000_000)), tmp_path / "r")
    with pytest.raises(ConfigError, match="beta2 = 1.0"):
        fit(tiny_cfg(beta2=1.0), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_every_key_has_a_rule_and_the_defaults_pass():
    assert set(RULES) == set(field_names())
    assert validate(TrainCfg()) == TrainCfg() and validate(tiny_cfg()) == tiny_cfg()


def test_the_orders_limit_is_the_tables_files_header_limit():
    from dormouse.tables_file import MAX_ORDERS

    assert MAX_ORDERS == MAX_NGRAM_ORDERS  # the reader refuses more: the plan must refuse them first
    validate(TrainCfg(model=ModelCfg(ngram_orders=list(range(1, MAX_NGRAM_ORDERS + 1)))))


@pytest.mark.parametrize(
    "model",
    [ModelCfg(d_model=65536), ModelCfg(ngram_slots=3_000_000_000)],
    ids=["d_model 65536", "ngram_slots 3e9"],
)
def test_the_issues_memory_cases_are_refused_on_a_24_gb_machine_with_the_figure(model):
    (msg,) = memory_problems(TrainCfg(model=model), 24 * 10**9)
    assert "the plan needs at least ~" in msg and "this machine has 24 GB" in msg, msg


def test_a_plan_that_fits_is_not_refused():
    need = sum(plan_memory(TrainCfg()).values())
    assert memory_problems(TrainCfg(), need) == [] and memory_problems(TrainCfg(), need - 1) != []


SHAPES = [
    ModelCfg(),
    tiny_cfg().model,
    ModelCfg(d_model=48, n_heads=4, factor_rank=8, mlp_mult=3, ngram_dim=64, pred_mult=3, depth=3),
    ModelCfg(d_model=16, n_heads=2, factor_rank=1000, ngram_orders=[], ngram_dim=4),
]


@pytest.mark.parametrize("aux", [False, True])
@pytest.mark.parametrize("model", SHAPES, ids=["default", "tiny", "odd", "no orders"])
def test_the_memory_bound_counts_the_models_parameters_exactly(model, aux):
    "plan_memory counts from the shape; the model chapter's DormouseModel is the truth (built on the meta device)."
    with torch.device("meta"):
        net = DormouseModel(model, aux=aux)
    params = sum(p.numel() for p in net.parameters())
    need = plan_memory(TrainCfg(model=model, aux=aux))
    assert need["parameters, gradients and AdamW moments"] == 16 * params
    assert need["EMA teacher"] == (4 * params if aux else 0)
    formed = sum(m.in_features * m.out_features * (model.depth if n.startswith("core.") else 1)
                 for n, m in net.named_modules() if isinstance(m, FactorLinear))
    assert need["weights formed by one forward"] == 4 * formed


@pytest.mark.parametrize(
    "kw,words",
    [
        (dict(min_lr=0.5, lr=0.1), "min_lr = 0.5: must be <= lr = 0.1"),
        (dict(model=ModelCfg(d_model=48, n_heads=16)), "model.d_model = 48: must split into model.n_heads = 16"),
        (dict(model=ModelCfg(depth_min=3, depth_max=2)), "model.depth_min = 3: must be <= model.depth_max = 2"),
        (dict(seq_len=4), "every order must be <= seq_len = 4"),
    ],
    ids=["min_lr > lr", "odd head width", "depth range", "order > seq_len"],
)
def test_the_rules_between_keys(kw, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        validate(TrainCfg(**kw))


def test_a_huge_integer_flag_is_one_problem_naming_the_flag():
    args = argparse.Namespace(run_dir="/nonexistent", config=None, resume=False, steps="7" * 5000, seed="8" * 30)
    with pytest.raises(ConfigError) as e:
        train_cfg_from_args(args)
    msg = str(e.value)
    assert "2 problem(s)" in msg and "Exceeds" not in msg, msg
    assert "--steps 777777777777...: an integer of 5000 digits, too large to mean anything" in msg, msg
    assert "--seed 888888888888...: an integer of 30 digits" in msg, msg


def test_a_non_utf8_path_in_a_plan_built_in_python_is_refused_by_validate():
    with pytest.raises(ConfigError, match=r"data = 'corpus-\\udcff.txt': must be a path of UTF-8 text"):
        validate(TrainCfg(data="corpus-\udcff.txt"))
    with pytest.raises(ConfigError, match=r'jepa_targets = "a\\u0000b": must be a path'):
        validate(TrainCfg(jepa_targets="a\0b"))
