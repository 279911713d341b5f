"""No global RNG anywhere in the library: every draw is a keyed function of (seed, step, stream, index)."""

import re
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "dormouse"
FORBIDDEN = [
    r"torch\.manual_seed",
    r"torch\.rand",
    r"torch\.randn",
    r"torch\.randint",
    r"torch\.randperm",
    r"torch\.bernoulli",
    r"torch\.multinomial",
    r"(?<![\w.])random\.",
    r"np\.random",
    r"numpy\.random",
    r"nn\.init\.",
    r"\.normal_\(",
    r"\.uniform_\(",
    r"\.random_\(",
    r"\.exponential_\(",
    r"Generator\(",
]
# torch.load/torch.save can unpickle; safetensors.torch.load/save cannot (tensors + a JSON header only)
NO_PICKLE = [
    r"(?<!safetensors\.)torch\.load",
    r"(?<!safetensors\.)torch\.save",
    r"import pickle",
    r"\bpickle\.\w",  # pickle.load(s), pickle.dump(s), ...; not "no pickle." ending a sentence
    r"import dill",
]


def lib_sources():
    files = sorted(p for p in LIB.glob("*.py") if p.name not in {"_modidx.py"})
    assert files, f"no library sources under {LIB}"
    return files


def code_hits(patterns, skip=()) -> list[str]:
    "Every code line of the library (its comment stripped) that one of `patterns` matches, as `file:line: text`."
    return [f"{p.name}:{n}: {line.strip()}" for p in lib_sources() if p.name not in skip
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if any(re.search(pat, line.split("#", 1)[0]) for pat in patterns)]


def test_no_global_rng_outside_rng():
    hits = code_hits(FORBIDDEN, skip={"rng.py"})
    assert hits == [], "global RNG use in the library:\n" + "\n".join(hits)


def test_rng_itself_uses_no_global_state():
    src = (LIB / "rng.py").read_text()
    for pat in FORBIDDEN:
        assert not re.search(pat, src), pat


def test_no_pickle_in_library():
    hits = code_hits(NO_PICKLE)
    assert hits == [], "pickle-capable IO in the library:\n" + "\n".join(hits)


def test_the_grep_can_fail(tmp_path):
    bad = "x = torch.rand(3)\ny = np.random.rand()\nimport random\nz = random.random()\n"
    found = [pat for pat in FORBIDDEN for line in bad.splitlines() if re.search(pat, line)]
    assert len(found) >= 3


def test_the_pickle_grep_can_fail():
    hit = [
        pat
        for pat in NO_PICKLE
        for line in ["torch.save(sd, f)", "x = torch.load(f)", "import pickle"]
        if re.search(pat, line)
    ]
    assert len(hit) == 3, hit
    assert not any(re.search(pat, "safetensors.torch.save(sd)") for pat in NO_PICKLE)
    assert not any(re.search(pat, '"""... every section checksummed, no pickle."""') for pat in NO_PICKLE)
