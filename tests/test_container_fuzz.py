"""Container fuzzing: every truncation, bit flip, lie in a length field, foreign file and mismatched tables file is a
CheckpointError naming the file and the section; nothing bad ever loads; a pickle payload never runs; a save killed at a
random moment never leaves a torn file under a final name. Offsets come from dormouse.rng keyed draws (never np.random).

v1/v2 have no checksum: a flipped bit inside their payloads (or in the step field, or v2's latch bit) can load silently,
which is why v3 exists. Their bit-flip tests cover only what a check can catch: magic, length fields, unknown flag bits.
"""

import os, pickle, signal, struct, subprocess, sys, textwrap, time, warnings, zipfile, zlib
from pathlib import Path

import pytest
import torch

from dormouse.checkpoints import find_latest, list_ckpts, load_run_ckpt, save_run_ckpt
from dormouse.report import describe
from dormouse.container import RunState, load_ckpt, save_ckpt
from dormouse.container_format import CheckpointError, FLAG_FP32_LATCH
from dormouse.testing import write_v1, write_v2
from dormouse.numerics import numeric_env
from dormouse.container_format import ENTRY, HEADER, HEADER_LEN, SECTIONS
from dormouse.ngram import NgramTables
from dormouse.tables_file import read_tables_file_header, save_tables_file
from dormouse.rng import keyed_normal, keyed_randint, keyed_uniform
from dormouse.stress import StressMonitor

STREAM_TEST = 0xF0220  # keyed draws for this file only


def small_state(step=7, seed=1) -> RunState:
    "A small but complete run state: several dtypes, AdamW state, teacher, stress history, latch, env."
    lin = torch.nn.Linear(6, 5)
    with torch.no_grad():
        for i, p in enumerate(lin.parameters()):
            p.copy_(torch.from_numpy(keyed_normal(seed, i, STREAM_TEST, p.numel())).view(p.shape))
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, betas=(0.9, 0.95))
    lin(torch.ones(3, 6)).sum().backward()
    opt.step()
    model = {
        **lin.state_dict(),
        "emb": torch.arange(12, dtype=torch.float32).view(3, 4).to(torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "count": torch.tensor(3, dtype=torch.int64),
    }
    mon = StressMonitor(min_fill=2, refuse=True)
    for s, g in enumerate([1.0, 1.1, 0.9, 50.0, 1.2]):
        mon.observe(g, s)
    return RunState(
        step=step,
        model=model,
        optim=opt.state_dict(),
        teacher={k: v.clone() for k, v in lin.state_dict().items()},
        flags=FLAG_FP32_LATCH,
        stress=mon,
        table_step=step,
        env=numeric_env(2),
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    s = small_state()
    return {
        "dir": d,
        "state": s,
        3: save_ckpt(d / "v3.dmck", s).read_bytes(),
        2: write_v2(d / "v2.dmck", s).read_bytes(),
        1: write_v1(d / "v1.dmck", s).read_bytes(),
    }


def refused(d: Path, data: bytes, name="bad.dmck") -> CheckpointError:
    p = d / name
    p.write_bytes(data)
    with pytest.raises(CheckpointError) as ei:
        load_ckpt(p)
    e = ei.value
    assert e.path == str(p) and e.section and str(p) in str(e)
    return e


def boundaries(version: int, blob: bytes) -> list:
    "Section start/end offsets of a container of this version."
    if version == 3:
        cuts = [0, 8, 16, 24, 32, HEADER_LEN - 4, HEADER_LEN]
        for i in range(len(SECTIONS)):
            _, off, n, _, _ = ENTRY.unpack_from(blob, HEADER.size + i * ENTRY.size)
            cuts += [off, off + n]
        return cuts
    if version == 2:
        _, _, ml, ol, tl, _ = struct.unpack_from("<8sQQQQQ", blob)
        return [0, 8, 16, 24, 32, 40, 48, 48 + ml, 48 + ml + ol, 48 + ml + ol + tl]
    _, ml, ol = struct.unpack_from("<QQQ", blob)
    return [0, 8, 16, 24, 24 + ml, 24 + ml + ol]


def loads_ok(d: Path, data: bytes):
    p = d / "ok.dmck"
    p.write_bytes(data)
    return load_ckpt(p)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_fixtures_load(files, version):
    ck = loads_ok(files["dir"], files[version])
    assert ck.version == version and ck.step == files["state"].step


@pytest.mark.parametrize("version", [1, 2, 3])
def test_truncation_at_every_boundary_and_keyed_random_cuts(files, version):
    blob, d = files[version], files["dir"]
    cuts = {c + k for c in boundaries(version, blob) for k in (-1, 0, 1)}
    cuts |= set(range(0, 64))  # every byte of the fixed fields
    cuts |= set(keyed_randint(version, 0, STREAM_TEST, 0, len(blob) - 1, 200).tolist())
    cuts = sorted(c for c in cuts if 0 <= c < len(blob))
    sections = {refused(d, blob[:c]).section for c in cuts}
    assert len(cuts) > 200
    expect = {1: {"model", "optim"}, 2: {"model", "optim", "teacher"}, 3: set(SECTIONS)}[version]
    assert expect <= sections, sections  # a truncation names the section it cut into


def test_v3_every_header_bit_and_keyed_random_bits(files):
    blob, d = files[3], files["dir"]
    bits = (
        list(range(8 * HEADER_LEN)) + keyed_randint(3, 1, STREAM_TEST, 8 * HEADER_LEN, 8 * len(blob) - 1, 400).tolist()
    )
    seen = set()
    for b in bits:
        bad = bytearray(blob)
        bad[b // 8] ^= 1 << (b % 8)
        seen.add(refused(d, bytes(bad)).section)
    assert {"header", "magic", "model", "optim", "teacher", "stress", "meta"} <= seen, seen


def test_v3_two_byte_bursts_in_every_section(files):
    blob, d = files[3], files["dir"]
    for i in range(len(SECTIONS)):
        _, off, n, _, _ = ENTRY.unpack_from(blob, HEADER.size + i * ENTRY.size)
        for at in keyed_randint(3, 2 + i, STREAM_TEST, off, off + n - 2, 10).tolist():
            bad = bytearray(blob)
            bad[at] ^= 0xFF
            bad[at + 1] ^= 0x5A
            assert refused(d, bytes(bad)).section == SECTIONS[i]


def test_v2_detectable_header_bits(files):
    "Magic, the three lengths and unknown flag bits are caught; the step field and the latch bit are not (no checksum)."
    blob, d = files[2], files["dir"]
    bits = list(range(0, 64)) + list(range(128, 320)) + list(range(8 * 40 + 1, 8 * 48))
    for b in bits:
        bad = bytearray(blob)
        bad[b // 8] ^= 1 << (b % 8)
        refused(d, bytes(bad))
    # honesty check: the undetectable ones really load (as a different step / latch) — this is why v3 exists
    bad = bytearray(blob)
    bad[8] ^= 1
    assert loads_ok(d, bytes(bad)).step == files["state"].step ^ 1
    bad = bytearray(blob)
    bad[40] ^= 1
    assert loads_ok(d, bytes(bad)).flags == files["state"].flags ^ 1


def test_v1_length_bits(files):
    blob, d = files[1], files["dir"]
    for b in range(64, 192):
        bad = bytearray(blob)
        bad[b // 8] ^= 1 << (b % 8)
        refused(d, bytes(bad))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_trailing_bytes(files, version):
    e = refused(files["dir"], files[version] + b"\0")
    assert e.section in ("trailer", "magic")


def resign(blob: bytes, lengths: dict) -> bytes:
    "A v3 file whose header (with a valid checksum) declares other section lengths: crafted, not damaged."
    head = bytearray(blob[:HEADER_LEN])
    off = HEADER_LEN
    for j, name in enumerate(SECTIONS):
        at = HEADER.size + j * ENTRY.size
        tag, _, n, c, pr = ENTRY.unpack_from(head, at)
        n = lengths.get(name, n)
        ENTRY.pack_into(head, at, tag, off, n, c, pr)
        off += n
    head[-4:] = struct.pack("<I", zlib.crc32(bytes(head[:-4])))
    return bytes(head) + blob[HEADER_LEN:]


@pytest.mark.parametrize("name", SECTIONS)
def test_v3_lengths_past_the_end(files, name):
    e = refused(files["dir"], resign(files[3], {name: 2**40}))
    assert e.section == name and "past the end" in str(e)


def test_v3_crafted_inconsistent_tables(files):
    blob, d = files[3], files["dir"]
    e = refused(d, resign(blob, {"model": 10, "optim": 10}))  # lengths shrink: the rest is trailing / unparsable
    assert e.section in ("trailer", "model")
    head = bytearray(blob[:HEADER_LEN])
    struct.pack_into("<Q", head, HEADER.size + 8, 999)  # an offset that is not contiguous
    head[-4:] = struct.pack("<I", zlib.crc32(bytes(head[:-4])))
    assert refused(d, bytes(head) + blob[HEADER_LEN:]).section == "header"


@pytest.mark.parametrize("version", [1, 2])
def test_legacy_lengths_past_the_end(files, version):
    blob = bytearray(files[version])
    at = 8 if version == 1 else 16
    struct.pack_into("<Q", blob, at, 2**40)
    e = refused(files["dir"], bytes(blob))
    assert "past the end" in str(e) or "not a valid v1" in str(e)


def test_magic_and_versions(files):
    blob, d = files[3], files["dir"]
    assert refused(d, b"XXXX" + blob[4:]).section == "magic"
    for v in (4, 9, 255):
        e = refused(d, blob[:5] + bytes([v]) + blob[6:])
        assert e.section == "magic" and "newer" in str(e)
    for v in (0, 1):
        assert refused(d, blob[:5] + bytes([v]) + blob[6:]).section == "magic"
    assert refused(d, b"").section == "header"
    assert refused(d, b"DMCK\0\3\0").section == "header"


class Bomb:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_pickle_files_are_refused_and_never_run(files, tmp_path):
    d = files["dir"]
    marker = tmp_path / "pwned"
    # positive control: the payload is live — unpickling it does create the marker (done here on purpose, once)
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(Bomb(control)))
    assert control.exists()
    for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
        refused(d, pickle.dumps(Bomb(marker), protocol=proto), "evil.dmck")
        refused(d, pickle.dumps({"model": Bomb(marker)}, protocol=proto), "evil.dmck")
    # a torch-style zip archive with a pickle inside
    z = tmp_path / "zip.dmck"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps(Bomb(marker)))
    e = refused(d, z.read_bytes(), "evil.dmck")
    assert "zip" in str(e)
    # the right magic and a valid header checksum, but a pickle where the model section should be
    payload = pickle.dumps(Bomb(marker))
    blob = files[3]
    _, off, n, _, _ = ENTRY.unpack_from(blob, HEADER.size)
    model = payload + b"\0" * (n - len(payload))
    head = bytearray(blob[:HEADER_LEN])
    tag, o, ln, _, pr = ENTRY.unpack_from(head, HEADER.size)
    ENTRY.pack_into(head, HEADER.size, tag, o, ln, zlib.crc32(model), pr)
    head[-4:] = struct.pack("<I", zlib.crc32(bytes(head[:-4])))
    e = refused(d, bytes(head) + model + blob[off + n :], "evil.dmck")
    assert e.section == "model"
    assert not marker.exists()


def test_describe_never_raises_on_bad_files(files):
    d = files["dir"]
    for k in [0, 5, 100, 300, len(files[3]) - 1]:
        p = d / "desc.dmck"
        p.write_bytes(files[3][:k])
        out = describe(p)
        assert "REFUSED" in out
    with pytest.raises(CheckpointError):
        describe(d / "does-not-exist.dmck")


def pair_dir(tmp_path, step=100, keep=3):
    s = small_state(step=step)
    tables = NgramTables([2, 3], 32, 4)
    tables.table_step = step
    tables.weight += torch.from_numpy(keyed_normal(1, step, STREAM_TEST, tables.weight.numel()).astype("float32")).view(
        tables.weight.shape
    )
    save_run_ckpt(tmp_path, s, tables, keep=keep)
    return s, tables


def test_sidecar_damage_and_mismatch(tmp_path):
    s, tables = pair_dir(tmp_path)
    ck, t, *_ = load_run_ckpt(tmp_path / "step_000100.dmck")
    assert torch.equal(t.weight, tables.weight) and ck.table_step == t.table_step == 100
    sp = tmp_path / "step_000100.ngram"
    good = sp.read_bytes()
    for b in keyed_randint(5, 0, STREAM_TEST, 0, 8 * len(good) - 1, 60).tolist():
        bad = bytearray(good)
        bad[b // 8] ^= 1 << (b % 8)
        sp.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError):
            load_run_ckpt(tmp_path / "step_000100.dmck")
    for k in (0, 10, len(good) // 2, len(good) - 1):
        sp.write_bytes(good[:k])
        with pytest.raises(CheckpointError) as ei:
            load_run_ckpt(tmp_path / "step_000100.dmck")
        assert ei.value.section == "tables"
    # another step's tables file: both steps named
    save_tables_file(sp, tables, 90)
    with pytest.raises(CheckpointError, match="train_step 90 .* at step 100"):
        load_run_ckpt(tmp_path / "step_000100.dmck")
    # another run's tables file at the same step: refused by identity
    other = NgramTables([2, 3], 32, 4)
    other.table_step = 100
    save_tables_file(sp, other, 100)
    with pytest.raises(CheckpointError, match="another run"):
        load_run_ckpt(tmp_path / "step_000100.dmck")
    with pytest.raises(CheckpointError, match="another run"):
        find_latest(tmp_path, log=lambda m: None)
    sp.write_bytes(good)
    assert load_run_ckpt(tmp_path / "step_000100.dmck")[0].step == 100


def test_renamed_container_is_refused(tmp_path):
    pair_dir(tmp_path)
    os.rename(tmp_path / "step_000100.dmck", tmp_path / "step_000200.dmck")
    with pytest.raises(CheckpointError, match="file name says step 200"):
        load_run_ckpt(tmp_path / "step_000200.dmck")


def test_find_latest_skips_torn_and_refuses_when_nothing_loads(tmp_path):
    assert find_latest(tmp_path / "none") is None
    pair_dir(tmp_path, 100)
    pair_dir(tmp_path, 200)
    blob = (tmp_path / "step_000200.dmck").read_bytes()
    (tmp_path / "step_000200.dmck").write_bytes(blob[:-3])
    log = []
    ck, tables, p, *_ = find_latest(tmp_path, log=log.append)
    assert ck.step == 100 and p.name == "step_000100.dmck" and "skipping step_000200.dmck" in log[0]
    (tmp_path / "step_000100.dmck").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="none loadable"):
        find_latest(tmp_path, log=lambda m: None)


def rotation_run(d: Path, keep: int, junk: list, steps: list) -> list:
    "Junk files first, then paired saves at `steps` with `keep`; returns the warnings rotation gave."
    d.mkdir(parents=True, exist_ok=True)
    for name in junk:
        (d / name).write_bytes(b"junk, not a container")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in steps:
            pair_dir(d, step, keep)
    return [str(w.message) for w in caught]


def test_rotation_keeps_the_checkpoint_just_written_past_a_junk_name(tmp_path):
    "Issue 13 repro: keep=1 and a junk ckpt/step_000999.dmck; the next save used to delete the checkpoint it wrote."
    warned = rotation_run(tmp_path, 1, ["step_000999.dmck"], [10])
    assert (tmp_path / "step_000010.dmck").exists() and (tmp_path / "step_000010.ngram").exists()
    assert (tmp_path / "step_000999.dmck").read_bytes() == b"junk, not a container"  # left alone ...
    assert len(warned) == 1 and "step_000999.dmck" in warned[0]  # ... and named
    ck, tables, p, *_ = find_latest(tmp_path, log=lambda m: None)
    assert (ck.step, p.name, tables.table_step) == (10, "step_000010.dmck", 10)


def test_rotation_counts_loadable_checkpoints_not_names(tmp_path):
    "Issue 13 repro: keep=3 and three junk files used to delete checkpoints 10-30; unknown files stay and are named."
    warned = rotation_run(
        tmp_path, 3, ["step_000997.dmck", "step_000998.dmck", "step_000999.dmck", "notes.txt"], [10, 20, 30]
    )
    assert [s for s, _ in list_ckpts(tmp_path)] == [10, 20, 30, 997, 998, 999]
    for step in (10, 20, 30):
        assert load_run_ckpt(tmp_path / f"step_{step:06d}.dmck")[0].step == step
    assert warned and all("notes.txt" in w and "step_000997.dmck" in w for w in warned)
    assert (tmp_path / "notes.txt").exists()
    with pytest.warns(UserWarning, match="notes.txt"):
        pair_dir(tmp_path, 40, 3)  # rotation still rotates the real ones
    assert [s for s, _ in list_ckpts(tmp_path)] == [20, 30, 40, 997, 998, 999]
    assert not (tmp_path / "step_000010.ngram").exists()


def test_rotation_of_a_clean_directory(tmp_path):
    "Without junk: the newest `keep` checkpoints stay; older ones, orphan tables files and temp files go; no warning."
    (tmp_path / "step_000005.ngram").write_bytes(b"orphan")
    (tmp_path / ".step_000007.dmck.tmp.12345").write_bytes(b"stray")
    assert rotation_run(tmp_path, 2, [], [10, 20, 30]) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_000020.dmck",
        "step_000020.ngram",
        "step_000030.dmck",
        "step_000030.ngram",
    ]


def test_describe_verifies_the_sidecar_payload(tmp_path):
    "A tables file with one flipped payload byte is described as damaged, never as 'matches' and 'verdict: loads'."
    pair_dir(tmp_path)
    cp, sp = tmp_path / "step_000100.dmck", tmp_path / "step_000100.ngram"
    assert "matches" in describe(cp) and describe(cp).endswith("verdict: loads")
    good = sp.read_bytes()
    hd = read_tables_file_header(sp)
    for pos in (hd.header_bytes, hd.header_bytes + hd.section_bytes - 1, hd.file_bytes - 33 - 7):  # weight, momentum
        bad = bytearray(good)
        bad[pos] ^= 0x01
        sp.write_bytes(bytes(bad))
        out = describe(cp)
        assert "matches" not in out and "checksum mismatch" in out and "verdict: REFUSED" in out, out
        with pytest.raises(CheckpointError, match="checksum mismatch"):
            load_run_ckpt(cp)
    save_tables_file(sp, NgramTables([2, 3], 32, 4), 100)  # intact, but another run's tables
    assert "DOES NOT MATCH" in describe(cp) and "verdict: REFUSED" in describe(cp)
    sp.write_bytes(good)
    assert describe(cp).endswith("verdict: loads")


WRITER = textwrap.dedent("""
    import sys, torch
    from dormouse.checkpoints import save_run_ckpt
    from dormouse.container import RunState
    from dormouse.numerics import numeric_env
    w = torch.arange(4_000_000, dtype=torch.float32)  # ~16 MB model, ~48 MB container: kills land inside saves
    s = RunState(step=0, model={"w": w},
                 optim={"state": {0: {"m": w * 2, "v": w * 3}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
                 teacher=None, flags=0, stress=None, table_step=None, env=numeric_env(1))
    step = 1
    while True:
        s.step = step
        save_run_ckpt(sys.argv[1], s, None, keep=2)
        print(step, flush=True); step += 1
""")


def test_kill_during_saves_never_leaves_a_torn_file(tmp_path):
    "SIGKILL a process that saves in a loop at keyed random moments: every final-named file loads; strays are ignored."
    ckpt = tmp_path / "ckpt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    last, strays = 0, 0
    for i, delay in enumerate(keyed_uniform(9, 0, STREAM_TEST, 5).tolist()):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(ckpt)], stdout=subprocess.PIPE, env=env)
        first = proc.stdout.readline()  # at least one complete save in this round
        assert first, "writer died"
        time.sleep(0.05 + 0.5 * delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        for f in ckpt.iterdir():
            if f.suffix == ".dmck":
                assert load_ckpt(f).step > 0
            strays += f.name.endswith(".tmp." + str(proc.pid))
        ck, tables, p, *_ = find_latest(ckpt, log=lambda m: None)
        assert ck.step >= 1 and tables is None
        last = ck.step
    assert last >= 1 and strays >= 1, "no kill landed inside a save: the test did not test anything"
