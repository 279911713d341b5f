"""Inference leaves the caller's process as found: torch threads, deterministic mode, matmul precision and environment
after `load_model_weights`, `generate` (also a stream abandoned halfway) and `serve`, on return and on exception; and a
prompt that is not UTF-8 text is raw bytes or one clear error."""

import os, threading, urllib.request

import pytest
import torch

from dormouse.config import ConfigError
from dormouse.infer import FORWARD_LOCK, GenerateArgError, InferenceError, generate, load_model_weights
from dormouse.serve import ServeError, serve
from dormouse.numerics import numeric_scope
from dormouse.train import fit
from dormouse.testing import tiny_cfg


def state() -> tuple:
    return (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    run = tmp_path_factory.mktemp("infer_numeric") / "r"
    fit(tiny_cfg(steps=10), run, progress=False)  # tiny_cfg trains on threads=1
    return run / "ckpt" / "step_000010.dmck"


@pytest.fixture
def caller():
    "The caller's settings: 2 threads, deterministic off, 'high' precision; the test's own state comes back afterwards."
    saved = state()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(False)
    torch.set_float32_matmul_precision("high")
    try:
        yield state()
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
        torch.set_float32_matmul_precision(saved[2])


def test_numeric_scope_sets_and_restores(caller):
    with numeric_scope(threads=1, env={"DORMOUSE_T": "on", "CUBLAS_WORKSPACE_CONFIG": ":16:8"}):
        assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (1, True)
        assert os.environ["DORMOUSE_T"] == "on" and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
        torch.set_float32_matmul_precision("medium")
    assert state() == caller and "DORMOUSE_T" not in os.environ
    with pytest.raises(RuntimeError, match="inside"):
        with numeric_scope(threads=1):
            torch.set_num_threads(3)
            raise RuntimeError("inside")
    assert state() == caller
    with pytest.raises(ConfigError, match="threads=0"):  # before anything changes
        with numeric_scope(threads=0):
            pass
    assert state() == caller


def test_load_and_generate_leave_the_caller_as_found(ckpt, caller):
    m = load_model_weights(ckpt)
    assert state() == caller and m.threads == 1  # the run's threads are the forward's, not the caller's
    a = generate(m, "def ", max_bytes=16, seed=3)
    assert state() == caller
    assert b"".join(generate(m, "def ", max_bytes=16, seed=3, stream=True)) == a
    assert state() == caller
    assert load_model_weights(ckpt, threads=0).threads is None
    assert (
        generate(load_model_weights(ckpt, threads=0), "def ", max_bytes=16, seed=3) == a
    )  # threads never change bytes
    assert state() == caller


def test_restored_after_an_exception(ckpt, caller, monkeypatch):
    with pytest.raises(InferenceError, match="depth=0"):
        load_model_weights(ckpt, depth=0)  # fails after the weights are loaded
    assert state() == caller
    m = load_model_weights(ckpt)

    def boom(*a, **k):
        raise FloatingPointError("in the forward")

    monkeypatch.setattr(m.model, "forward", boom)
    with pytest.raises(FloatingPointError, match="in the forward"):
        generate(m, "def ", max_bytes=4)
    assert state() == caller and not FORWARD_LOCK.locked()


def test_an_abandoned_stream_leaves_nothing(ckpt, caller):
    m = load_model_weights(ckpt)
    want = generate(m, "abc", max_bytes=32, seed=9)
    it = generate(m, "abc", max_bytes=32, seed=9, stream=True)
    assert next(it) == want[:1]
    assert state() == caller and not FORWARD_LOCK.locked()  # between chunks the caller's settings are back
    del it  # a consumer that stops (a closed pipe) and drops the stream
    assert state() == caller and not FORWARD_LOCK.locked()
    assert generate(m, "abc", max_bytes=32, seed=9) == want


def test_serve_leaves_the_caller_as_found(ckpt, caller):
    got = {}

    def ready(server):
        def client():
            with urllib.request.urlopen(server.url + "/health", timeout=30) as r:
                got["status"] = r.status
            server.shutdown()

        threading.Thread(target=client, daemon=True).start()

    serve(ckpt, port=0, ready=ready)
    assert got["status"] == 200 and state() == caller
    with pytest.raises(ServeError):
        serve(ckpt, port=99999)
    assert state() == caller


def test_prompt_that_is_not_utf8():
    "Bytes from the command line arrive as surrogate escapes: they are the same raw bytes; a lone surrogate is refused."
    from dormouse.infer import check_generate_args

    arg = os.fsdecode(b"\xff\xfe")  # what sys.argv holds for the bytes ff fe
    assert check_generate_args(arg, 1, 0.8, 0, 1) == b"\xff\xfe"
    with pytest.raises(GenerateArgError, match="lone surrogate") as e:
        check_generate_args("a\ud800", 1, 0.8, 0, 1)
    assert e.value.field == "prompt" and "\n" not in str(e.value)


def test_generate_on_raw_bytes(ckpt, caller):
    m = load_model_weights(ckpt)
    assert generate(m, os.fsdecode(b"\xff\xfe"), max_bytes=8, seed=2) == generate(m, b"\xff\xfe", max_bytes=8, seed=2)
    with pytest.raises(GenerateArgError):
        generate(m, "\ud800", max_bytes=8, stream=True)  # refused at the call, before a forward
    assert state() == caller
