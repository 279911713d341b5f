"""The kit is part of the environment (issue 22 item 5): each definition a comparison of runs relies on is pinned here
at its version number in `kit.DEFINITIONS`. A change to a definition without a bump fails below, saying which
number to bump: a checkpoint records the numbers, and a resume across a bump is refused as incomparable rather than
compared under two meanings. Each value is computed from exact inputs (no float arithmetic that a CPU could round
differently), so it holds on any machine."""

import dataclasses, hashlib

import pytest
import torch

from dormouse.data import corpus_codes, load_corpus
from dormouse.kit import DEFINITIONS
from dormouse.numerics import env_diff, numeric_env
from dormouse.parts import build_parts, state_fingerprint
from dormouse.testing import tiny_cfg

GOLDEN = {  # {definition: {version: the value its definition gives the fixed inputs below}}
    "def_fingerprint": {1: "b73b4036007ee2f7"},
    "def_eval_sample": {1: "3a0df9d6ab2a14a3"},
    "def_data_order": {1: "89ed151383ed59d4"},
    "def_match": {2: "cb74b6fb6a553d27"},  # v1 was pinned on a 200 KB corpus whose units each fit one block
    "def_match_train": {2: "e53bf3e58bbba3fd"},
}


def fixed_parts():
    "Run state with exact values in every piece the fingerprint hashes: student, teacher, optimiser, latch, stress."
    cfg = tiny_cfg(aux=True, stress=True, quant="fp8")
    parts = build_parts(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, match_orders=[])))
    with torch.no_grad():
        for k, model in enumerate((parts.model, parts.teacher)):
            for i, p in enumerate(model.parameters()):
                p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) / 64 + i + 100 * k)
    osd = parts.optim.state_dict()
    p0 = next(parts.model.parameters())
    osd["state"] = {0: {"step": torch.tensor(3.0), "exp_avg": torch.full_like(p0, 0.5),
                        "exp_avg_sq": torch.full_like(p0, 0.25)}}
    parts.optim.load_state_dict(osd)
    for s, g in enumerate([1.0, 1.5, 1.25, 9.0]):
        parts.stress.observe(g, s)
    parts.latch.trip("fixed")
    parts.step = 7
    return parts


def _fixed_bytes(n: int) -> bytes:
    return bytes((i * 7919 + i // 251) % 256 for i in range(n))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("defs") / "corpus.bin"
    p.write_bytes(_fixed_bytes(200_000))
    return load_corpus(p, 0.05, 32)


@pytest.fixture(scope="module")
def coded(tmp_path_factory):
    "A corpus whose training unit is longer than a block (`match.MATCH_BLOCK`): its codes use the blocks and tables."
    p = tmp_path_factory.mktemp("defs") / "long.bin"
    p.write_bytes(_fixed_bytes(200_000) + bytes(range(256)) * 2000 + _fixed_bytes(100_000)[::-1])
    return load_corpus(p, 0.05, 32, match_orders=[1, 2, 4, 8, 16, 32, 64])


def _sha(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def values(corpus, coded) -> dict:
    return {
        "def_fingerprint": state_fingerprint(fixed_parts()),
        "def_eval_sample": _sha(t for j in range(4) for t in corpus.eval_batch(j, 4, 32)),
        "def_data_order": _sha(t for order in ("shuffled", "stream") for i in (0, 1, 500, 12345)
                               for t in corpus.batch_at(i, 4, 32, order, 1)),
        "def_match": _sha([torch.from_numpy(coded.match[:].astype("int64"))]),
        "def_match_train": _sha([torch.from_numpy(corpus_codes(coded, [1, 2, 4, 8, 16, 32, 64], train=True)[:]
                                                   .astype("int64"))]),
    }


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_each_definition_is_pinned_at_its_version(name, corpus, coded):
    version, now = DEFINITIONS[name], values(corpus, coded)[name]
    known = GOLDEN[name]
    assert version in known, f"{name} v{version} has no pinned value here: add {{{version}: {now!r}}} to GOLDEN"
    assert now == known[version], (
        f"the definition behind {name} changed (it gives {now}, v{version} gave {known[version]}) but "
        f"kit.DEFINITIONS[{name!r}] is still {version}: bump it in nbs/12_kit.ipynb, and pin the new value "
        "here, so a resume across the change is refused instead of comparing two meanings")


def test_every_definition_is_recorded_and_a_bump_is_a_difference():
    env = numeric_env(1)
    assert {k: env[k] for k in DEFINITIONS} == DEFINITIONS and env["dormouse"]
    for k in DEFINITIONS:
        assert env_diff({**env, k: env[k] + 1}, env) == {k: (env[k] + 1, env[k])}
