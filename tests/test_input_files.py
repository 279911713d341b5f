"""No file can hang the kit, and everything read from disk is parsed within bounds and type-checked (issue 23): a FIFO
or a device in place of any file the kit reads is refused in one line (or, for a checkpoint, skipped loudly) instead
of blocking forever or reading as "empty"; deeply nested JSON/TOML, 5,000-digit numbers, a crafted but checksum-valid
container meta of the wrong types and a safetensors shape like [2^62, 0] are refused naming the file and the field."""

import contextlib
import json
import os
import shutil
import struct
import threading
import zlib
from pathlib import Path

import pytest
import torch

from dormouse.cli import main
from dormouse.config import snapshot_toml
from dormouse.container import load_ckpt, read_header, save_ckpt
from dormouse.container_format import ENTRY, HEADER
from dormouse.stcodec import Checksum
from dormouse.testing import tiny_cfg
from dormouse.train import fit

TINY = dict(steps=10, ckpt_every=5, log_every=5, eval_every=5)  # two checkpoints: 5 and 10


def needs(module, what):
    "A case whose fix belongs to another module: it must fail until that module is fixed (then remove the mark)."
    return pytest.mark.xfail(strict=True, reason=f"needs {module}: {what}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("input_files")
    cfg = tiny_cfg(**TINY)
    (root / "tiny.toml").write_text(snapshot_toml(cfg))
    fit(cfg, root / "base", progress=False)
    return root


@contextlib.contextmanager
def fifo(path: Path):
    """A named pipe at `path`; a watchdog opens its other end after 3 s, so a reader that blocks fails, not hangs.
    Yields a list that holds True once the watchdog found a reader waiting on the pipe (its write end opened): a
    command that never opens the pipe leaves it empty however slowly it runs."""
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    stop, waited = threading.Event(), []

    def unblock():
        if stop.wait(3):
            return
        while not stop.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # succeeds only while a reader has it open
                waited.append(True)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # a writer waiting for a reader
            stop.wait(0.2)

    t = threading.Thread(target=unblock, daemon=True)
    t.start()
    try:
        yield waited
    finally:
        stop.set()
        t.join()


def listing(p: Path):
    "Every file under `p` (FIFOs too) with its size and mtime; the lock's note, which each writer replaces, aside."
    return {str(q.relative_to(p)): (q.lstat().st_size, q.lstat().st_mtime_ns) for q in sorted(p.rglob("*"))
            if q.name != "run.lock" and not q.is_dir()}


def run_cli(argv, capsys, monkeypatch):
    monkeypatch.delenv("DORMOUSE_DEBUG", raising=False)
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def newest_tables_file(run: Path) -> Path:
    return sorted(p for p in (run / "ckpt").iterdir() if p.name.startswith("step_000010.ng"))[-1]


# Each case: (where the FIFO goes, relative to a copy of the run | an absolute special file), argv, rc, words
def resume(run, tmp):
    return ["train", "--run-dir", run, "--resume", "--steps", 12, "--quiet"]


FIFO_CASES = [
    ("config.toml", resume, 2, ["config.toml is a FIFO (named pipe), not a regular file"]),
    ("metrics.jsonl", resume, 2, ["metrics.jsonl is a FIFO (named pipe), not a regular file"]),
    ("lineage.jsonl", resume, 2, ["lineage.jsonl is a FIFO (named pipe), not a regular file"]),
    ("metrics.jsonl", lambda run, tmp: ["plot", run, "-o", tmp / "loss.png"], 2, ["metrics.jsonl is a FIFO"]),
    ("metrics.jsonl", lambda run, tmp: ["compare", run, run], 2, ["metrics.jsonl is a FIFO"]),
    ("ckpt/step_000010.dmck", lambda run, tmp: ["inspect", run / "ckpt" / "step_000010.dmck"], 1,
     ["step_000010.dmck: [file] cannot open: is a FIFO (named pipe), not a regular file"]),
    ("../c.toml", lambda run, tmp: ["train", "--config", tmp / "c.toml", "--run-dir", tmp / "new", "--quiet"], 2,
     ["c.toml is a FIFO (named pipe), not a regular file"]),
    ("../corpus.bin", lambda run, tmp: ["train", "--data", tmp / "corpus.bin", "--run-dir", tmp / "new", "--quiet",
                                        "--config", tmp / "tiny.toml"], 1,
     ["corpus.bin is a FIFO (named pipe), not a regular file", "pass a byte file or a directory"]),
    ("../targets/index.json", lambda run, tmp: ["train", "--aux", "--jepa-targets", tmp / "targets", "--run-dir",
                                                tmp / "new", "--quiet", "--config", tmp / "tiny.toml"],
     1, ["index.json is a FIFO (named pipe), not a regular file"]),
]


@pytest.mark.parametrize("where,argv,code,words", FIFO_CASES,
                         ids=[f"{w} ({a(Path('r'), Path('t'))[0]})" for w, a, _, _ in FIFO_CASES])
def test_a_fifo_in_place_of_a_file_is_refused_in_one_line_and_never_waited_on(
        where, argv, code, words, runs, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    shutil.copy(runs / "tiny.toml", tmp_path / "tiny.toml")
    target = (run / where).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with fifo(target) as waited:
        before = listing(tmp_path)
        rc, out, err = run_cli(argv(run, tmp_path), capsys, monkeypatch)
        assert rc == code, (rc, out, err)
        assert len(err.splitlines()) == 1 and err.startswith("dormouse: error: ") and "Traceback" not in err, err
        for w in words:
            assert w in err, (w, err)
        assert listing(tmp_path) == before, "a refused command wrote something"
        assert not waited, "the command opened the FIFO and waited on it until the watchdog opened its other end"


def test_dev_zero_as_the_corpus_is_not_an_empty_file(runs, tmp_path, capsys, monkeypatch):
    rc, out, err = run_cli(["train", "--data", "/dev/zero", "--run-dir", tmp_path / "new", "--quiet",
                            "--config", runs / "tiny.toml"], capsys, monkeypatch)
    assert rc == 1 and "/dev/zero is a character device, not a regular file" in err and "empty" not in err, err
    assert not (tmp_path / "new").exists()


def test_a_fifo_as_the_newest_container_is_skipped_loudly_and_the_resume_takes_the_one_before(
        runs, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    with fifo(run / "ckpt" / "step_000010.dmck"):
        rc, out, err = run_cli(resume(run, tmp_path), capsys, monkeypatch)
    assert rc == 0, (out, err)
    assert "skipping step_000010.dmck" in out and "is a FIFO (named pipe), not a regular file" in out, out
    assert f"resumed {run} at step 5" in out, out


@needs("house", "the tables-file and delta readers (08_sidecar) open with open(); use fsio.open_regular")
def test_a_fifo_as_the_newest_tables_file_is_skipped_loudly(runs, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    with fifo(newest_tables_file(run)):
        rc, out, err = run_cli(resume(run, tmp_path), capsys, monkeypatch)
    assert rc == 0 and "is a FIFO (named pipe), not a regular file" in out, (out, err)


def replace_line(path: Path, i: int, new: bytes):
    ls = path.read_bytes().splitlines(keepends=True)
    ls[i] = new + b"\n"
    path.write_bytes(b"".join(ls))


DEEP = b"[" * 100_000 + b"]" * 100_000
HISTORY_CASES = [
    ("metrics.jsonl", DEEP, "train", "metrics.jsonl line 2 is not a JSON row (nested deeper than 64 levels)"),
    ("metrics.jsonl", DEEP, "plot", "metrics.jsonl line 2 is not a JSON row (nested deeper than 64 levels)"),
    ("metrics.jsonl", DEEP, "compare", "metrics.jsonl line 2 is not a JSON row (nested deeper than 64 levels)"),
    ("metrics.jsonl", b'{"step": 1, "x": ' + b"[" * 100 + b"]" * 100 + b"}", "plot",  # deep, yet no RecursionError
     "metrics.jsonl line 2 is not a JSON row (nested deeper than 64 levels"),
    ("metrics.jsonl", b'{"step": ' + b"1" * 5000 + b"}", "train", "line 2 is not a JSON row (an integer of 5000"),
    ("metrics.jsonl", b'{"step": ' + b"1" * 5000 + b"}", "plot", "line 2 is not a JSON row (an integer of 5000"),
    ("lineage.jsonl", b'{"segment": 0, "env": ' + DEEP + b"}", "train", "lineage.jsonl line 1 is not a JSON row"),
    ("lineage.jsonl", b'{"segment": 0, "env": ' + DEEP + b"}", "plot", "lineage.jsonl line 1 is not a JSON row"),
]


@pytest.mark.parametrize("file,line,command,words", HISTORY_CASES,
                         ids=[f"{f} {'long int' if b'1' * 5000 in ln else 'deep'} {len(ln)}, {c}"
                              for f, ln, c, _ in HISTORY_CASES])
def test_unbounded_history_rows_are_damage_named_by_line(file, line, command, words, runs, tmp_path, capsys,
                                                         monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    if file == "lineage.jsonl":
        (run / file).write_bytes(line + b"\n" + (run / file).read_bytes())
    else:
        replace_line(run / file, 1, line)
    argv = {"train": resume(run, tmp_path), "plot": ["plot", run, "-o", tmp_path / "loss.png"],
            "compare": ["compare", runs / "base", run]}[command]
    before = listing(run)
    rc, out, err = run_cli(argv, capsys, monkeypatch)
    assert rc == 2 and len(err.splitlines()) == 1 and words in err, (rc, err)
    assert "RecursionError" not in err and "Exceeds the limit" not in err
    assert listing(run) == before


@pytest.mark.parametrize(
    "text,words",
    [(b"seed = 1\nsteps = " + b"9" * 5000 + b"\n", "an integer of more than 20 digits, too large"),
     (b"seed = 1\nsteps = " + b"9" * 30 + b"\n", "steps: an integer of more than 20 digits"),
     (b"eval_depths = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested deeper than 64 levels")],
    ids=["5000 digits", "30 digits", "nested"],
)
def test_unbounded_toml_is_one_line(text, words, runs, tmp_path, capsys, monkeypatch):
    (tmp_path / "c.toml").write_bytes(text)
    rc, out, err = run_cli(["train", "--config", tmp_path / "c.toml", "--run-dir", tmp_path / "new", "--quiet"],
                           capsys, monkeypatch)
    assert rc == 2 and len(err.splitlines()) == 1 and words in err and "c.toml" in err, err
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    (run / "config.toml").write_bytes(b"# dormouse config snapshot, format 2\n" + text)
    rc, out, err = run_cli(resume(run, tmp_path), capsys, monkeypatch)
    assert rc == 2 and "snapshot damaged" in err and words in err, err


def with_meta(src: Path, dst: Path, edit) -> Path:
    "A copy of container `src` whose meta section is `edit(meta)`, its checksums recomputed: crafted, not damaged."
    blob, lay = bytearray(src.read_bytes()), read_header(src)
    name, off, n, _, _ = lay["sections"][-1]
    assert name == "meta"
    new = json.dumps(edit(json.loads(blob[off:off + n]))).encode()
    c = Checksum(lay["checksum"])
    c.add(new)
    at = HEADER.size + 4 * ENTRY.size
    tag, o, _, _, present = ENTRY.unpack_from(blob, at)
    ENTRY.pack_into(blob, at, tag, o, len(new), c.close(), present)
    blob[196:200] = struct.pack("<I", zlib.crc32(bytes(blob[:196])))
    dst.write_bytes(bytes(blob[:off]) + new)
    return dst


def setting(path: str, value):
    def edit(m):
        node, *rest = path.split(".")
        if rest:
            m[node][rest[0]] = value
        else:
            m[node] = value
        return m

    return edit


META_CASES = [
    ("sidecar", 5, "field meta.sidecar: expected an object or null, got an integer"),
    ("pin.run_id", 5, "field meta.pin.run_id: expected a string, got an integer"),
    ("env", [], "field meta.env: expected an object or null, got a list"),
    ("env", "threads", "field meta.env: expected an object or null, got a string"),
    ("latch", "x", "field meta.latch: expected an object, got a string"),
    ("missing", "none", "field meta.missing: expected a list of strings, got a string"),
    ("pin.corpus", {"path": 1}, "field meta.pin.corpus: lacks size, mtime_ns, sha256"),
]


@pytest.mark.parametrize("field,value,words", META_CASES, ids=[f"{f}={v!r}" for f, v, _ in META_CASES])
def test_a_crafted_checksum_valid_meta_is_refused_naming_the_field_by_inspect_and_resume(
        field, value, words, runs, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    p = run / "ckpt" / "step_000010.dmck"
    with_meta(p, p, setting(field, value))
    rc, out, err = run_cli(["inspect", p], capsys, monkeypatch)
    assert rc == 1 and "verdict: REFUSED" in out and "[meta]" in out and words in out, out
    rc, out, err = run_cli(resume(run, tmp_path), capsys, monkeypatch)
    assert rc == 0, (out, err)  # the crafted container is skipped loudly; the one before it is the run
    assert "skipping step_000010.dmck" in out and words in out and f"resumed {run} at step 5" in out, out


def test_a_meta_the_kit_wrote_passes_the_type_check(runs):
    for p in sorted((runs / "base" / "ckpt").glob("*.dmck")):
        ck = load_ckpt(p)
        assert isinstance(ck.env, dict) and isinstance(ck.identity["run_id"], str) and len(ck.tables_id.id) == 32


@pytest.mark.parametrize("shape", [[2**62, 0], [0, 2**30, 2**30], [1] * 17], ids=["2^62 x 0", "0 x 2^60", "17 dims"])
def test_an_impossible_tensor_shape_is_refused_by_inspect_and_resume(shape, runs, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(runs / "base", run)
    p = run / "ckpt" / "step_000010.dmck"
    ck = load_ckpt(p)
    ck.model = {**ck.model, "huge": torch.zeros(shape)}
    save_ckpt(p, ck)  # written by the kit's own writer: every checksum valid
    rc, out, err = run_cli(["inspect", p], capsys, monkeypatch)
    assert rc == 1 and "verdict: REFUSED" in out and "more dimensions or elements than a tensor can hold" in out, out
    assert "verdict: loads" not in out
    rc, out, err = run_cli(resume(run, tmp_path), capsys, monkeypatch)
    assert rc == 0 and "skipping step_000010.dmck" in out and f"resumed {run} at step 5" in out, (out, err)
    assert "RuntimeError" not in out + err


def test_a_crafted_targets_index_is_one_line(runs, tmp_path, capsys, monkeypatch):
    t = tmp_path / "targets"
    t.mkdir()
    index = {"format": "dormouse-jepa-targets", "version": 1, "steps": {"x": 1}}
    for text, words in [(json.dumps(index).encode(), "index.json: index: lacks"),
                        (b'{"format": "dormouse-jepa-targets", "version": 1, "x": ' + DEEP + b"}",
                         "index.json: nested deeper than 64 levels")]:
        (t / "index.json").write_bytes(text)
        rc, out, err = run_cli(["train", "--aux", "--jepa-targets", t, "--run-dir", tmp_path / "new", "--quiet",
                                "--config", runs / "tiny.toml"], capsys, monkeypatch)
        assert rc == 1 and len(err.splitlines()) == 1 and words in err, err
        assert not (tmp_path / "new").exists()
