"""dormouse in JupyterLab, in a real browser: the live panel renders (its figure and progress line, no widget
placeholder or repr) and a finished cell ends with the run's last line; Ctrl-C (the toolbar's interrupt) stops the
run with a checkpoint and says how to continue, and the next cell's resume is bitwise the run that never stopped; a
kernel killed with SIGKILL is restarted, and the resume cell is bitwise that run again.

JupyterLab runs on 127.0.0.1 with a free port, a random token, a scratch root directory and scratch Jupyter config,
data and runtime directories (the user's ~/.jupyter is never read or written); headless Chromium drives it through
playwright. Every moment the test acts on is made by the notebook itself: a cell holds its run after a given step
and writes a file saying so, and goes on only when the test writes the file it waits for. Screenshots go to the
test's tmp_path and to tests/artifacts/ (gitignored). Missing JupyterLab, playwright or Chromium is a failure that
names what to install, never a skip. Run it alone with `pytest -m jupyterlab tests`.
"""

import importlib.util, json, os, re, secrets, shutil, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path

import pytest

from dormouse.container import load_ckpt
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run

pytestmark = pytest.mark.jupyterlab

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
STEPS, CTRL_C_AT, KILL_AT = 40, 12, 25  # tiny_cfg: a checkpoint every 10 steps, a refresh every 5
WIDGET_TEXT = ("Loading widget", "HBox(children=", "Output()", "FloatProgress(", "IntProgress(")

SETUP = f"""import os, time
from contextlib import contextmanager
from pathlib import Path
from dormouse.testing import tiny_cfg
from dormouse.train import fit
import dormouse.view as view
Path("kernel.pid").write_text(str(os.getpid()))
cfg = tiny_cfg(steps={STEPS})

@contextmanager
def hold_after(step, name):
    "Test hook: once `step` steps are shown, write NAME.reached and wait for NAME.go (the test's moment to act)."
    shown = view.Progress.update
    def update(self, row, rows):
        shown(self, row, rows)
        if row["step"] + 1 == step:
            Path(name + ".reached").write_text(str(step))
            while not Path(name + ".go").exists():
                time.sleep(0.02)
    view.Progress.update = update
    try:
        yield
    finally:
        view.Progress.update = shown"""
CELLS = [
    SETUP,
    "full = fit(cfg, 'full')",
    f"with hold_after({CTRL_C_AT}, 'ctrlc'):\n    part = fit(cfg, 'ctrlc')\nprint(part.attrs)",
    "resumed = fit(cfg, 'ctrlc', resume=True)",
    f"with hold_after({KILL_AT}, 'killed'):\n    fit(cfg, 'killed')",
    "after_death = fit(cfg, 'killed', resume=True)",
]
WATCH_PROMPT = """el => { el.dmBusy = false;
  new MutationObserver(() => { if (el.textContent.includes("*")) el.dmBusy = true; })
    .observe(el, {childList: true, characterData: true, subtree: true}); }"""
RAN_PROMPT = "el => el.dmBusy === true && /^\\[\\d+\\]:$/.test(el.textContent.trim())"


def need(module: str, install: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: {install}", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    "Nothing listens on `port`: it binds as a server does (SO_REUSEADDR: a closed connection's TIME_WAIT owns none)."
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def notebook() -> dict:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": src} for i, src in enumerate(CELLS)]
    meta = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def write_settings(settings: Path) -> None:
    "Scratch JupyterLab settings: no news or update checks (offline), every cell rendered (no windowing)."
    for plugin, values in {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                                          "checkForUpdates": False},
                           "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"}}.items():
        p = settings / f"{plugin}.jupyterlab-settings"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(values))


def kill_processes_under(marker: str) -> None:
    "SIGKILL every process whose command line names `marker` (kernels name their connection file in our runtime dir)."
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                try:
                    os.kill(int(d.name), signal.SIGKILL)
                except OSError:
                    pass


@pytest.fixture
def lab(tmp_path):
    "A JupyterLab server of our own: (base url, token, root dir); stopped, its kernels gone and its port free after."
    need("jupyterlab", "pip install 'jupyterlab>=4.6,<5' (it is in the dev extras: pip install -e '.[dev]')")
    root, scratch = tmp_path / "root", tmp_path / "jupyter"
    root.mkdir()
    (root / "lab.ipynb").write_text(json.dumps(notebook()))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(scratch / "config"), "JUPYTER_DATA_DIR": str(scratch / "data"),
           "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(scratch / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"), "IPYTHONDIR": str(scratch / "ipython"),
           "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}  # the venv's kernel spec and extensions
    write_settings(scratch / "settings")
    port, token = free_port(), secrets.token_hex(16)
    log = open(tmp_path / "jupyterlab.log", "w")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly"]
    cmd += ["--allow-root"] if os.geteuid() == 0 else []  # CI runs as root
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        t0, said = time.time(), lambda: (tmp_path / "jupyterlab.log").read_text()
        while True:
            assert proc.poll() is None, f"JupyterLab exited ({proc.returncode}):\n{said()}"
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() - t0 < 90, f"JupyterLab did not answer in 90 s:\n{said()}"
            time.sleep(0.2)
        yield base, token, root
    finally:
        try:  # the server's own shutdown: it stops its kernels, then exits
            req = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST")
            urllib.request.urlopen(req, timeout=10).close()
            proc.wait(timeout=20)
        except Exception:
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything left in the server's process group
        except OSError:
            pass
        kill_processes_under(str(scratch / "runtime"))  # a kernel is in a session of its own
        log.close()
        t0 = time.time()
        while not port_is_free(port) and time.time() - t0 < 10:
            time.sleep(0.1)
        assert port_is_free(port), f"port {port} is still taken after JupyterLab was stopped"


@pytest.fixture
def page(tmp_path):
    need("playwright", "pip install playwright (the browser itself: apt-get install -y chromium)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get update && apt-get install -y chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            pg.set_default_timeout(60_000)
            yield pg
        finally:
            browser.close()


class Lab:
    "The notebook open in the page: run a cell, read its outputs, wait for what the page shows."

    def __init__(self, page, root: Path, shots: Path):
        self.page, self.root, self.shots = page, root, shots

    def cell(self, i: int):
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(i)

    def outputs(self, i: int) -> list[str]:
        return [t.strip() for t in self.cell(i).locator(".jp-OutputArea-output").all_inner_texts()]

    def status(self) -> str:
        "The kernel's status as the status bar says it ('Idle', 'Busy', ...); '' before a kernel is connected."
        said = re.search(r"Python 3 \(ipykernel\) \| (\w+)", self.page.locator("#jp-main-statusbar").inner_text())
        return said[1] if said else ""

    def wait(self, what: str, check, timeout: float = 120) -> None:
        t0 = time.time()
        while not check():
            if time.time() - t0 > timeout:
                self.shot("timeout")
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            self.page.wait_for_timeout(100)

    def wait_idle(self) -> None:
        self.wait("the kernel to be idle", lambda: self.status() == "Idle")

    def run(self, i: int, wait: bool = True) -> None:
        "Select cell `i` and run it with Shift+Enter, as a person does; wait until it has finished (or `finished`)."
        prompt = self.cell(i).locator(".jp-InputArea-prompt")
        prompt.evaluate(WATCH_PROMPT)  # a restarted kernel counts from 1 again: watch for the busy [*] in between
        prompt.click()
        self.page.keyboard.press("Shift+Enter")
        if wait:
            self.finished(i)

    def finished(self, i: int) -> None:
        "Wait until cell `i`, run by `run`, has been busy and shows its execution count."
        prompt = self.cell(i).locator(".jp-InputArea-prompt")
        self.wait(f"cell {i} to finish", lambda: prompt.evaluate(RAN_PROMPT))

    def reached(self, name: str) -> None:
        self.wait(f"{name}.reached", lambda: (self.root / f"{name}.reached").exists())

    def go(self, name: str) -> None:
        (self.root / f"{name}.go").write_text("")

    def shot(self, name: str) -> Path:
        p = self.shots / f"jupyterlab_{name}.png"
        self.page.screenshot(path=str(p), full_page=True)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(p, ARTIFACTS / p.name)
        print(f"screenshot: {p} (copy: {ARTIFACTS / p.name})")
        return p

    def no_widget_text(self) -> None:
        text = self.page.locator(".jp-NotebookPanel").inner_text()
        found = [w for w in WIDGET_TEXT if w in text]
        assert not found, f"the page shows {found}"

    def ends_with_last_line(self, i: int, run: str) -> str:
        "Cell `i`'s output ends with the progress line of the run's last step, as the run logged it."
        rows = read_jsonl(RunPaths(self.root / run).metrics)
        assert len(rows) == STEPS, len(rows)
        want = f"train {run}: step {STEPS}/{STEPS}  loss {rows[-1]['loss']:.4f}  "
        last = self.outputs(i)[-1]
        assert last.startswith(want), (last, want)
        return last


def test_jupyterlab_panel_ctrl_c_and_a_dead_kernel(lab, page, tmp_path):
    base, token, root = lab
    for old in ARTIFACTS.glob("jupyterlab_*.png"):  # this run's screenshots only, not a past failure's
        old.unlink()
    nb = Lab(page, root, tmp_path)
    page.goto(f"{base}/lab/tree/lab.ipynb?token={token}", wait_until="domcontentloaded")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
    nb.wait_idle()

    # the live panel: a figure and a progress line that reaches the last step, no widget anywhere
    nb.run(0)
    pid = int((root / "kernel.pid").read_text())
    nb.run(1)
    out1 = nb.cell(1).locator(".jp-OutputArea-output")
    img = out1.locator("img")
    assert img.count() == 1, nb.outputs(1)
    assert img.get_attribute("src").startswith("data:image/png;base64,")
    assert img.evaluate("e => e.complete && e.naturalWidth > 0"), "the panel's figure did not load"
    bar = out1.locator(".dormouse-progress", has_text="train full: ").locator("progress")  # past any preparation's
    assert bar.count() == 1 and bar.get_attribute("value") == bar.get_attribute("max") == str(STEPS)
    nb.ends_with_last_line(1, "full")
    nb.no_widget_text()
    nb.shot("panel")

    # Ctrl-C: the toolbar's interrupt while the run is held after step CTRL_C_AT
    nb.run(2, wait=False)
    nb.reached("ctrlc")
    page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']").click()
    nb.wait("the stop message", lambda: any("SIGINT: stopping after this step" in t for t in nb.outputs(2)))
    nb.go("ctrlc")
    nb.finished(2)
    text = "\n".join(nb.outputs(2))
    said = re.search(r"interrupted: checkpoint written at step (\d+); continue with resume=True", text)
    assert said, text
    n = int(said[1])
    assert n in (CTRL_C_AT, CTRL_C_AT + 1), text  # the step boundary after the signal: the one held or the next
    assert load_ckpt(RunPaths(root / "ctrlc").checkpoints()[-1]).step == n
    assert "'interrupted': True, 'signal': 'SIGINT'" in text and "Traceback" not in text, text
    nb.run(3)
    nb.ends_with_last_line(3, "ctrlc")
    assert_same_run(root / "full", root / "ctrlc")
    nb.shot("ctrl_c")

    # a dead kernel: SIGKILL while the run is held after step KILL_AT, once its step-20 checkpoint is on disk
    nb.run(4, wait=False)
    nb.reached("killed")
    nb.wait("the step-20 checkpoint", lambda: 20 in [int(p.stem[5:]) for p in RunPaths(root / "killed").checkpoints()])
    os.kill(pid, signal.SIGKILL)
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for()
    assert "appears to have died" in dialog.inner_text(), dialog.inner_text()
    nb.shot("dead_kernel")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    nb.wait_idle()
    nb.run(0)  # the restarted kernel is a new process: set up again, then the resume cell
    assert int((root / "kernel.pid").read_text()) != pid
    nb.run(5)
    nb.ends_with_last_line(5, "killed")
    lineage = read_jsonl(RunPaths(root / "killed").lineage)
    assert [(s["kind"], s["start_step"]) for s in lineage] == [("fresh", 0), ("resume", 20)], lineage
    assert_same_run(root / "full", root / "killed")
    nb.no_widget_text()
    nb.shot("final")
