"""`serve` under load and abuse, in-process on loopback: the listen backlog, a body that stops short (408), JSON nested
too deeply (400), no traceback on stderr, and host/port errors raised before anything is loaded.

The server runs in a thread of the test process; every socket is bound to 127.0.0.1 and every wait is bounded.
"""

import base64, contextlib, json, select, socket, subprocess, sys, threading, time
from pathlib import Path

import pytest

from dormouse.infer import InferenceError, generate, load_model_weights
from dormouse.serve import ServeError, make_server
from dormouse.train import fit
from dormouse.testing import tiny_cfg

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 64  # concurrent clients the backlog must take
WAIT = 30  # seconds any one socket operation may take before the test fails


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    run = tmp_path_factory.mktemp("infer_serve") / "r"
    fit(tiny_cfg(steps=10), run, progress=False)
    ckpt = run / "ckpt" / "step_000010.dmck"
    return ckpt, load_model_weights(ckpt)


@contextlib.contextmanager
def running(server):
    "Serve in a daemon thread; shut down and close on exit."
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        th.join(WAIT)


def raw_request(port: int, data: bytes, half_close: bool = False) -> tuple[int, dict, float]:
    "(status, JSON body, seconds) of one request sent as raw bytes over a fresh loopback connection."
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        resp = b""
        while chunk := s.recv(65536):
            resp += chunk
    head, _, body = resp.partition(b"\r\n\r\n")
    assert b"\n" not in body.strip(), f"the JSON error is not one line: {body!r}"
    return int(head.split()[1]), json.loads(body), time.monotonic() - t0


def post(path: str, body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n".encode()
        + body
    )


def test_backlog_holds_64_clients_before_the_first_accept(model):
    """All 64 handshakes complete while the server is bound but not yet accepting: the kernel queue holds them
    (backlog 5 held 6)."""
    _, m = model
    server = make_server(m, port=0, quiet=True)
    socks = []
    try:
        for _ in range(CLIENTS):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            socks.append(s)
            assert s.connect_ex(("127.0.0.1", server.port)) in (0, 115)  # 115: EINPROGRESS
        pending, deadline = set(socks), time.monotonic() + 3  # a dropped SYN is retried after 1 s: 3 s covers one retry
        while pending and time.monotonic() < deadline:
            _, ready, _ = select.select([], list(pending), [], 0.1)
            pending -= set(ready)
        errors = [s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for s in socks]
        assert not pending and errors == [0] * CLIENTS, f"{len(pending)} handshakes pending, errors {set(errors)}"
        body = json.dumps({"prompt": "ab", "max_bytes": 2, "seed": 3}).encode()
        with running(server):
            for s in socks:
                s.setblocking(True)
                s.settimeout(WAIT)
                s.sendall(post("/generate", body))
            answers = []
            for s in socks:
                resp = b""
                while chunk := s.recv(65536):
                    resp += chunk
                answers.append(resp)
        want = generate(m, "ab", max_bytes=2, seed=3)
        for resp in answers:
            assert resp.startswith(b"HTTP/1.0 200"), resp[:200]
            assert base64.b64decode(json.loads(resp.partition(b"\r\n\r\n")[2])["completion_b64"]) == want
    finally:
        for s in socks:
            s.close()
        server.server_close()


def test_short_body_is_408_after_the_read_timeout(model):
    _, m = model
    with running(make_server(m, port=0, quiet=True, read_timeout=0.5)) as server:
        st, out, took = raw_request(server.port, post("/generate", b'{"prompt": "a"', length=40))
        assert (st, out["status"], out["field"]) == (408, 408, "body"), out
        assert "14 of its 40 bytes" in out["error"], out
        assert 0.4 < took < 10, took
        # a client that closes early is a 400, at once
        st, out, took = raw_request(server.port, post("/generate", b'{"prompt": "a"', length=40), half_close=True)
        assert (st, out["field"]) == (400, "body") and "ended after 14" in out["error"], out
        assert took < 5, took


def test_trickled_body_is_cut_off_at_the_read_timeout(model):
    "The timeout bounds the whole body, not each read: one byte every 0.2 s does not keep the connection for ever."
    _, m = model
    with running(make_server(m, port=0, quiet=True, read_timeout=1.0)) as server:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as s:
            s.sendall(post("/generate", b"", length=100))
            for _ in range(40):  # 8 s of trickle if the server let it
                try:
                    s.sendall(b" ")
                except OSError:
                    break
                r, _, _ = select.select([s], [], [], 0.2)
                if r:
                    break
            resp = s.recv(65536)
        assert resp.startswith(b"HTTP/1.0 408"), resp[:200]
        assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("body", [b"[" * 60_000, b'{"prompt": ' + b"[" * 60_000, b"{" * 60_000])
def test_deep_nesting_is_400(model, body):
    _, m = model
    with running(make_server(m, port=0, quiet=True, max_body=1 << 17)) as server:
        st, out, _ = raw_request(server.port, post("/generate", body))
        assert (st, out["status"], out["field"]) == (400, 400, "body"), out
        assert "nested too deeply" in out["error"] or "not valid JSON" in out["error"], out


def test_no_traceback_on_stderr(model, capfd):
    "Every error path answers JSON; clients that vanish or stall leave at most a log line, never a traceback."
    _, m = model
    with running(make_server(m, port=0, quiet=False, read_timeout=0.5)) as server:
        port = server.port
        assert raw_request(port, post("/generate", b"[" * 60_000))[0] == 400
        assert raw_request(port, post("/generate", b'{"prompt"', length=50))[0] == 408
        assert raw_request(port, post("/generate", b'{"prompt": "\\ud800"}'))[0] in (200, 400)
        assert raw_request(port, b"GET /health HTTP/1.x\r\n\r\n")[0] == 400
        assert raw_request(port, post("/generate", json.dumps({"prompt": "a", "max_bytes": 3}).encode()))[0] == 200
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:  # sends a request and leaves at once
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.sendall(post("/generate", json.dumps({"prompt": "a", "max_bytes": 50}).encode()))
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:  # stalls in the headers
            s.sendall(b"POST /generate HTTP/1.0\r\n")
            time.sleep(1.0)
        time.sleep(0.5)
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    assert "408" in err and "400" in err  # the log lines are there (quiet=False)


def test_bad_port_and_host_fail_before_loading(tmp_path):
    "The address is checked (and bound) first: a missing checkpoint is not even looked at."
    missing = tmp_path / "nope.dmck"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        for kw, want in [
            (dict(port=port), "in use"),
            (dict(port=99999), "not a TCP port"),
            (dict(port=-1), "not a TCP port"),
            (dict(port="80"), "not a TCP port"),
            (dict(host="no-such-host.invalid"), "does not resolve"),
            (dict(host="8.8.8.8", port=0), "not an address of this machine"),
            (dict(read_timeout=0), "read_timeout"),
            (dict(max_body=0), "max_body"),
        ]:
            with pytest.raises(ServeError, match=want) as e:
                make_server(missing, **({"port": 0} | kw), quiet=True)
            assert isinstance(e.value, InferenceError) and isinstance(e.value, ValueError)
            assert "\n" not in str(e.value) and ("use" in str(e.value) or "pick" in str(e.value)), str(e.value)
    with pytest.raises(FileNotFoundError):  # a good address: now the checkpoint is read
        make_server(missing, port=0, quiet=True)


@pytest.mark.parametrize(
    "args,want",
    [
        (["--port", "99999"], "not a TCP port"),
        (["--host", "no-such-host.invalid"], "does not resolve"),
        (["--port", "BUSY"], "in use"),
    ],
)
def test_cli_serve_address_errors_are_one_line(tmp_path, args, want):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        args = [str(busy.getsockname()[1]) if a == "BUSY" else a for a in args]
        r = subprocess.run(
            [sys.executable, "-m", "dormouse.cli", "serve", "--ckpt", str(tmp_path / "nope.dmck"), *args],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            text=True,
        )
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and want in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout == "" and list(tmp_path.iterdir()) == []
