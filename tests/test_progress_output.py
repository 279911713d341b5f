"""Every front end gets sensible progress: a pipe or a log file one plain line per log step (no carriage return), a
terminal the tqdm bar, and a notebook executed without a widget front end (nbclient, as nbconvert and the docs run it)
the progress line and the final figure, never a widget or its repr."""

import base64, fcntl, json, os, pty, re, select, struct, subprocess, sys, termios

import pytest

from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import is_prep, save_snapshot, tiny_cfg

CONFIG = tiny_cfg(steps=30, ckpt_every=10, eval=False)  # a seconds-scale plan, written by save_snapshot
LINE = re.compile(r"^train run: step (\d+)/30  loss (\d+\.\d{4})  [\d,]+ tok/s  eta \d+:\d\d(:\d\d)?  quant \w+$")
WIDGET_TEXT = ("HBox(", "Output()", "FloatProgress(", "IntProgress(", "Loading widget", "widget-view")


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("progress") / "cfg.toml"
    save_snapshot(CONFIG, p)
    return p


def train(cfg_file, run_dir) -> list[str]:
    "`dormouse train` with the default progress (no --quiet)."
    return [sys.executable, "-m", "dormouse.cli", "train", "--config", str(cfg_file), "--run-dir", str(run_dir)]


def losses(run_dir) -> list[str]:
    return [f"{r['loss']:.4f}" for r in read_jsonl(RunPaths(run_dir).metrics)]


def check_lines(text: str, run_dir) -> None:
    "Exactly one plain line per log step, each with the step's loss as the run logged it, and no carriage return."
    assert "\r" not in text, "a carriage return in a log"
    lines = [x for x in text.splitlines() if x.startswith("train ")]
    bad = [x for x in lines if not LINE.match(x)]
    assert not bad, bad
    got = [(int(LINE.match(x)[1]), LINE.match(x)[2]) for x in lines]
    want = losses(run_dir)
    assert got == [(s, want[s - 1]) for s in range(5, 31, 5)], got


def test_a_pipe_gets_one_plain_line_per_log_step(cfg_file, tmp_path):
    r = subprocess.run(train(cfg_file, tmp_path / "run"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    check_lines(r.stderr, tmp_path / "run")
    assert "\r" not in r.stdout and "step 30/30" in r.stdout, r.stdout


def test_a_log_file_gets_one_plain_line_per_log_step(cfg_file, tmp_path):
    log = tmp_path / "log"
    cmd = " ".join(map(str, train(cfg_file, tmp_path / "run"))) + f" > {log} 2>&1"  # `dormouse train > log 2>&1`
    r = subprocess.run(["bash", "-c", cmd], timeout=300)
    text = log.read_text()
    assert r.returncode == 0, text
    check_lines(text, tmp_path / "run")
    assert len(text.splitlines()) < 20, text  # six progress lines and the summary, not a redraw per step


def test_a_terminal_gets_the_tqdm_bar(cfg_file, tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal window's size
    proc = subprocess.Popen(train(cfg_file, tmp_path / "run"), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 300)
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        proc.wait(timeout=60)
    out = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, out
    assert "\r" in out and "30/30" in out and "step/s" in out, out  # the bar, redrawn in place
    assert f"loss={losses(tmp_path / 'run')[-1]}" in out, out
    assert not [x for x in out.splitlines() if LINE.match(x.strip())], "plain lines on a terminal"


def test_a_notebook_without_widgets_shows_the_line_and_the_figure(tmp_path):
    import nbclient, nbformat  # the dev extras: pip install -e ".[dev]"
    from nbconvert import HTMLExporter

    src = "from dormouse.testing import tiny_cfg\nfrom dormouse.train import fit\ndf = fit(tiny_cfg(steps=12), 'run')"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src)])
    nbclient.NotebookClient(
        nb, timeout=300, startup_timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outs = [o for o in nb.cells[0].outputs if not is_prep(o)]  # the corpus's preparation bars may come first
    assert [o.output_type for o in outs] == ["display_data", "display_data"], outs  # updated in place: two outputs
    for o in outs:
        assert o.data.get("text/plain"), o
        assert not [k for k in o.data if "widget" in k], o.data
    saved = json.dumps(nb)
    assert not [w for w in WIDGET_TEXT if w in saved], [w for w in WIDGET_TEXT if w in saved]
    figure, line = (o.data for o in outs)
    assert base64.b64decode(figure["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    last = read_jsonl(RunPaths(tmp_path / "run").metrics)[-1]
    assert line["text/plain"].startswith(f"train run: step 12/12  loss {last['loss']:.4f}  "), line
    assert '<progress value="12" max="12"' in line["text/html"]
    page, _ = HTMLExporter().from_notebook_node(nb)  # the docs site's rendering of the same outputs
    assert "data:image/png;base64," in page and "train run: step 12/12" in page
    assert not [w for w in WIDGET_TEXT if w in page]
