"""pytest configuration for dormouse's suite. The shared helpers (tiny configs, the one bitwise comparison of runs and
checkpoints) live in `dormouse.testing`, so tests and notebooks use the same ones."""
