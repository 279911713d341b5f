"""Types are part of the plan (issue 12 item 3), threads is environment (item 2), and the CLI is generated from the
dataclasses (issue 17 item 4): one source of truth for every key's type, flag and help."""

import dataclasses
import json
import re
import typing

import pytest
import tomli_w

from dormouse.flags import UsageError, build_parser, key_docs, normalize_flags, train_cfg_from_args
from dormouse.config import (ENV_KEYS, PROGRESS_KEYS, ConfigError, ModelCfg, TrainCfg, cfg_from_dict, cfg_to_dict,
                             check_drift, diff_keys, field_names, field_types, flatten, load_cfg, read_snapshot,
                             snapshot_toml)
from dormouse.validate import validate
from dormouse.testing import flipped, save_snapshot
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.train import fit
from dormouse.testing import tiny_cfg

LEAVES = {k: t for k, t in field_types().items() if not dataclasses.is_dataclass(t)}


def wrong_value(t):
    "A value of another type than `t` that Python would happily run with."
    if t is bool:
        return "false"  # truthy: today's bug turned JEPA on
    if t is int:
        return 1.5
    if t is float:
        return "0.1"
    if t is str:
        return 1
    if typing.get_origin(t) is list:
        return [1, 2.0]
    raise AssertionError(f"no wrong value for {t}")


def nested(key, value):
    "{'model': {'depth': v}} for 'model.depth'."
    *parents, last = key.split(".")
    d = node = {}
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return d


def python_cfg(key, value):
    "TrainCfg built in Python with one key set."
    if key.startswith("model."):
        return TrainCfg(model=ModelCfg(**{key[6:]: value}))
    return TrainCfg(**{key: value})


@pytest.mark.parametrize("key", sorted(LEAVES))
def test_every_key_is_type_checked_from_toml_dict_and_python(key, tmp_path):
    bad = wrong_value(LEAVES[key])
    words = re.escape(f"{key} = {json.dumps(bad)}: expected")
    p = tmp_path / "c.toml"
    p.write_text(tomli_w.dumps(nested(key, bad)))
    with pytest.raises(ConfigError, match=words):
        load_cfg(p)
    with pytest.raises(ConfigError, match=words):
        cfg_from_dict(nested(key, bad))
    with pytest.raises(ConfigError, match=words):
        validate(python_cfg(key, bad))


@pytest.mark.parametrize(
    "toml,key",
    [
        ('aux = "false"', "aux"),
        ("seq_len = true", "seq_len"),
        ("seed = 1.5", "seed"),
        ('steps = "ten"', "steps"),
        ('lr = "x"', "lr"),
        ("batch = 4.0", "batch"),
        ("model = 5", "model"),
        ("eval = 1", "eval"),
        ("[model]\nd_model = true", "model.d_model"),
    ],
)
def test_issue_12_repros_are_refused(toml, key, tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(toml + "\n")
    with pytest.raises(ConfigError) as e:
        load_cfg(p)
    assert str(p) in str(e.value) and f"{key} = " in str(e.value)


def test_one_error_lists_every_bad_key_and_every_unknown_key():
    bad = {"aux": "false", "seed": 1.5, "lrr": 0.1, "model": {"d_model": 4.0, "dmodel": 3}, "eval_depths": [1, True]}
    with pytest.raises(ConfigError) as e:
        cfg_from_dict(bad)
    msg = str(e.value)
    assert "6 problem(s)" in msg
    for k in [
        "aux",
        "seed",
        "lrr: unknown key (did you mean lr?)",
        "model.d_model",
        "model.dmodel: unknown key",
        "eval_depths",
    ]:
        assert k in msg, (k, msg)


def test_good_types_pass_and_ints_in_float_fields_become_floats():
    assert validate(cfg_from_dict(cfg_to_dict(TrainCfg()))) == TrainCfg()
    cfg = cfg_from_dict({"lr": 1, "model": {"d_model": 64}})
    assert cfg.lr == 1.0 and type(cfg.lr) is float and "\nlr = 1.0\n" in snapshot_toml(cfg)
    assert type(validate(TrainCfg(grad_clip=2)).grad_clip) is float
    with pytest.raises(ConfigError, match="must be a finite number"):
        validate(TrainCfg(lr=float("inf")))


@pytest.mark.parametrize("data", [bytes(range(256)), b"\xff\xfe\x00\x01", b"lr = = 1", b"[model\n"])
def test_a_config_file_that_is_not_toml_names_the_file(data, tmp_path):
    p = tmp_path / "c.toml"
    p.write_bytes(data)
    with pytest.raises(ConfigError, match=re.escape(f"{p} is not a TOML config: ")):
        load_cfg(p)


@pytest.mark.parametrize("data", [b"", b"\n\n# just a comment\n", bytes(range(256)), b"lr = = 1", "torn"])
def test_a_damaged_snapshot_is_snapshot_damaged_not_a_drift_list(data, tmp_path):
    p = tmp_path / "config.toml"
    save_snapshot(TrainCfg(), p)
    p.write_bytes(p.read_bytes()[:200] if data == "torn" else data)
    with pytest.raises(ConfigError, match=re.escape(f"{p}: snapshot damaged")):
        read_snapshot(p)


def test_threads_is_an_environment_key_not_a_drift_key():
    assert ENV_KEYS == {"threads"} and not ENV_KEYS & PROGRESS_KEYS and "threads" in field_names()
    assert diff_keys(TrainCfg(), TrainCfg(threads=4)) == {}
    check_drift(cfg_to_dict(TrainCfg()), TrainCfg(threads=4))  # no DriftError
    assert list(diff_keys(TrainCfg(), TrainCfg(threads=4, seed=2))) == ["seed"]


def test_a_threads_change_on_resume_is_verified_by_replay_and_an_override_is_recorded(tmp_path):
    "threads is environment, not plan: a change is replayed and recorded as verified; allow_env_drift as waived."
    run = tmp_path / "run"
    cfg = tiny_cfg(steps=10, ckpt_every=5, log_every=5, eval=False)
    fit(cfg, run, progress=False)
    fit(dataclasses.replace(cfg, steps=12, threads=2), run, resume=True, progress=False)
    row = read_jsonl(RunPaths(run).lineage)[-1]
    assert row["env_drift"]["threads"] == [1, 2] and row["env_verified"]["keys"] == ["threads"], row
    assert row["env_waived"] is False
    fit(dataclasses.replace(cfg, steps=14, threads=1), run, resume=True, allow_env_drift=True, progress=False)
    row = read_jsonl(RunPaths(run).lineage)[-1]
    assert row["env_drift"]["threads"] == [2, 1] and row["env_verified"] is None and row["env_waived"] is True, row


# --- the CLI, generated from the dataclasses ---
def train_parser():
    return build_parser()._subparsers._group_actions[0].choices["train"]


def parse(*argv):
    return build_parser().parse_args(normalize_flags(["train", "--run-dir", "/nonexistent/run", *map(str, argv)]))


def as_flags(key, value):
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else flag.replace("--", "--no-", 1)]
    if isinstance(value, list):
        return [flag, ",".join(map(str, value))]
    return [flag, str(value)]


@pytest.mark.parametrize("key", sorted(LEAVES))
def test_every_key_is_a_flag(key):
    default = flatten(cfg_to_dict(TrainCfg()))
    value = flipped(default[key])
    got = flatten(cfg_to_dict(train_cfg_from_args(parse(*as_flags(key, value)))))
    assert got[key] == value and type(got[key]) is type(value)
    assert {k for k in got if got[k] != default[k]} == {key}


def test_help_is_the_fields_own_comment_and_keys_are_grouped():
    docs = key_docs()
    assert docs["model.d_model"] == "residual stream width"
    assert docs["steps"] == "total steps of the run (progress: extending a run is a resume)"
    groups = {g.title: {a.dest for a in g._group_actions} for g in train_parser()._action_groups}
    assert groups["progress keys"] == set(PROGRESS_KEYS)
    assert groups["environment keys"] == set(ENV_KEYS)
    assert groups["plan keys"] == set(LEAVES) - PROGRESS_KEYS - ENV_KEYS
    for a in train_parser()._actions:
        if a.dest in LEAVES:
            assert a.help.startswith(docs[a.dest]) and docs[a.dest], a.dest
    text = train_parser().format_help()
    for title in ["plan keys", "progress keys", "environment keys", "run"]:
        assert f"\n{title}:" in text


@pytest.mark.parametrize(
    "argv,key,value",
    [
        (["--quant-check"], "quant_check", True),
        (["--no-quant_check"], "quant_check", False),
        (["--rand-depth"], "rand_depth", True),
        (["--rand_depth"], "rand_depth", True),
        (["--log-every", 3], "log_every", 3),
        (["--log_every", 3], "log_every", 3),
        (["--log-every=4"], "log_every", 4),
        (["--ckpt-every", 7], "ckpt_every", 7),
        (["--threads", 2], "threads", 2),
        (["--quant", "int8"], "quant", "int8"),
        (["--model.d_model", 64], "model.d_model", 64),
        (["--model.d-model", 64], "model.d_model", 64),
        (["--eval-depths", "1,3"], "eval_depths", [1, 3]),
        (["--no-eval"], "eval", False),
        (["--data", "x_y.txt"], "data", "x_y.txt"),
    ],
)
def test_old_and_new_spellings(argv, key, value):
    cfg = train_cfg_from_args(parse(*argv))
    assert (getattr(cfg.model, key[6:]) if key.startswith("model.") else getattr(cfg, key)) == value


def test_run_flags_still_parse():
    a = parse("--config", "c.toml", "--resume", "--device", "cpu", "--allow-env-drift", "--quiet")
    assert (a.config, a.resume, a.device, a.allow_env_drift, a.quiet) == ("c.toml", True, "cpu", True, True)


def test_base_config_precedence(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save_snapshot(TrainCfg(seed=7), run / "config.toml")
    (tmp_path / "c.toml").write_text("seed = 5\n")

    def seed(*argv):
        return train_cfg_from_args(build_parser().parse_args(["train", "--run-dir", str(run), *argv])).seed

    assert seed("--config", str(tmp_path / "c.toml"), "--resume") == 5  # the --config file first
    assert seed("--resume") == 7  # else the run's snapshot on --resume
    assert seed() == 1  # else the defaults
    assert seed("--resume", "--seed", "9") == 9  # then the flags


@pytest.mark.parametrize(
    "argv,key",
    [
        (["--seq-len", "true"], "seq_len"),
        (["--seed", "1.5"], "seed"),
        (["--batch", "4.0"], "batch"),
        (["--lr", "x"], "lr"),
        (["--model.d-model", "4.0"], "model.d_model"),
        (["--eval-depths", "1,2.0"], "eval_depths"),
    ],
)
def test_wrong_types_from_the_cli_get_the_same_check(argv, key):
    with pytest.raises(ConfigError, match=re.escape(f"{key} = ")):
        train_cfg_from_args(parse(*argv))
    with pytest.raises(UsageError, match="ignored explicit argument"):
        parse("--aux=false")  # a bool flag takes no value
