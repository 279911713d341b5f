"""The run in TensorBoard, in a real browser: `dormouse train --track tensorboard` SIGKILLed after its checkpoint at
step 10 with steps 10-13 logged, then resumed to step 30; `tensorboard --logdir RUN_DIR` on 127.0.0.1 (a free port,
TensorBoard's default data server) serves one value per step over HTTP, equal to metrics.jsonl's as float32; and its
scalars page, opened in headless Chromium through playwright, draws the loss with no failed request and no console
error. The screenshot of the curve across the kill and the resume goes to tmp_path and tests/artifacts/ (gitignored);
the TensorBoard chapter shows a copy. Missing playwright or Chromium is a failure that names what to install."""

import importlib.util, json, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path

import numpy as np
import pytest

from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import held_train_cmd, save_snapshot, tiny_cfg, train_cmd
from dormouse.track_tensorboard import read_scalars

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# a seconds-scale plan, written by save_snapshot
CONFIG = tiny_cfg(steps=30, ckpt_every=10, eval_every=10, eval_batches=1, eval_depths=[1])
PAGE = "/#scalars&_smoothingWeight=0&tagFilter=%5Eloss%24"  # the scalars page, smoothing off, the loss first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(what: str, ok, timeout: float = 120):
    t0 = time.time()
    while not (got := ok()):
        assert time.time() - t0 < timeout, f"no {what} after {timeout} s"
        time.sleep(0.1)
    return got


def get(url: str):
    try:
        return json.loads(urllib.request.urlopen(url, timeout=2).read())
    except OSError:
        return None


@pytest.fixture
def killed_and_resumed(tmp_path):
    "A run with the TensorBoard tracker, SIGKILLed after step 13 (checkpoint at 10, shown to 13), resumed to 30."
    cfg_file, run, flag = tmp_path / "cfg.toml", tmp_path / "run", tmp_path / "hold"
    save_snapshot(CONFIG, cfg_file)
    proc = subprocess.Popen(held_train_cmd(cfg_file, run, "--track", "tensorboard", at=14, flag=flag),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until("the hold", lambda: flag.with_suffix(".reached").exists() or proc.poll() is not None)
        assert proc.poll() is None, f"training exited ({proc.returncode}) before the hold"
        until("the checkpoint at step 10", lambda: (RunPaths(run).ckpt_dir / "step_000010.dmck").exists())
        until("TensorBoard's step 13", lambda: [s for s, _ in read_scalars(run / "tensorboard").get("loss", [])][-1:]
              == [13])
    finally:
        proc.kill()
        proc.wait()
    r = subprocess.run(train_cmd(cfg_file, run, "--resume", "--track", "tensorboard"), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "at step 10 from step_000010.dmck" in r.stdout, r.stdout + r.stderr
    return run


def test_tensorboard_serves_one_value_per_step_and_its_scalars_page_draws_the_curve(killed_and_resumed, tmp_path):
    for module, install in (("playwright", "pip install playwright (the dev extras bring it)"),):
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"{module} is not installed: {install}", pytrace=False)
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: apt-get install chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    run, port = killed_and_resumed, free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until("the scalars plugin's loss", lambda: "loss" in (get(f"{base}/data/plugin/scalars/tags") or {}).get(
            "tensorboard", {}))
        rows = read_jsonl(RunPaths(run).metrics)
        served = get(f"{base}/data/plugin/scalars/scalars?run=tensorboard&tag=loss")
        assert [(s, v) for _, s, v in served] == [(r["step"], float(np.float32(r["loss"]))) for r in rows]
        assert [s for _, s, _ in served] == list(range(30))  # one value per step across the kill and the resume
        problems = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 640})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("requestfailed", lambda q: problems.append(f"request failed: {q.url}"))
            page.goto(base + PAGE, wait_until="networkidle")
            page.get_by_text("tag: loss").first.wait_for(timeout=30_000)
            curve = page.locator("svg path.line").first
            curve.wait_for(timeout=30_000)
            time.sleep(1)  # the chart's last draw
            shot = tmp_path / "track_tensorboard.png"
            page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 1100, "height": 490})
            browser.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, ARTIFACTS / shot.name)
        assert not problems, problems
        assert shot.stat().st_size > 10_000
    finally:
        server.terminate()
        server.wait(timeout=30)
