"""The Jupyter live panel draws from metrics rows without a kernel-side error (smoke test outside a notebook)."""

import matplotlib

matplotlib.use("Agg")

from dormouse.view import LivePanel
from dormouse.train import fit
from dormouse.testing import tiny_cfg


def test_live_panel_draws_rows(tmp_path):
    df = fit(tiny_cfg(steps=12), tmp_path / "r", progress=False)
    panel = LivePanel()
    rows = df.to_dict("records")
    panel.update(rows[:1])  # too soon after construction? it draws the first time: last starts at 0
    first = panel.last
    assert first > 0, "the panel did not draw"
    panel.update(rows)  # within a second: throttled, no redraw
    assert panel.last == first
    panel.update(rows, force=True)
    assert panel.last >= first
