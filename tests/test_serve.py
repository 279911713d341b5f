"""`dormouse serve` as a user runs it: a real subprocess on a loopback port, talked to over HTTP.

Health, completions that are a pure function of the seed (and equal to `generate` in-process and to
`dormouse generate`),
every kind of bad request answered with the right 4xx naming the field while the server keeps serving, eight threads
of concurrent requests each answered exactly as it is answered alone, a burst of 64 clients at once all answered 200 (no
connection resets), and no traceback in the server's output after all of it.
"""

import base64, http.client, json, os, socket, subprocess, sys, threading, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 120  # seconds for the server to load the checkpoint and answer /health
REQ_TIMEOUT = 60  # seconds per request


def _make_ckpt(run_dir: Path) -> Path:
    "A tiny trained run's last checkpoint (trainer), or, while the trainer is not importable, a fresh model's."
    try:
        from dormouse.train import fit
        from dormouse.testing import tiny_cfg
    except ImportError as e:  # build the run directory by hand: config.toml + container + tables file
        print(f"dormouse.train not importable ({e}); building a checkpoint from a fresh model")
        import torch
        from dormouse.testing import save_snapshot
        from dormouse.container import RunState
        from dormouse.numerics import numeric_env
        from dormouse.checkpoints import save_run_ckpt
        from dormouse.model import DormouseModel, init_params
        from dormouse.ngram import NgramTables
        from dormouse.config import ModelCfg, TrainCfg

        m = ModelCfg(
            d_model=32,
            n_heads=2,
            depth=2,
            factor_rank=16,
            mlp_mult=2,
            ngram_orders=[2, 3],
            ngram_slots=1024,
            ngram_dim=16,
        )
        cfg = TrainCfg(model=m, seq_len=32, batch=4, threads=1)
        (run_dir / "ckpt").mkdir(parents=True)
        save_snapshot(cfg, run_dir / "config.toml")
        model = init_params(DormouseModel(m), 1)
        tables = NgramTables.from_cfg(cfg)
        state = RunState(
            step=10,
            model=model.state_dict(),
            optim=torch.optim.AdamW(model.parameters()).state_dict(),
            teacher=None,
            flags=0,
            stress=None,
            table_step=0,
            env=numeric_env(threads=1),
        )
        return save_run_ckpt(run_dir / "ckpt", state, tables, keep=1)
    fit(tiny_cfg(steps=10), run_dir, progress=False)
    return run_dir / "ckpt" / "step_000010.dmck"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, path, body=None, method=None, headers=None):
    "(status, headers, parsed JSON body) of one request; HTTP errors are answers, not exceptions."
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=REQ_TIMEOUT) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, json.loads(e.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    ckpt = _make_ckpt(tmp / "r")
    assert ckpt.is_file(), ckpt
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc, log, url = None, tmp / "server.log", None
    try:
        for attempt in range(3):  # the free port can be taken between probing and binding: retry on another
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            with open(log, "wb") as lf:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "dormouse.cli", "serve", "--ckpt", str(ckpt), "--port", str(port)],
                    cwd=ROOT,
                    env=env,
                    stdout=lf,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    time.sleep(0.2)
            if proc.poll() is None:
                break
            if "Address already in use" not in log.read_text(errors="replace"):
                break
        if proc.poll() is not None or time.monotonic() >= deadline:
            pytest.fail(
                f"dormouse serve did not come up (exit code {proc.poll()}); its output:\n"
                f"{log.read_text(errors='replace')}"
            )
        yield url, ckpt, log
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        if log.exists():
            print("server output (tail):\n" + log.read_text(errors="replace")[-2000:])


def completion(url, **req):
    st, _, out = call(url, "/generate", req)
    assert st == 200, (st, out)
    b = base64.b64decode(out["completion_b64"])
    assert out["n_bytes"] == len(b) and out["completion"] == b.decode("utf-8", errors="replace")
    return b


def test_health(server):
    url, ckpt, _ = server
    from dormouse.infer import load_model_weights

    m = load_model_weights(ckpt)
    st, _, h = call(url, "/health")
    assert st == 200
    assert h["status"] == "ok" and h["step"] == 10 and h["container_version"] == 3
    assert h["parameters"] == m.parameters > 0
    assert h["ngram"] is True and h["quant"] == "fp32"


def test_generate_is_a_function_of_the_seed(server):
    url, ckpt, _ = server
    req = dict(prompt="def main():\n    ", max_bytes=48, temperature=0.9, top_k=0, seed=5)
    a = completion(url, **req)
    assert len(a) == 48
    assert completion(url, **req) == a
    assert completion(url, **{**req, "seed": 6}) != a  # 48 bytes from another key: equal with negligible probability
    st, _, out = call(url, "/generate", req)
    assert out["step"] == 10 and out["seed"] == 5 and out["max_bytes"] == 48
    # the same completion in-process, and from `dormouse generate`
    from dormouse.infer import generate, load_model_weights

    m = load_model_weights(ckpt)
    assert generate(m, req["prompt"], max_bytes=48, temperature=0.9, top_k=0, seed=5) == a
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dormouse.cli",
            "generate",
            "--ckpt",
            str(ckpt),
            "--prompt",
            req["prompt"],
            "--max-bytes",
            "48",
            "--temperature",
            "0.9",
            "--seed",
            "5",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout == req["prompt"].encode() + a + b"\n"  # the CLI shows the prompt, then its completion
    # greedy ignores the seed; defaults apply when fields are left out
    assert completion(url, prompt="abc", max_bytes=16, temperature=0, seed=1) == completion(
        url, prompt="abc", max_bytes=16, temperature=0, seed=2
    )
    assert completion(url, prompt="abc") == generate(m, "abc", max_bytes=200, temperature=0.8, top_k=0, seed=1)


BAD = [  # (method, path, body, headers, status, field)
    ("POST", "/generate", b'{"prompt": "a", ', None, 400, "body"),
    ("POST", "/generate", b"[1, 2]", None, 400, "body"),
    ("POST", "/generate", b"\xff\xfe{}", None, 400, "body"),
    ("POST", "/generate", {"max_bytes": 5}, None, 400, "prompt"),
    ("POST", "/generate", {"prompt": 5}, None, 400, "prompt"),
    ("POST", "/generate", {"prompt": ""}, None, 400, "prompt"),
    ("POST", "/generate", {"prompt": "a", "max_bytes": "10"}, None, 400, "max_bytes"),
    ("POST", "/generate", {"prompt": "a", "max_bytes": True}, None, 400, "max_bytes"),
    ("POST", "/generate", {"prompt": "a", "max_bytes": -1}, None, 400, "max_bytes"),
    ("POST", "/generate", {"prompt": "a", "max_bytes": 2049}, None, 400, "max_bytes"),
    ("POST", "/generate", {"prompt": "a", "temperature": "hot"}, None, 400, "temperature"),
    ("POST", "/generate", {"prompt": "a", "temperature": -1}, None, 400, "temperature"),
    ("POST", "/generate", b'{"prompt": "a", "temperature": NaN}', None, 400, "temperature"),
    ("POST", "/generate", {"prompt": "a", "top_k": 300}, None, 400, "top_k"),
    ("POST", "/generate", {"prompt": "a", "top_k": 2.5}, None, 400, "top_k"),
    ("POST", "/generate", {"prompt": "a", "seed": -1}, None, 400, "seed"),
    ("POST", "/generate", {"prompt": "a", "seed": 1.5}, None, 400, "seed"),
    ("POST", "/generate", {"prompt": "a", "temp": 1.0}, None, 400, "temp"),
    ("POST", "/generate", b"x" * 65537, None, 413, "body"),
    ("POST", "/generate", b"[" * 60_000, None, 400, "body"),  # RecursionError in the parser: still a 400
    ("POST", "/generate", b'{"prompt": ' + b"[" * 60_000, None, 400, "body"),
    ("GET", "/nope", None, None, 404, "path"),
    ("POST", "/nope", {"prompt": "a"}, None, 404, "path"),
    ("GET", "/generate", None, None, 405, "method"),
    ("DELETE", "/generate", None, None, 405, "method"),
    ("POST", "/health", b"{}", None, 405, "method"),
]


@pytest.mark.parametrize(
    "method,path,body,headers,status,field", BAD, ids=[f"{b[0]} {b[1]} {b[4]} {b[5]} #{i}" for i, b in enumerate(BAD)]
)
def test_bad_request(server, method, path, body, headers, status, field):
    url, _, _ = server
    st, hd, out = call(url, path, body, method, headers)
    assert (st, out.get("field")) == (status, field), out
    assert out["status"] == status and isinstance(out["error"], str) and out["error"]
    assert hd.get("Content-Type") == "application/json"
    if status == 405:
        assert hd.get("Allow")
    assert call(url, "/health")[0] == 200  # still serving


def test_missing_content_length(server):
    url, _, _ = server
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=REQ_TIMEOUT)
    try:
        conn.putrequest("POST", "/generate")
        conn.endheaders()
        r = conn.getresponse()
        out = json.loads(r.read())
    finally:
        conn.close()
    assert (r.status, out["field"]) == (411, "Content-Length"), out
    assert call(url, "/health")[0] == 200


def test_concurrent_requests_match_sequential(server):
    url, _, _ = server
    reqs = [
        dict(prompt=p, max_bytes=24, temperature=t, top_k=k, seed=s)
        for p, t, k, s in [
            ("import ", 0.8, 0, 1),
            ("import ", 0.8, 0, 2),
            ("class ", 1.0, 5, 3),
            ("x = ", 0.0, 0, 4),
            ("def f(", 0.7, 0, 5),
            ("\n", 1.3, 0, 6),
            ("# ", 0.8, 40, 7),
            ("return ", 0.5, 0, 8),
        ]
    ]
    want = [completion(url, **r) for r in reqs]
    jobs = [(t, i % len(reqs)) for t in range(8) for i in range(t, t + 4)]  # 8 threads x 4 requests, mixed order
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda job: (job[1], completion(url, **reqs[job[1]])), jobs, timeout=600))
    assert len(got) == 32
    for i, b in got:
        assert b == want[i], f"request {i} answered differently under concurrency"


CLIENTS = 64  # one burst of simultaneous clients: more than the old listen backlog of 5 could queue


def test_64_concurrent_clients_all_answered(server):
    "64 threads released together, one POST each on its own connection: every one is a 200, none reset or refused."
    url, _, _ = server
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"prompt": "ab", "max_bytes": 2, "seed": 4}).encode()
    gate = threading.Barrier(CLIENTS, timeout=60)

    def one(_):
        gate.wait()
        conn = http.client.HTTPConnection(host, int(port), timeout=REQ_TIMEOUT)
        try:
            conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        except OSError as e:
            return type(e).__name__, str(e)
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        got = list(pool.map(one, range(CLIENTS), timeout=300))
    bad = [g for g in got if g[0] != 200]
    assert not bad, f"{len(bad)} of {CLIENTS} clients failed: {bad[:5]}"
    assert len({base64.b64decode(out["completion_b64"]) for _, out in got}) == 1  # the same request, the same bytes


def test_short_body_answered_408(server):
    "A body shorter than its Content-Length: a 408 after the read timeout (5 s by default), not a hang and a 500."
    url, _, _ = server
    host, port = url.split("//")[1].split(":")
    t0 = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=REQ_TIMEOUT) as s:
        s.sendall(b"POST /generate HTTP/1.0\r\nContent-Length: 40\r\n\r\n" + b'{"prompt": "a"')
        resp = b""
        while chunk := s.recv(65536):
            resp += chunk
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 408"), resp[:300]
    assert json.loads(body)["field"] == "body"
    assert time.monotonic() - t0 < 20


def test_zz_no_traceback_in_server_output(server):
    "Last in the file: after every bad request above, the server's output has log lines but no traceback."
    url, _, log = server
    assert call(url, "/health")[0] == 200
    out = log.read_text(errors="replace")
    assert "Traceback" not in out, out[-3000:]
