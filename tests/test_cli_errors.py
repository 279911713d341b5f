"""One line for every bad input (issue 13 item 8): each case runs the CLI on a bad input and checks the exit code,
a stderr of one line without a traceback, and that nothing was written to the run directory (sizes and mtimes)."""

import dataclasses
import errno
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dormouse.cli import main
from dormouse.flags import build_parser
from dormouse.config import snapshot_toml
from dormouse.train import fit
from dormouse.testing import tiny_cfg

TINY = dict(steps=10, ckpt_every=5, log_every=5, eval_every=5)  # a seconds-scale run with two checkpoints


def needs(module, what):
    "A case whose fix belongs to another module: it must fail until that module is fixed (then remove the mark)."
    return pytest.mark.xfail(strict=True, reason=f"needs {module}: {what}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    "A finished tiny run, its TOML config, and a run of another d_model (a foreign checkpoint)."
    root = tmp_path_factory.mktemp("cli_errors")
    cfg = tiny_cfg(**TINY)
    (root / "tiny.toml").write_text(snapshot_toml(cfg))
    fit(cfg, root / "base", progress=False)
    other = dataclasses.replace(cfg, steps=15, ckpt_every=15, model=dataclasses.replace(cfg.model, d_model=48))
    fit(other, root / "other", progress=False)
    return root


def listing(p: Path):
    "Every path under `p` with its size and mtime (None if `p` does not exist): what 'nothing written' compares."
    if not p.exists():
        return None
    if p.is_file():
        return {".": (p.stat().st_size, p.stat().st_mtime_ns)}
    return {
        str(q.relative_to(p)): (q.stat().st_size, q.stat().st_mtime_ns)
        for q in sorted(p.rglob("*"))
        if q.name != "run.lock"
    }  # the writer's lock: taken (and rewritten) by every process that may write


def run_dir_copy(runs, tmp):
    run = tmp / "run"
    shutil.copytree(runs / "base", run)
    return run


def replace_line(path: Path, i: int, new: bytes):
    "Replace line `i` of a JSON-lines file (not the last: a torn last line is a kill mid-write, not damage)."
    ls = path.read_bytes().splitlines(keepends=True)
    assert len(ls) > i + 1, "the case needs a middle line"
    ls[i] = new + b"\n"
    path.write_bytes(b"".join(ls))


# Each case: setup(runs, tmp) -> (argv, watched path, extra env); the exit code; words its stderr must hold.
def config_file(text: bytes):
    def setup(runs, tmp):
        (tmp / "c.toml").write_bytes(text)
        return ["train", "--config", tmp / "c.toml", "--run-dir", tmp / "new", "--quiet"], tmp / "new", {}

    return setup


def snapshot(edit):
    def setup(runs, tmp):
        run = run_dir_copy(runs, tmp)
        p = run / "config.toml"
        p.write_bytes(edit(p.read_bytes()))
        return ["train", "--run-dir", run, "--resume", "--steps", 15, "--quiet"], run, {}

    return setup


def flags(*extra, env=None):
    def setup(runs, tmp):
        return (
            ["train", "--config", runs / "tiny.toml", "--run-dir", tmp / "new", "--quiet", *extra],
            tmp / "new",
            env or {},
        )

    return setup


def file_as_run_dir(runs, tmp):
    (tmp / "run").write_text("not a run\n")
    return ["train", "--config", runs / "tiny.toml", "--run-dir", tmp / "run", "--quiet"], tmp / "run", {}


def file_as_ckpt_dir(resume):
    def setup(runs, tmp):
        if resume:
            run = run_dir_copy(runs, tmp)
            shutil.rmtree(run / "ckpt")
        else:
            run = tmp / "run"
            run.mkdir()
        (run / "ckpt").write_text("not a directory\n")
        argv = ["train", "--config", runs / "tiny.toml", "--run-dir", run, "--quiet"] + (
            ["--resume", "--steps", 15] if resume else []
        )
        return argv, run, {}

    return setup


def history(file, line: bytes, command):
    "A run whose metrics.jsonl or lineage.jsonl has a bad middle line, then train --resume, compare or plot on it."

    def setup(runs, tmp):
        run = run_dir_copy(runs, tmp)
        if file == "lineage.jsonl":  # one resume, so the lineage has a middle line
            fit(tiny_cfg(**{**TINY, "steps": 12}), run, resume=True, progress=False)
        replace_line(run / file, 0 if file == "lineage.jsonl" else 2, line)
        argv = {
            "train": ["train", "--run-dir", run, "--resume", "--steps", 15, "--quiet"],
            "compare": ["compare", runs / "base", run],
            "plot": ["plot", run, "-o", tmp / "loss.png"],
        }[command]
        return argv, run, {}

    return setup


def plot_of(kind):
    def setup(runs, tmp):
        if kind == "empty":
            (tmp / "run").mkdir()
        if kind == "no rows":
            (tmp / "run").mkdir()
            (tmp / "run" / "metrics.jsonl").write_bytes(b"")
        run = run_dir_copy(runs, tmp) if kind == "z.xyz" else tmp / "run"
        return ["plot", run, "-o", run / "z.xyz" if kind == "z.xyz" else tmp / "run" / "loss.png"], run, {}

    return setup


def foreign_ckpt(runs, tmp):
    run = run_dir_copy(runs, tmp)
    for p in (runs / "other" / "ckpt").iterdir():
        shutil.copy2(p, run / "ckpt" / p.name)  # step 15: newer than the run's 10
    return ["train", "--run-dir", run, "--resume", "--steps", 20, "--quiet"], run, {}


def non_finite_loss(runs, tmp):
    return (
        [
            "train",
            "--config",
            runs / "tiny.toml",
            "--run-dir",
            tmp / "new",
            "--quiet",
            "--lr",
            "1e30",
            "--grad-clip",
            "0",
            "--warmup",
            "0",
        ],
        None,
        {},
    )


def case(name, setup, code, words, marks=(), drop_ok=False):
    """One bad input: how to make it, the exit code it must end with, the words its one line must hold; `drop_ok`: a bad
    metrics row may instead be dropped loudly (issue 13 item 3), exit 0 with a warning naming the file."""
    return pytest.param(setup, code, words, drop_ok, marks=marks, id=name)


RANDOM = bytes(range(256)) * 4
WRONG_TYPES = (
    b'aux = "false"\nseq_len = true\nseed = 1.5\nsteps = "ten"\nlr = "x"\nbatch = 4.0\n'
    b'eval_depths = [1, "2"]\nmodel = 5\n'
)
CASES = [
    case("config random bytes", config_file(RANDOM), 2, ["c.toml is not a TOML config", "not UTF-8"]),
    case("config invalid TOML", config_file(b"lr = = 2\n"), 2, ["c.toml is not a TOML config"]),
    case(
        "config wrong types",
        config_file(WRONG_TYPES),
        2,
        [
            "8 problem(s)",
            'aux = "false"',
            "seq_len = true",
            "seed = 1.5",
            'steps = "ten"',
            'lr = "x"',
            "batch = 4.0",
            "eval_depths",
            "model = 5",
        ],
    ),
    case("config unknown key", config_file(b"lrr = 0.1\n"), 2, ["lrr: unknown key (did you mean lr?)"]),
    case(
        "config is a directory",
        lambda runs, tmp: (["train", "--config", tmp, "--run-dir", tmp / "new"], tmp / "new", {}),
        2,
        ["is a directory"],
    ),
    case("snapshot random bytes", snapshot(lambda b: RANDOM), 2, ["config.toml: snapshot damaged", "not UTF-8"]),
    case("snapshot empty", snapshot(lambda b: b""), 2, ["config.toml: snapshot damaged"]),
    case("snapshot torn", snapshot(lambda b: b[: len(b) // 2]), 2, ["config.toml: snapshot damaged"]),
    case(
        "snapshot wrong type",
        snapshot(lambda b: b.replace(b"aux = false", b'aux = "false"')),
        2,
        ["snapshot damaged", 'aux = "false"'],
    ),
    case("--steps 3.5", flags("--steps", "3.5"), 2, ["steps = 3.5: expected an integer"]),
    case("--steps ten", flags("--steps", "ten"), 2, ['steps = "ten"']),
    case("--model.ngram-orders 2,x", flags("--model.ngram-orders", "2,x"), 2, ["model.ngram_orders"]),
    case("--eval-depths true", flags("--eval-depths", "true"), 2, ["eval_depths"]),
    case("--quant fp4", flags("--quant", "fp4"), 2, ['quant = "fp4": use one of']),
    case("--stepz", flags("--stepz", "3"), 2, ["unrecognized arguments: --stepz"]),
    case("--device bogus", flags("--device", "bogus"), 2, ["--device 'bogus'"]),
    case("--verify-steps 0", flags("--verify-steps", "0"), 2, ["argument --verify-steps: '0': use an integer >= 1"]),
    case("DORMOUSE_DEVICE=meta", flags(env={"DORMOUSE_DEVICE": "meta"}), 2, ["DORMOUSE_DEVICE 'meta'"]),
    case("--run-dir is a file", file_as_run_dir, 2, ["is not a directory"]),
    case("ckpt is a file, fresh", file_as_ckpt_dir(resume=False), 1, ["ckpt"]),
    case("ckpt is a file, resume", file_as_ckpt_dir(resume=True), 2, ["no checkpoint (ckpt/*.dmck)"]),
    case("plot missing dir", plot_of("missing"), 2, ["is not a run directory"]),
    case("plot empty dir", plot_of("empty"), 2, ["has no rows"]),
    case("plot no rows", plot_of("no rows"), 2, ["has no rows"]),
    case("plot -o z.xyz", plot_of("z.xyz"), 2, ["z.xyz", "cannot write .xyz"]),
    case(
        "serve --port 99999",
        lambda runs, tmp: (["serve", "--ckpt", tmp / "x.dmck", "--port", 99999], None, {}),
        2,
        ["port 99999 is not a TCP port"],
    ),
    case(
        "serve unresolvable host",
        lambda runs, tmp: (
            ["serve", "--ckpt", tmp / "x.dmck", "--host", "no-such-host.invalid", "--port", 0],
            None,
            {},
        ),
        2,
        ["no-such-host.invalid' does not resolve"],
    ),
    case("inspect a directory", lambda runs, tmp: (["inspect", tmp], None, {}), 1, ["cannot open"]),
    case(
        "--run-dir not UTF-8",
        lambda runs, tmp: (["train", "--config", runs / "tiny.toml", "--run-dir", os.fsdecode(bytes(tmp) + b"/caf\xe9"),
                            "--quiet"], tmp, {}),
        2,
        ["--run-dir ", "caf\\xe9: the path has byte 0xe9 at position", "which is not UTF-8"],
    ),
    case(
        "--data not UTF-8",
        lambda runs, tmp: (["train", "--config", runs / "tiny.toml", "--run-dir", tmp / "new", "--data",
                            os.fsdecode(b"corpus-\xff.bin"), "--quiet"], tmp, {}),
        2,
        ["--data corpus-\\xff.bin: the path has byte 0xff at position 7"],
    ),
    case("non-finite loss", non_finite_loss, 1, ["non-finite loss"]),
]
for cmd in ["train", "compare", "plot"]:
    CASES.append(
        case(
            f"metrics non-UTF-8, {cmd}",
            history("metrics.jsonl", b"\xff\xfe\x00 not text", cmd),
            2,
            ["not UTF-8", "metrics.jsonl line"],
        )
    )
    for row in [b"[1,2,3]", b'{"x":1}']:
        CASES.append(
            case(
                f"metrics row {row.decode()}, {cmd}",
                history("metrics.jsonl", row, cmd),
                2,
                ["metrics.jsonl line"],
            )
        )
for cmd in ["train", "plot"]:
    CASES.append(
        case(
            f"lineage non-UTF-8, {cmd}",
            history("lineage.jsonl", b"\xff\xfe\x00 not text", cmd),
            2,
            ["not UTF-8", "lineage.jsonl line"],
        )
    )
    CASES.append(
        case(
            f"lineage row 7, {cmd}",
            history("lineage.jsonl", b"7", cmd),
            2,
            ["lineage.jsonl line"],
        )
    )
def other_corpus_unpinned(runs, tmp):
    "A resume that names other bytes and pins no hash: drift of data and data_sha256, a message of several sentences."
    run = run_dir_copy(runs, tmp)
    (tmp / "other.bin").write_bytes(bytes(range(256)) * 64)
    return ["train", "--run-dir", run, "--resume", "--steps", 15, "--data", tmp / "other.bin", "--data-sha256", "",
            "--quiet"], run, {}


CASES.append(
    case("another corpus, unpinned", other_corpus_unpinned, 2, ["data_sha256", "a different plan. The corpus"])
)
CASES.append(
    case(
        "foreign checkpoint of another d_model",
        foreign_ckpt,
        1,
        ["d_model"],
    )
)


@pytest.mark.parametrize("setup,code,words,drop_ok", CASES)
def test_bad_input_is_one_line(setup, code, words, drop_ok, runs, tmp_path, capsys, monkeypatch):
    argv, watch, env = setup(runs, tmp_path)
    capsys.readouterr()
    monkeypatch.delenv("DORMOUSE_DEBUG", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    before = listing(watch) if watch is not None else None
    rc = main([str(a) for a in argv])  # in-process: fit leaves torch's process state as other tests' in-process fits do
    err = capsys.readouterr().err
    if (
        drop_ok and rc == 0
    ):  # the bad row dropped loudly: a warning names the file; a resume then writes, a reader does not
        assert "Traceback" not in err and "metrics.jsonl" in err, err
        if watch is not None and argv[0] != "train":
            assert listing(watch) == before
        return
    assert rc == code, (rc, err)
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("dormouse: error: "), err
    assert ".;" not in err, err  # a sentence that ends is not joined to the next by a semicolon
    for w in words:
        assert w in err, (w, err)
    if watch is not None:
        assert listing(watch) == before, "the command wrote to the run directory"


@pytest.mark.parametrize(
    "argv", [["train", "--steps", "3.5"], ["train", "--config", "RANDOM"]], ids=["steps 3.5", "config random bytes"]
)
def test_the_console_script_prints_one_line(argv, runs, tmp_path):
    "The real `python -m dormouse.cli`: one line, exit 2, and the run directory is never created."
    (tmp_path / "RANDOM").write_bytes(RANDOM)
    argv = [str(tmp_path / a) if a == "RANDOM" else a for a in argv]
    r = subprocess.run(
        [sys.executable, "-m", "dormouse.cli", *argv, "--run-dir", str(tmp_path / "new")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "new").exists()


def test_generate_takes_any_prompt_bytes(runs):
    "A byte-level model continues any bytes: `--prompt $'\\xff\\xfe'` is a prompt, not an error."
    ckpt = sorted((runs / "base" / "ckpt").glob("*.dmck"))[-1]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dormouse.cli",
            "generate",
            "--ckpt",
            str(ckpt),
            "--prompt",
            b"\xff\xfe",
            "--max-bytes",
            "8",
        ],
        capture_output=True,
        timeout=300,
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(b"\xff\xfe") and len(r.stdout) == 2 + 8 + 1


def test_generate_into_a_closed_pipe_exits_quietly(runs):
    "`dormouse generate ... | head -c 10` where the reader has gone: exit 141, nothing on stderr."
    ckpt = sorted((runs / "base" / "ckpt").glob("*.dmck"))[-1]
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dormouse.cli",
            "generate",
            "--ckpt",
            str(ckpt),
            "--prompt",
            "def ",
            "--max-bytes",
            "64",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before the first write
    err = p.stderr.read()
    assert p.wait(timeout=300) == 141, err
    assert err == b"", err


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into a read-only directory; the file-for-a-directory cases cover it"
)
def test_read_only_run_dir_is_one_line(runs, tmp_path, capsys):
    run = run_dir_copy(runs, tmp_path)
    before = listing(run)
    for p in [run, run / "ckpt"]:
        p.chmod(0o555)
    try:
        rc = main(["train", "--run-dir", str(run), "--resume", "--steps", "15", "--quiet"])
    finally:
        for p in [run, run / "ckpt"]:
            p.chmod(0o755)
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1 and "ermission" in err, err
    assert listing(run) == before


def test_serve_on_a_port_in_use_is_one_line(runs):
    "Another process listens on the port: exit 2 (change the command line) and one line naming the address and the fix."
    ckpt = sorted((runs / "base" / "ckpt").glob("*.dmck"))[-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "dormouse.cli", "serve", "--ckpt", str(ckpt), "--port", str(port)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "pick another port" in r.stderr


def full_disk_at(name: str, monkeypatch) -> None:
    "The container named `name` meets a full disk (ENOSPC) when it is written; every other one is written."
    import dormouse.checkpoints as ckpts
    real = ckpts.save_v3

    def full_disk(path, *a, **kw):
        if Path(path).name == name:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(ckpts, "save_v3", full_disk)
    monkeypatch.delenv("DORMOUSE_DEBUG", raising=False)


def test_a_full_disk_mid_checkpoint_is_one_line_and_loses_nothing(runs, tmp_path, capsys, monkeypatch):
    "ENOSPC while a checkpoint is written: one line naming the container and the cause; the last checkpoint loads."
    import dormouse.checkpoints as ckpts
    run = run_dir_copy(runs, tmp_path)
    full_disk_at("step_000015.dmck", monkeypatch)
    rc = main(["train", "--config", str(runs / "tiny.toml"), "--run-dir", str(run), "--resume", "--steps", "15",
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "step_000015.dmck" in err and "No space left on device" in err, err
    assert [p.name for p in sorted((run / "ckpt").glob("*.dmck"))][-1] == "step_000010.dmck"
    assert not list((run / "ckpt").glob("step_000015.*")), "the failed commit left its tables file behind"
    ck, _, path, *_ = ckpts.find_latest(run / "ckpt", log=print)
    assert ck.step == 10 and path.name == "step_000010.dmck"


def test_an_immutable_run_dir_is_one_line_and_nothing_changes(runs, tmp_path, capsys):
    "chattr +i (which even root cannot write through): one line naming the problem, exit 1, the run untouched."
    run = run_dir_copy(runs, tmp_path)
    dirs = [run, run / "ckpt"]
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", *map(str, dirs)]).returncode:
        pytest.skip("chattr +i is not available on this file system")
    before = listing(run)
    try:
        rc = main(["train", "--run-dir", str(run), "--resume", "--steps", "15", "--quiet"])
    finally:
        subprocess.run(["chattr", "-i", *map(str, dirs)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "Operation not permitted" in err or "ermission" in err, err
    assert listing(run) == before


def test_a_run_dir_name_that_is_not_utf8_is_refused_by_fit_and_nothing_is_created(tmp_path):
    from dormouse.rundir import RunDirError

    bad = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    with pytest.raises(RunDirError, match="its name has byte 0xe9 at position"):
        fit(tiny_cfg(**TINY), bad, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_generate_rejects_an_argument_before_printing_the_prompt(runs, capsysbinary):
    "Issue 23: a bad --temperature is the one error; the prompt is not printed first as if generation had begun."
    ckpt = sorted((runs / "base" / "ckpt").glob("*.dmck"))[-1]
    assert main(["generate", "--ckpt", str(ckpt), "--prompt", "hello", "--temperature", "-1"]) == 2
    cap = capsysbinary.readouterr()
    assert cap.out == b"" and b"temperature" in cap.err


def test_plot_writes_the_file_it_names(runs, tmp_path, capsys):
    "Issue 23: `plot -o X` writes X (it wrote X.png and said 'wrote X')."
    assert main(["plot", str(runs / "base"), "-o", str(tmp_path / "X")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X"]
    assert (tmp_path / "X").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {tmp_path / 'X'}" in capsys.readouterr().out


def test_inspect_prints_its_verdict_under_an_ascii_terminal(runs):
    "Issue 23: under PYTHONIOENCODING=ascii `inspect` printed a codec error instead of its verdict."
    ckpt = sorted((runs / "base" / "ckpt").glob("*.dmck"))[-1]
    bad = runs / "damaged-caf\u00e9.dmck"
    data = bytearray(ckpt.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for path, code, words in [(ckpt, 0, "verdict: loads"), (bad, 1, "verdict: REFUSED")]:
        r = subprocess.run([sys.executable, "-m", "dormouse.cli", "inspect", str(path)], capture_output=True, text=True,
                           timeout=300, env=env)
        assert r.returncode == code and words in r.stdout and "codec" not in r.stderr, (r.stdout[-500:], r.stderr)


def test_inspect_names_a_tables_file_as_one(runs, capsys):
    "A tables file given to inspect is described as a tables file, not as a truncated v1 container."
    capsys.readouterr()
    tables_file = next((runs / "base" / "ckpt").glob("*.ngram"))
    assert main(["inspect", str(tables_file)]) == 0
    out = capsys.readouterr().out
    assert "a tables file of n-gram tables" in out and "verdict: loads" in out and "format: v1" not in out, out


def test_a_full_disk_at_the_first_checkpoint_does_not_advise_a_resume(runs, tmp_path, capsys, monkeypatch):
    "Issue 23: ENOSPC on a run's first checkpoint said the previous one was intact and to resume; there is none."
    full_disk_at("step_000005.dmck", monkeypatch)
    rc = main(["train", "--config", str(runs / "tiny.toml"), "--run-dir", str(tmp_path / "new"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "step_000005.dmck" in err and "there is none to resume from" in err and "intact" not in err, err


def test_every_command_prints_its_help(capsys):
    "`dormouse --help` and each command's `--help` print their usage and exit 0 (a stray `%` in a help broke both)."
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for argv in [["--help"]] + [[c, "--help"] for c in commands]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        out = capsys.readouterr().out
        assert e.value.code == 0 and out.startswith("usage: dormouse"), (argv, out)
    assert len(commands) == 10
