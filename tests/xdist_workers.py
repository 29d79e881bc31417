"""How many pytest-xdist workers ``make test`` starts: twice the cores this process may use, 2 – 8.

The suite waits on processes, leases and sockets as much as it computes: on 2 cores, 3 workers used ~1.5 of
them (13.8 min), 4 workers 12.7 min (the floors test, started last, ended that run 100 s after the others: the
long tests now start first, tests/conftest.py). Cores are the CPU affinity, lowered to a cgroup v2 quota (a
container's ``--cpus``), which ``nproc`` does not see. Standard library only: it runs before the virtualenv exists."""

from __future__ import annotations

import math
import os
from pathlib import Path

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def workers() -> int:
    return max(2, min(8, usable_cores() * 2))


if __name__ == "__main__":
    print(workers())
