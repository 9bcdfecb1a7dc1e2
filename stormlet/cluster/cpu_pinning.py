"""Which CPU a supervisor pins each of its workers to.

A worker runs its Python on one core at a time (the GIL), and its threads hand the GIL to each
other thousands of times a second. Left to the scheduler, those threads wander over every core:
a handoff may land on a core whose caches hold another worker's data, and two workers' threads
take turns on both cores. Pinned, a worker's threads share one core's caches and workers do not
take each other's core. On the 2-core machine, two pinned workers counted a median ~5% more words
a second than unpinned ones (``benchmarks/cluster_wordcount.py``, 2026-11-26).

Pinning suits one worker per core, so a supervisor pins by default only when it has no more
slots than CPUs it may use (``pins_by_default``). Each new worker takes the CPU that the fewest
running workers on this machine are pinned to, lowest first (``choose_cpu``): the supervisor reads
their command lines, so two supervisors on one machine spread their workers between them.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)

# The worker command's option naming its CPU: the supervisor writes it, the worker obeys it, and
# every supervisor on the machine reads it back from the running workers' command lines.
CPU_OPTION = "--cpu"


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity, which a container or taskset narrows);
    none where the system cannot pin (only Linux can, of the systems Python supports)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def pins_by_default(slots: int, cpus: Sequence[int]) -> bool:
    """Whether a supervisor with ``slots`` worker slots pins its workers unless told: when every
    worker can have a core of its own."""
    return 0 < slots <= len(cpus)


def pinned_cpu(command: Sequence[bytes]) -> int | None:
    """The CPU a worker's command line (``/proc/<pid>/cmdline`` split at NULs) pins it to."""
    option = CPU_OPTION.encode()
    for i, arg in enumerate(command[:-1]):
        if arg == option:
            try:
                return int(command[i + 1])
            except ValueError:
                return None
    return None


def choose_cpu(cpus: Sequence[int], taken: Iterable[int]) -> int:
    """The CPU of ``cpus`` that the fewest of ``taken`` (the CPUs running workers are pinned to)
    name; the lowest of those that tie."""
    if not cpus:
        raise ValueError("no CPU to choose from")
    load = Counter(taken)
    return min(cpus, key=lambda cpu: (load[cpu], cpu))


def pin_this_process(cpu: int) -> bool:
    """Run this process (and every thread it starts from now on) on ``cpu`` alone. A CPU it may
    not use is logged and ignored: the worker then runs unpinned rather than not at all."""
    try:
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError, ValueError) as exc:   # AttributeError: not on Linux
        log.warning("could not pin this worker to CPU %d (%s); running unpinned", cpu, exc)
        return False
    return True
