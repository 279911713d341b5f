"""A full disk names the file it could not write, wherever it happens: the one atomic writer (config.toml, lineage,
the metrics rewrite, containers) and the metrics log's appends and fsyncs. The checkpoint cases are in
test_cli_errors.py."""

import errno

import pytest

from dormouse.fsio import atomic_write
from dormouse.rundir import MetricsLog


def _full(*a, **kw):
    raise OSError(errno.ENOSPC, "No space left on device")  # what write(2) gives: no file name


def test_the_atomic_writer_names_the_file_a_full_disk_stopped(tmp_path):
    p = tmp_path / "config.toml"
    p.write_text("old")
    with pytest.raises(OSError) as e:
        atomic_write(p, _full)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(p), e.value
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["config.toml"]


class _FullFile:
    "An append handle on a full disk."
    write = flush = fileno = staticmethod(_full)

    def close(self):
        pass


@pytest.mark.parametrize("call", ["write", "sync"])
def test_the_metrics_log_names_its_file_when_the_disk_is_full(tmp_path, call, monkeypatch):
    p = tmp_path / "metrics.jsonl"
    log = MetricsLog(p)
    log.f.close()
    log.f = _FullFile()
    with pytest.raises(OSError) as e:
        log.write({"step": 0}) if call == "write" else log.sync()
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(p), e.value
