"""pytest configuration for dormouse's suite. The shared helpers (tiny configs, the one bitwise comparison of runs and
checkpoints) live in `dormouse.testing`, so tests and notebooks use the same ones.

MKL fixes its reproducibility mode at its first call, for the life of the process. `fit` applies the thread-invariant
mode when it is the first to call MKL, and a `dormouse` subprocess always is; so the suite's own process applies it
before any test runs a matrix product, and every run a test makes, in-process or not, computes under the same mode
(whichever test file runs first).

`dormouse train` ends with the compressor-like score of its held-out sample (up to 4 MiB); the suite's tiny runs are
scored on a keyed 32 KiB of it (subprocesses inherit the variable), so the score costs them a second, not a minute.

`ref` is one uninterrupted tiny run (REF_CFG) that the resume and verify tests copy (`testing.stopped_at`) and never
write: made once per worker process, not once per test file."""

import os

import pytest

from dormouse.numerics import thread_invariant_mode
from dormouse.testing import tiny_cfg
from dormouse.train import fit

os.environ.setdefault("DORMOUSE_SCORE_BYTES", str(32 << 10))
os.environ.setdefault("DORMOUSE_SCORE_MIX", "0")  # the count mix reads all the training text; tests needing it set 1
thread_invariant_mode()

REF_CFG = tiny_cfg(steps=30, ckpt_every=10, log_every=5, keep_ckpts=10)  # the reference run's plan


@pytest.fixture(scope="session")
def ref(tmp_path_factory):
    "An uninterrupted tiny run of REF_CFG (checkpoints at 10, 20, 30; fingerprints every 5): copied, never written."
    run = tmp_path_factory.mktemp("ref") / "ref"
    fit(REF_CFG, run, progress=False)
    return run


# The suite's longest tests (a minute or more of one core each, in subprocesses): given out first, so that two workers
# end together instead of one finishing a long test alone at the end. Order only; every test still runs.
LONG_FIRST = ("tests/test_kill9.py", "tests/test_corpus_scale.py", "tests/test_ddp.py", "tests/test_docs_site.py",
              "tests/test_resume_matrix.py", "tests/test_track_resume.py", "tests/test_signals.py")


def pytest_collection_modifyitems(config, items):
    "Under xdist, collect the long tests first (a stable sort: the same order on every worker); else keep the order."
    if not getattr(config.option, "numprocesses", None):
        return  # one process (a mutant's kill set under -x): its first listed test kills first, as it was written
    items.sort(key=lambda item: next((i for i, f in enumerate(LONG_FIRST) if item.nodeid.startswith(f)),
                                     len(LONG_FIRST)))


def pytest_configure(config):
    config.addinivalue_line("markers", "default_size: the default model size (seconds each): kept few")
    config.addinivalue_line(
        "markers", "jupyterlab: drives JupyterLab in headless Chromium (run it alone: pytest -m jupyterlab tests)"
    )
