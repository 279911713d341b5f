"""The caller's process is left as found, in-process and in a real Jupyter kernel: `fit` restores torch's threads,
deterministic mode and matmul precision (on return and on exception); in a kernel it shows its live panel, and an
interrupt stops it at a step boundary with a checkpoint that the next cell resumes bitwise."""

import asyncio, inspect, signal, threading, time

import pytest
import torch

from dormouse.config import ConfigError
from dormouse.container import load_ckpt
from dormouse.rundir import RunPaths, read_jsonl
from dormouse.testing import assert_same_run, is_prep, tiny_cfg
from dormouse.train import fit


def caller_state():
    return (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        signal.getsignal(signal.SIGINT),
        signal.getsignal(signal.SIGTERM),
    )


def test_fit_leaves_the_caller_as_found_on_return_and_on_exception(tmp_path):
    n, prec = torch.get_num_threads(), torch.get_float32_matmul_precision()
    try:
        torch.set_num_threads(2)
        torch.set_float32_matmul_precision("high")
        before = caller_state()
        fit(tiny_cfg(steps=4, ckpt_every=2), tmp_path / "r", progress=False)  # threads=1, deterministic inside
        assert caller_state() == before
        with pytest.raises(ConfigError):  # refused after the scope was entered: below the reached step
            fit(tiny_cfg(steps=2, ckpt_every=2), tmp_path / "r", resume=True, progress=False)
        assert caller_state() == before
    finally:
        torch.set_num_threads(n)
        torch.set_float32_matmul_precision(prec)


N_LONG = 150  # the interrupted run's steps: it is stopped after 15
LONG_PLAN = dict(steps=N_LONG, ckpt_every=1000, eval=False)  # the kernel's run, and the reference trained here
LONG = f"tiny_cfg(**{LONG_PLAN!r})"
CELLS = [
    "import torch\nfrom dormouse.train import fit\nfrom dormouse.testing import tiny_cfg\ntorch.set_num_threads(2)",
    # the default progress: the live panel
    "df = fit(tiny_cfg(steps=12, log_every=2), RUN + '/panel')\n"
    "print('after fit:', torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(), len(df))",
    "try:\n    fit(tiny_cfg(steps=12, seed=2), RUN + '/panel', resume=True)\nexcept Exception as e:\n"
    "    print('refused:', type(e).__name__)\n"
    "print('after refusal:', torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())",
    f"df = fit({LONG}, RUN + '/long', progress=False)\nprint('attrs:', df.attrs, len(df))",
    f"df = fit({LONG}, RUN + '/long', resume=True, progress=False)\n"
    "print('resumed:', len(df), df.attrs['interrupted'])",
]
INTERRUPTED = 3


def text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_fit_in_a_real_kernel_restores_threads_shows_the_panel_and_an_interrupt_resumes_bitwise(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    run = tmp_path / "runs"
    cells = [f"RUN = {str(run)!r}\n" + CELLS[0], *CELLS[1:]]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        nb, timeout=300, startup_timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    interrupted = []

    def interrupt_when_training():
        t0 = time.time()
        while len(read_jsonl(RunPaths(run / "long").metrics)) < 15 and time.time() - t0 < 120:
            time.sleep(0.01)
        sent = client.km.interrupt_kernel()  # SIGINT to the kernel, as the notebook's stop button sends
        if inspect.isawaitable(sent):
            asyncio.run(sent)
        interrupted.append(time.time())

    try:
        ctx = client.setup_kernel()
        ctx.__enter__()
    except Exception as e:  # no kernel on this machine
        pytest.skip(f"no Jupyter kernel could start: {e}")
    try:
        for i, cell in enumerate(nb.cells):
            if i == INTERRUPTED:
                threading.Thread(target=interrupt_when_training, daemon=True).start()
            client.execute_cell(cell, i)
        client.set_widgets_metadata()
    finally:
        ctx.__exit__(None, None, None)
    out = [text(c) for c in nb.cells]
    assert "after fit: 2 False 12" in out[1], out[1]
    assert "refused: DriftError" in out[2] and "after refusal: 2 False" in out[2], out[2]
    # the live panel: the figure and the progress line, each one output updated in place (no widget)
    shown = [o.data for o in nb.cells[1].outputs if o.output_type == "display_data" and not is_prep(o)]
    assert ["image/png" in d for d in shown] == [True, False], shown
    assert shown[1]["text/plain"].startswith("train panel: step 12/12"), shown[1]
    # the interrupt: a clean stop at a step boundary with a checkpoint, then the next cell resumes it
    assert interrupted, "the interrupt was never sent"
    assert "'interrupted': True, 'signal': 'SIGINT'" in out[3] and "Traceback" not in out[3], out[3]
    stopped = int(out[3].split()[-1])  # rows when the interrupted cell returned
    assert 15 <= stopped < N_LONG, out[3]
    cks = RunPaths(run / "long").checkpoints()  # ckpt_every is past the end: the stop's and the final one
    assert [load_ckpt(p).step for p in cks] == [stopped, N_LONG], cks
    assert f"resumed: {N_LONG} False" in out[4], out[4]
    lineage = read_jsonl(RunPaths(run / "long").lineage)
    assert [(s["kind"], s["start_step"]) for s in lineage] == [("fresh", 0), ("resume", stopped)], lineage
    fit(tiny_cfg(**LONG_PLAN), tmp_path / "ref", progress=False)
    assert_same_run(tmp_path / "ref", run / "long")
