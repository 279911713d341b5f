"""A tables file that claims far more than it holds (a sparse 8 GiB file of 120 KB written) is refused from its
header and its size, never read whole: `dormouse inspect` and a resume read a bounded number of bytes (counted from
/proc/self/io, not timed)."""

import os
from pathlib import Path

import pytest

from dormouse.report import describe
from dormouse.testing import tiny_cfg
from dormouse.train import fit

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io to count bytes read")


def _bytes_read() -> int:
    return int(next(line for line in open("/proc/self/io") if line.startswith("rchar")).split()[1])


def test_a_sparse_tables_file_is_refused_without_reading_its_claim(tmp_path):
    run = tmp_path / "run"
    fit(tiny_cfg(steps=10), run, progress=False)
    ck = run / "ckpt" / "step_000010.dmck"
    tables = next((run / "ckpt").glob("step_000010.ng*"))
    os.truncate(tables, 8 << 30)  # holes: 8 GiB to read, nothing on disk
    before = _bytes_read()
    text = describe(ck)
    read = _bytes_read() - before
    assert "DAMAGED" in text and "8589934592 bytes" in text and "verdict: REFUSED" in text, text
    assert read < 16 << 20, f"inspect read {read:,} bytes of a sparse 8 GiB tables file"
