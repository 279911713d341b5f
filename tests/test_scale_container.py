"""Issue 15, item 4: v3 sections are checked with xxh3_64 (checksum id 1 in the header), v3 files with crc32
(id 0) still load, and the zero-copy read — tensors as views of one huge-page buffer — still refuses any damaged byte
before a tensor reaches the caller."""

import struct, zlib

import pytest
import torch

from dormouse.container import load_ckpt, read_header, save_ckpt, section_checks
from dormouse.container_format import ENTRY, HEADER, HEADER_LEN, SECTIONS, WRITE_CHECKSUM, CheckpointError
from dormouse.rng import keyed_randint
from dormouse.testing import keyed_state

STREAM_TEST = 152  # keyed stream for this file's fills and flip positions


def big_state():
    "A model section of ~4 MiB (over the 2 MiB huge-buffer threshold) and an AdamW state for it."
    return keyed_state(12, stream=STREAM_TEST)


def resigned(blob, algo, crc=zlib.crc32):
    "The same container with every section re-checked by `crc` and checksum id `algo`, header re-signed."
    head = bytearray(blob[:HEADER_LEN])
    for j in range(len(SECTIONS)):
        at = HEADER.size + j * ENTRY.size
        tag, off, ln, _, pr = ENTRY.unpack_from(head, at)
        ENTRY.pack_into(head, at, tag, off, ln, crc(blob[off : off + ln]), pr)
    head[192:196] = struct.pack("<I", algo)
    head[-4:] = struct.pack("<I", zlib.crc32(bytes(head[:-4])))
    return bytes(head) + blob[HEADER_LEN:]


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_round_trip_is_exact_and_written_with_xxh3(tmp_path):
    s = big_state()
    p = save_ckpt(tmp_path / "a.dmck", s)
    assert WRITE_CHECKSUM == 1 and read_header(p)["checksum"] == 1
    ck = load_ckpt(p)
    same(ck.model, s.model)
    for i in s.optim["state"]:
        same(ck.optim["state"][i], s.optim["state"][i])
    ok, absent = "checksum ok", "absent"
    assert [st for _, _, st in section_checks(p)[1]] == [ok, ok, absent, absent, ok]


def test_crc32_v3_files_still_load(tmp_path):
    s = big_state()
    blob = save_ckpt(tmp_path / "a.dmck", s).read_bytes()
    old = tmp_path / "old.dmck"
    old.write_bytes(resigned(blob, 0))
    assert read_header(old)["checksum"] == 0
    same(load_ckpt(old).model, s.model)
    wrong = tmp_path / "wrong.dmck"
    wrong.write_bytes(resigned(blob, 1))  # crc32 values under the xxh3 id
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_ckpt(wrong)
    wrong.write_bytes(resigned(blob, 2))
    with pytest.raises(CheckpointError, match="checksum id 2"):
        load_ckpt(wrong)


@pytest.mark.parametrize("algo", [0, 1])
def test_any_flipped_data_bit_is_refused(tmp_path, algo):
    "Flips inside the big model tensor's data — read into the shared buffer — are refused, never handed out."
    s = big_state()
    blob = save_ckpt(tmp_path / "a.dmck", s).read_bytes()
    if algo == 0:
        blob = resigned(blob, 0)
    _, off, n, _, _ = read_header(tmp_path / "a.dmck")["sections"][0]
    bad = tmp_path / "bad.dmck"
    for b in keyed_randint(5, algo, STREAM_TEST, 8 * (off + n // 2), 8 * (off + n) - 1, 12).tolist():
        flipped = bytearray(blob)
        flipped[b // 8] ^= 1 << (b % 8)
        bad.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError, match="checksum mismatch") as e:
            load_ckpt(bad)
        assert e.value.section == "model"
