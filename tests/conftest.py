"""pytest configuration for dormouse's suite. The shared helpers (tiny configs, the one bitwise comparison of runs and
checkpoints) live in `dormouse.testing`, so tests and notebooks use the same ones.

MKL fixes its reproducibility mode at its first call, for the life of the process. `fit` applies the thread-invariant
mode when it is the first to call MKL, and a `dormouse` subprocess always is; so the suite's own process applies it
before any test runs a matrix product, and every run a test makes, in-process or not, computes under the same mode
(whichever test file runs first)."""

from dormouse.numerics import thread_invariant_mode

thread_invariant_mode()
