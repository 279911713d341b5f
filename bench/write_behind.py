#!/usr/bin/env python3
"""What writing a checkpoint's tables file costs in CPU, written plainly or behind (`dormouse.fsio.WriteBehind`).

A file the size of a default checkpoint's tables file (117 MB) is written in 1 MiB slices and fsynced, two ways:
- plainly: every written page stays in the page cache until the file is deleted, so the write takes 117 MB of page
  cache it has not used before;
- behind: through `WriteBehind`, which every `WRITE_BEHIND` bytes (4 MiB) syncs what it wrote and drops it from the
  page cache, so the next slices reuse the pages just freed (what `fsio.atomic_write` does).
The two alternate, `--rounds` times, with `--pause` seconds of sleep before each write (and the file deleted before
the pause): on a virtual machine whose hypervisor takes back memory the guest freed, the pause lets it do so, so each
plain write pays for fresh memory as a checkpoint written every few minutes does. Measured per write: the process's
CPU time (user + system, `time.process_time`: the kernel's page allocation and zeroing is system time) and wall time.
Printed per round, and the median, least and most per way; the results go to bench/results/write_behind.json.
Where the hypervisor does not take freed memory back (or on bare metal) the two ways cost about the same.

A speed measurement: run it on a quiet machine; the load average is recorded with the result. About half a minute.

  python bench/write_behind.py
  python bench/write_behind.py --rounds 5 --pause 5 --dir /var/tmp
"""

import argparse, datetime, json, os, statistics, sys, tempfile, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dormouse.fsio import WRITE_BEHIND, WriteBehind  # noqa: E402
from _results import machine  # noqa: E402  (bench/_results.py: where a result ran)

RESULT = ROOT / "bench" / "results" / "write_behind.json"
FILE_BYTES = 117_000_000  # a default checkpoint's tables file, about
SLICE = 1 << 20


def write(path: Path, data: memoryview, behind: bool) -> tuple:
    "(CPU seconds, wall seconds) of writing `data` to a new file at `path` and fsyncing it."
    c0, t0 = time.process_time(), time.perf_counter()
    with open(path, "wb") as f:
        out = WriteBehind(f) if behind else f
        for i in range(0, len(data), SLICE):
            out.write(data[i:i + SLICE])
        if behind:
            out.sync()
        else:
            f.flush()
            os.fsync(f.fileno())
    return time.process_time() - c0, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="pairs of writes (plain, behind)")
    ap.add_argument("--pause", type=float, default=5.0, help="seconds of sleep before each write")
    ap.add_argument("--dir", default=None, help="folder for the file (default: the system's temp folder)")
    a = ap.parse_args(argv)
    if not hasattr(os, "posix_fadvise"):
        print("this platform has no posix_fadvise: WriteBehind only writes, there is nothing to compare")
        return 1
    data = memoryview(np.random.default_rng(0).integers(0, 256, FILE_BYTES, dtype=np.uint8).tobytes())
    load = os.getloadavg()
    print(f"{machine()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{FILE_BYTES / 1e6:.0f} MB in {SLICE >> 20} MiB slices, write-behind every {WRITE_BEHIND >> 20} MiB")
    got = {"plain": [], "behind": []}
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        path = Path(d) / "tables.bin"
        for r in range(a.rounds):
            for kind in ("plain", "behind"):
                time.sleep(a.pause)
                cpu, wall = write(path, data, kind == "behind")
                path.unlink()
                got[kind].append({"cpu_s": cpu, "wall_s": wall})
                print(f"  round {r}: {kind:6s} CPU {cpu:.3f} s, wall {wall:.3f} s")
    cpu = {k: {"cpu_s": statistics.median(x["cpu_s"] for x in v), "cpu_s_min": min(x["cpu_s"] for x in v),
               "cpu_s_max": max(x["cpu_s"] for x in v), "wall_s": statistics.median(x["wall_s"] for x in v)}
           for k, v in got.items()}
    print(f"CPU per write, median (min-max): plain {cpu['plain']['cpu_s']:.3f} s ({cpu['plain']['cpu_s_min']:.3f}-"
          f"{cpu['plain']['cpu_s_max']:.3f}), behind {cpu['behind']['cpu_s']:.3f} s ({cpu['behind']['cpu_s_min']:.3f}-"
          f"{cpu['behind']['cpu_s_max']:.3f})")
    RESULT.write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "machine": machine(), "load": [round(v, 2) for v in load],
        "source": "bench/write_behind.py", "file_bytes": FILE_BYTES, "write_behind_bytes": WRITE_BEHIND,
        "pause_s": a.pause, "per_write": cpu, "rounds": got}, indent=1) + "\n")
    print(f"written: {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
