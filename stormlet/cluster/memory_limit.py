"""A worker's memory limit (``topology.worker.max.heap.size.mb``): how its supervisor measures a
worker, and what it reports when one is over.

Storm gives its worker JVM a heap size (``-Xmx``), and the JVM keeps to it. CPython has no such
ceiling, and the kernel's own ones do not fit: ``RLIMIT_AS`` counts address space a worker
reserves and never touches (every thread's stack, malloc's arenas: tens of MB a thread),
``RLIMIT_RSS`` is not enforced, and a cgroup needs rights a supervisor may not have. So the
supervisor measures: every pass of its loop (every second, ``supervisor.SYNC_SECS``) it reads the
resident set size of each worker that has a limit (``resident_mb``: one read of
``/proc/PID/statm``), and a worker over its limit is killed (SIGKILL: one that large may take
long to stop, and the machine needs its memory back) and started again.

What is measured is the worker process's memory in RAM: the interpreter, stormlet and the
libraries it loaded count (an idle worker holds a few tens of MB), processes it started do not.
Between two readings a worker can grow by more than the machine has: the limit keeps one worker
from slowly crowding out the others, it does not stop a burst from reaching the kernel's OOM
killer.

Each kill is an error of the topology, against its slot, in ``stormlet errors`` and the
supervisor's log. A worker that keeps exceeding its limit (it loads more than the limit at every
start, say) would give one per restart: ``Overruns`` records and logs one per slot per
``INTERVAL_SECS``, and counts the rest into the next one ("... and 4 more like it in the last
60 s"), as tasks' own errors are throttled (runtime/task_errors.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB
from ..runtime.protocol import SYSTEM_COMPONENT, SYSTEM_TASK
from .worker_command import PROC

log = logging.getLogger(__name__)

#: How often a slot whose workers keep exceeding their limit gets a new error (and log line).
INTERVAL_SECS = 60.0
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_MB = 1024 * 1024


def resident_mb(pid: int, proc: Path = PROC) -> float:
    """The memory in RAM (resident set size) of process ``pid``, in MB; ``OSError`` if it is
    gone."""
    fields = (proc / str(pid) / "statm").read_text().split()
    return int(fields[1]) * _PAGE_BYTES / _MB


def overrun_text(host: str, port: int, topology_id: str, used_mb: float, limit_mb: float,
                 restart_in: float) -> str:
    """What a supervisor says of a worker it stops for using too much memory."""
    when = f" in {restart_in:.0f} s" if restart_in >= 1 else ""
    return (f"worker {host}:{port} of {topology_id} used {used_mb:.0f} MB, over its limit of "
            f"{limit_mb:g} MB ({TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB}): restarted{when}")


@dataclass
class _Slot:
    topology_id: str
    error: dict                 # the newest error recorded (as cluster/error_reports.py has them)
    recorded_at: float          # when, on the monotonic clock
    count: int = 1              # every overrun on this slot by this topology's workers
    more: int = 0               # of those, the ones since the newest recorded one


class Overruns:
    """The overruns of a supervisor's slots: which to record and log, and which only to count.

    ``overrun(port, topology_id, text)`` for each kill; ``errors(port, topology_id)`` and
    ``count(port, topology_id)`` for the supervisor's report; ``retain`` forgets topologies that
    are gone. One thread at a time (the supervisor's loop)."""

    def __init__(self, interval_secs: float = INTERVAL_SECS,
                 clock: Callable[[], float] = time.monotonic):
        self.interval_secs = interval_secs
        self._clock = clock
        self._slots: dict[int, _Slot] = {}

    def overrun(self, port: int, topology_id: str, text: str) -> None:
        """A worker of ``topology_id`` on ``port`` was stopped over its limit, as ``text``
        says: recorded and logged as a warning if its slot had none recorded in the last
        interval, else counted (and logged at info)."""
        now = self._clock()
        slot = self._slots.get(port)
        if slot is not None and slot.topology_id == topology_id:
            if now - slot.recorded_at < self.interval_secs:
                slot.count += 1
                slot.more += 1
                log.info("%s (one such error a slot is recorded every %.0f s: %d more since)",
                         text, self.interval_secs, slot.more)
                return
            if slot.more:
                text = (f"{text} ... and {slot.more} more like it in the last "
                        f"{now - slot.recorded_at:.0f} s")
            count = slot.count + 1
        else:
            count = 1
        log.warning("%s", text)
        error = {"component": SYSTEM_COMPONENT, "task": SYSTEM_TASK, "time": time.time(),
                 "error": text, "detail": ""}
        self._slots[port] = _Slot(topology_id, error, now, count)

    def errors(self, port: int, topology_id: str) -> list[dict]:
        """The newest error recorded for ``topology_id``'s workers on ``port`` (none or one)."""
        slot = self._slots.get(port)
        return [dict(slot.error)] if slot is not None and slot.topology_id == topology_id else []

    def count(self, port: int, topology_id: str) -> int:
        """How many of ``topology_id``'s workers on ``port`` were stopped over their limit."""
        slot = self._slots.get(port)
        return slot.count if slot is not None and slot.topology_id == topology_id else 0

    def retain(self, keep: Callable[[str], bool]) -> None:
        """Forget the slots whose topology ``keep`` refuses (it is gone from this node)."""
        for port in [p for p, s in self._slots.items() if not keep(s.topology_id)]:
            del self._slots[port]
