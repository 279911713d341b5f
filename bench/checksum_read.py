#!/usr/bin/env python3
"""What a checkpoint's bytes cost to check and to read: checksum speed in memory, and a page-cache read by destination.

1. Checksums over the same 64 MiB of keyed random bytes in memory, best of `--reps` passes each: zlib's crc32 (what v3
   containers carried first), crc32c (the `crc32c` package, hardware where the CPU has it; measured only when the
   package is installed: it is no dependency of the kit), the low 32 bits of xxh3_64 (the `xxhash` package: what
   `dormouse.stcodec.Checksum` writes now) and sha256 (`hashlib`: the tables file's header checksum, and version 1's
   payload checksum). Printed as GB/s (10^9 bytes a second), and as the milliseconds each takes over 100 MB.
2. A read of a 100 MB file that is in the page cache (read once before timing), best of `--reps` reads each:
   - into memory the process already mapped and touched (one buffer, reused);
   - into a freshly allocated tensor each time (`torch.empty`: a page fault per 4 KiB page on the first write);
   - into a fresh buffer advised for transparent huge pages (`dormouse.stcodec._data_buffer`, what a load uses).

A speed measurement: run it on a quiet machine; the load average is recorded with the result. It takes a few seconds.
The results go to bench/results/checksum_read.json (and are printed).

  python bench/checksum_read.py
  python bench/checksum_read.py --reps 9 --dir /var/tmp
"""

import argparse, datetime, hashlib, json, os, sys, tempfile, time, zlib
from pathlib import Path

import numpy as np
import torch
import xxhash

try:
    import crc32c
except ImportError:  # optional: measured only when installed
    crc32c = None

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dormouse.stcodec import _data_buffer  # noqa: E402
from _results import machine  # noqa: E402  (bench/_results.py: where a result ran)

RESULT = ROOT / "bench" / "results" / "checksum_read.json"
SUM_BYTES = 64 << 20  # the checksummed buffer
READ_BYTES = 100_000_000  # the file read from the page cache


def best_seconds(fn, reps: int) -> float:
    "The shortest wall time of `reps` calls of `fn` (after one untimed call)."
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def checksum_rates(reps: int) -> dict:
    "{algorithm: GB/s} over SUM_BYTES of keyed random bytes in memory."
    data = np.random.default_rng(0).integers(0, 256, SUM_BYTES, dtype=np.uint8).tobytes()
    algos = {"crc32": lambda: zlib.crc32(data), "xxh3_64": lambda: xxhash.xxh3_64_intdigest(data),
             "sha256": lambda: hashlib.sha256(data).digest()}
    if crc32c is not None:
        algos["crc32c"] = lambda: crc32c.crc32c(data)
    return {name: SUM_BYTES / best_seconds(fn, reps) / 1e9 for name, fn in algos.items()}


def read_times(reps: int, folder: str | None) -> dict:
    "{destination: seconds} for one read of a READ_BYTES file from the page cache."
    with tempfile.TemporaryDirectory(dir=folder) as d:
        path = Path(d) / "payload.bin"
        path.write_bytes(np.random.default_rng(1).integers(0, 256, READ_BYTES, dtype=np.uint8).tobytes())
        path.read_bytes()  # into the page cache

        def read_into(buf) -> None:
            with open(path, "rb", buffering=0) as f:
                view, got = memoryview(buf.numpy()).cast("B"), 0
                while got < READ_BYTES:
                    got += f.readinto(view[got:])

        mapped = torch.ones(READ_BYTES, dtype=torch.uint8)  # every page written once: mapped and touched
        return {"mapped": best_seconds(lambda: read_into(mapped), reps),
                "fresh_tensor": best_seconds(lambda: read_into(torch.empty(READ_BYTES, dtype=torch.uint8)), reps),
                "fresh_huge_pages": best_seconds(lambda: read_into(_data_buffer(READ_BYTES)), reps)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="timed passes of each measurement (the best is kept)")
    ap.add_argument("--dir", default=None, help="folder for the 100 MB file (default: the system's temp folder)")
    a = ap.parse_args(argv)
    load = os.getloadavg()
    print(f"{machine()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    rates = checksum_rates(a.reps)
    for name, rate in rates.items():
        print(f"  {name:8s} {rate:6.1f} GB/s over {SUM_BYTES >> 20} MiB in memory: {READ_BYTES / rate / 1e6:5.1f} ms "
              f"over {READ_BYTES // 10**6} MB")
    if crc32c is None:
        print("  crc32c: not measured (the crc32c package is not installed)")
    reads = read_times(a.reps, a.dir)
    for name, s in reads.items():
        print(f"  read {READ_BYTES // 10**6} MB from the page cache into {name.replace('_', ' ')} memory: "
              f"{s * 1e3:.1f} ms")
    RESULT.write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "machine": machine(), "load": [round(v, 2) for v in load],
        "source": "bench/checksum_read.py", "checksum_bytes": SUM_BYTES, "checksum_gb_per_s": rates,
        "crc32c_hardware": None if crc32c is None else bool(crc32c.hardware_based),
        "read_bytes": READ_BYTES, "read_s": reads}, indent=1) + "\n")
    print(f"written: {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
