"""Which CPU a supervisor pins each of its workers to.

A worker runs its Python on one core at a time (the GIL), and its threads hand the GIL to each
other thousands of times a second. Left to the scheduler, those threads wander over every core:
a handoff may land on a core whose caches hold another worker's data, and two workers' threads
take turns on both cores. Pinned, a worker's threads share one core's caches and workers do not
take each other's core. On the 2-core machine, two pinned workers counted 5–8% more words a second
than unpinned ones (medians of alternating ``benchmarks/cluster_wordcount.py`` runs, 2026-11-26).

Pinning suits one worker per core. So by default a supervisor pins only when it has no more slots
than CPUs it may use (``pins_by_default``), and only onto a CPU that no running worker is pinned
to: once every CPU has one, further workers run unpinned. Asked to pin always, it puts a new
worker on the CPU the fewest workers are pinned to. Either way it reads the running workers'
command lines in /proc, under a lock held until the new worker's own shows there, so supervisors
that share a machine (and see each other's processes) spread their workers between them.
"""

from __future__ import annotations

import fcntl
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..runtime.cpu_affinity import pin_or_warn, usable_cpus
from .worker_command import PROC, command_line, is_worker, option_value

log = logging.getLogger(__name__)

# The worker command's option naming its CPU: the supervisor writes it (``worker_args``), the
# worker obeys it, and every supervisor on the machine reads it back (``pinned_cpu``).
CPU_OPTION = "--cpu"
# Held by a supervisor from reading where workers run until its new worker has started.
LOCK_FILE = Path(tempfile.gettempdir()) / "stormlet-cpu-pinning.lock"
# How long the lock is held at most for a new worker's command line to show in /proc.
VISIBLE_TIMEOUT_SECS = 2.0


def pins_by_default(slots: int, cpus: Sequence[int]) -> bool:
    """Whether a supervisor with ``slots`` worker slots pins its workers unless told: when every
    worker can have a core of its own."""
    return 0 < slots <= len(cpus)


def worker_args(cpu: int) -> list[str]:
    """The worker command's arguments that pin it to ``cpu``."""
    return [CPU_OPTION, str(cpu)]


def pinned_cpu(command: Sequence[bytes]) -> int | None:
    """The CPU a worker's command line (``worker_command.command_line``) pins it to."""
    value = option_value(command, CPU_OPTION)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def choose_cpu(cpus: Sequence[int], taken: Iterable[int], share: bool = True) -> int | None:
    """The CPU of ``cpus`` that the fewest of ``taken`` (the CPUs running workers are pinned to)
    name, the lowest of those that tie; without ``share``, None once every CPU is taken."""
    if not cpus:
        raise ValueError("no CPU to choose from")
    load = Counter(taken)
    cpu = min(cpus, key=lambda c: (load[c], c))
    return cpu if share or load[cpu] == 0 else None


def pin_this_process(cpu: int) -> bool:
    """Run the calling thread, and every thread it starts from then on, on ``cpu`` alone: call it
    before any other thread starts. A CPU it may not use is logged and ignored: the worker then
    runs unpinned rather than not at all."""
    return pin_or_warn(cpu, "this worker")


class CpuPinning:
    """A supervisor's choice of CPU for each worker it starts."""

    def __init__(self, slots: int, requested: bool | None, cpus: Sequence[int] | None = None,
                 proc: Path = PROC):
        """``requested``: pin always (True), never (False), or by default (None: see
        ``pins_by_default``)."""
        self.cpus = list(usable_cpus() if cpus is None else cpus)
        self.share = requested is True
        self.proc = proc
        enabled = pins_by_default(slots, self.cpus) if requested is None else requested
        if enabled and not (self.cpus and proc.is_dir()):
            log.warning("cannot pin workers to CPUs here (%s); they run unpinned",
                        "no CPU affinity" if not self.cpus else f"no {proc}")
            enabled = False
        self.enabled = enabled

    def describe(self) -> str:
        if not self.enabled:
            return "not pinned to CPUs"
        return f"pinned to CPUs of {self.cpus}, " + (
            "sharing them in turn" if self.share else "one to a CPU while one is free")

    def start(self, command: list[str], popen: Callable[[list[str]], Any]) -> Any:
        """Start a worker: ``popen`` (which returns a ``subprocess.Popen``) runs ``command`` with
        the arguments that pin it, if it is pinned. The choice and the start are made under the
        machine-wide lock, held until the new worker's command line shows in /proc, so that the
        next supervisor to choose sees its CPU."""
        if not self.enabled:
            return popen(command)
        with _machine_lock():
            try:
                taken = self.pinned_cpus()
            except OSError as exc:   # /proc went away: where the others run is unknown
                log.warning("starting a worker unpinned: cannot read %s (%s)", self.proc, exc)
                return popen(command)
            cpu = choose_cpu(self.cpus, taken, self.share)
            if cpu is None:
                return popen(command)
            process = popen([*command, *worker_args(cpu)])
            self._wait_until_visible(process)
            return process

    def _wait_until_visible(self, process: Any) -> None:
        # Right after it starts, a process's cmdline can still read empty (measured: 31 times in
        # 200 here): a scan then would miss the worker and give its CPU away again.
        deadline = time.monotonic() + VISIBLE_TIMEOUT_SECS
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if is_worker(command_line(process.pid, self.proc)):
                    return
            except OSError:
                return
            time.sleep(0.001)

    def pinned_cpus(self) -> list[int]:
        """The CPUs that the running workers this process can see, any supervisor's, are
        pinned to."""
        return [cpu for cpu in self.running_workers().values() if cpu is not None]

    def running_workers(self) -> dict[int, int | None]:
        """The running workers this process can see, any supervisor's: pid -> the CPU each is
        pinned to (None: unpinned)."""
        workers = {}
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = command_line(entry.name, self.proc)
            except OSError:   # it has just exited
                continue
            if is_worker(command):
                workers[int(entry.name)] = pinned_cpu(command)
        return workers


@contextmanager
def _machine_lock() -> Iterator[None]:
    try:
        lock = open(LOCK_FILE, "a")
    except OSError as exc:   # another user's lock file, say: choose without it
        log.debug("choosing a CPU without the lock %s: %s", LOCK_FILE, exc)
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield   # closing the file releases the lock
