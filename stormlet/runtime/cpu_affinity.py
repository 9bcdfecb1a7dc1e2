"""Which CPUs a process's threads may run on, and keeping a process's executors on one of them.

A process runs Python on one core at a time (the GIL), and its executor threads hand the GIL,
and their tuples, to each other thousands of times a second. Left to the scheduler, they wander
over every core: a bolt then reads the tuples its upstream executor just wrote from the other
core's cache, and the allocator hands out blocks that another core freed. On one core they share
its caches. Measured on the 2-core machine with the peer word count (2026-11-27, alternating
runs): acking on, 0.61-0.99M words/s with local mode's executors on one CPU against 0.48-0.62M
left to the scheduler; acking off, 1.02-1.35M against 0.80-1.00M.

A supervisor pins each worker whole when it can give each a CPU of its own
(stormlet/cluster/cpu_pinning.py). Local mode pins
only the executor threads it starts, never the caller's: a program that runs a LocalCluster
keeps its own threads where the scheduler puts them. Every local topology of a process shares
one CPU (``local_executor_cpu``), as they share the GIL. Threads and processes a spout or bolt
starts (a client library's I/O threads, a subprocess, a multiprocessing pool) inherit its CPU,
and ``os.sched_getaffinity`` there names that one CPU: a topology whose components do heavy work
outside the GIL, on threads or processes of their own, runs with ``stormlet.local.one.cpu``
false. The CPU is chosen once, where the first topology started: processes started together
spread as the scheduler spread them then, but nothing moves them apart later.

A thread outside the executors (the caller's, the metrics reader's) now waits longer for the
GIL, which busier executors hold more of the time: each time it gives the GIL up for I/O it waits
up to a switch interval (5 ms) to get it back. One metrics snapshot of the word count took a
median 7-29 ms against 9-15 ms before (benchmarks/metrics_cost.py, two runs each).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

# The field of /proc/<pid>/task/<tid>/stat that is the CPU the thread last ran on (proc(5)'s
# "processor", field 39), counted after the command's closing parenthesis as field 3.
STAT_PROCESSOR_FIELD = 39 - 3

_local_cpu: int | None = None
_local_cpu_lock = threading.Lock()


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity, which a container or taskset narrows);
    none where Python cannot pin (``os.sched_getaffinity`` is missing: not Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def pin_current_thread(cpu: int) -> None:
    """Run the calling thread, and every thread it starts from then on, on ``cpu`` alone.
    Raises ``OSError`` (or ``ValueError``) if it may not, ``AttributeError`` where Python
    cannot pin (not Linux)."""
    os.sched_setaffinity(0, {cpu})


def current_cpu() -> int | None:
    """The CPU the calling thread last ran on, from /proc; None where that cannot be read."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[STAT_PROCESSOR_FIELD])
    except (OSError, IndexError, ValueError):
        return None


def local_executor_cpu() -> int | None:
    """The CPU this process's local-mode executors run on: chosen once per process, the one the
    first caller runs on (so that processes started together spread as the scheduler spread
    them); None when the process may use only one CPU anyway, or cannot pin."""
    global _local_cpu
    with _local_cpu_lock:
        cpus = usable_cpus()
        if len(cpus) < 2:
            return None
        if _local_cpu not in cpus:
            here = current_cpu()
            _local_cpu = here if here in cpus else cpus[0]
        return _local_cpu


def pin_or_warn(cpu: int, who: str) -> bool:
    """Pin the calling thread (and the threads it starts from then on) to ``cpu``; whether it
    was. Failing to pin is logged, naming ``who``, and it runs unpinned: slower, never
    stopped."""
    try:
        pin_current_thread(cpu)
    except (AttributeError, OSError, ValueError) as exc:   # AttributeError: not on Linux
        log.warning("%s could not be pinned to CPU %d (%s); running unpinned", who, cpu, exc)
        return False
    return True


def pin_executor_thread(cpu: int | None, name: str) -> None:
    """Pin the calling executor thread to ``cpu`` (None: leave it be)."""
    if cpu is not None:
        pin_or_warn(cpu, f"executor {name}")
