"""pytest configuration for dormouse's suite. The shared helpers (tiny configs, the one bitwise comparison of runs and
checkpoints) live in `dormouse.testing`, so tests and notebooks use the same ones.

MKL fixes its reproducibility mode at its first call, for the life of the process. `fit` applies the thread-invariant
mode when it is the first to call MKL, and a `dormouse` subprocess always is; so the suite's own process applies it
before any test runs a matrix product, and every run a test makes, in-process or not, computes under the same mode
(whichever test file runs first).

`dormouse train` ends with the compressor-like score of its held-out sample (up to 4 MiB); the suite's tiny runs are
scored on a keyed 32 KiB of it (subprocesses inherit the variable), so the score costs them a second, not a minute."""

import os

from dormouse.numerics import thread_invariant_mode

os.environ.setdefault("DORMOUSE_SCORE_BYTES", str(32 << 10))
thread_invariant_mode()


def pytest_configure(config):
    config.addinivalue_line("markers", "default_size: the default model size (seconds each): kept few")
    config.addinivalue_line(
        "markers", "jupyterlab: drives JupyterLab in headless Chromium (run it alone: pytest -m jupyterlab tests)"
    )
