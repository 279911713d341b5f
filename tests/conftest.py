"""pytest configuration for dormouse's suite. The shared helpers (tiny configs, the one bitwise comparison of runs and
checkpoints) live in `dormouse.testing`, so tests and notebooks use the same ones."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "jupyterlab: drives JupyterLab in headless Chromium (run it alone: pytest -m jupyterlab tests)"
    )
