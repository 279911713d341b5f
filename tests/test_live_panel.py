"""The live panel, through IPython's display machinery in this process: two outputs (the figure and the progress line),
each updated in place by its display id, every bundle with a text/plain fallback and no widget; the figure is drawn at
the first refresh, at most once a second after it, and always at the end."""

import base64

import pytest

import dormouse.view as view
from dormouse.testing import tiny_cfg
from dormouse.train import fit
from dormouse.view import LivePanel, Progress, progress_line

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def shell():
    "An IPython shell whose display outputs are captured (the panel's `display` needs one); gone again afterwards."
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    try:
        with capture_output(display=True) as cap:
            yield cap
    finally:
        InteractiveShell.clear_instance()


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return fit(tiny_cfg(steps=12), tmp_path_factory.mktemp("panel") / "r", progress=False).to_dict("records")


def ids(cap):
    return [o.transient["display_id"] for o in cap.outputs]


def test_panel_is_two_outputs_updated_in_place_with_text_fallbacks(shell, rows, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(view.time, "time", lambda: clock[0])  # the throttle reads this clock, nothing else moves it
    panel = LivePanel("train r: step 0/12", 0, 12)
    first = ids(shell)
    assert len(first) == 2 and len(set(first)) == 2, first
    assert not any(o.update for o in shell.outputs), "the panel's outputs are new, not updates"
    figure_id, line_id = first
    line = progress_line("r", 5, 12, rows[4], 100.0, 7.0)
    panel.update(line, 5, rows[:5])  # the first refresh draws the figure
    clock[0] += 0.5
    panel.update("the second line", 10, rows[:10])  # half a second later: the line, not the figure
    clock[0] += 0.6
    panel.update("the third line", 11, rows[:11])  # 1.1 s after the drawing: the figure again
    panel.update("the last line", 12, rows, force=True)  # the end: always drawn
    ups = shell.outputs[2:]
    assert all(o.update for o in ups) and set(ids(shell)) == {figure_id, line_id}
    drawn = [o for o in ups if o.transient["display_id"] == figure_id]
    lines = [o.data["text/plain"] for o in ups if o.transient["display_id"] == line_id]
    assert lines == [line, "the second line", "the third line", "the last line"]
    assert len(drawn) == 3, [o.data.get("text/plain") for o in drawn]
    assert drawn[-1].data["text/plain"].endswith("at step 12)")
    for o in drawn:
        assert base64.b64decode(o.data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    last = [o for o in ups if o.transient["display_id"] == line_id][-1].data
    assert '<progress value="12" max="12"' in last["text/html"] and "the last line" in last["text/html"]
    for o in shell.outputs:
        assert o.data.get("text/plain") and WIDGET_MIME not in o.data, o.data


def test_progress_in_a_kernel_is_the_panel_and_ends_with_the_last_line(shell, rows):
    ui = Progress("r", 0, 12, 5, 128, kind="notebook")
    assert ui.bar is None and ui.panel is not None
    for i, row in enumerate(rows[:7]):  # stopped after 7 steps, between two refreshes
        ui.update(row, rows[: i + 1])
    ui.close(rows[:7])
    line_id = ids(shell)[1]
    lines = [o.data["text/plain"] for o in shell.outputs if o.transient["display_id"] == line_id]
    assert [x.split("  ")[0] for x in lines] == ["train r: step 0/12", "train r: step 5/12", "train r: step 7/12"]
    assert lines[-1].startswith(f"train r: step 7/12  loss {rows[6]['loss']:.4f}  ")
