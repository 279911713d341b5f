"""What every bench's result file says of where it ran: `machine()`. Imported by the benches (run as scripts from
this folder); not part of the kit."""

import os, platform


def machine() -> str:
    "The CPU's model name, the architecture and the core count."
    try:
        name = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    return f"{name}, {platform.machine()}, {os.cpu_count()} cores"
