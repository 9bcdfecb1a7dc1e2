"""This process's CPU and memory, for the worker row of a metrics snapshot."""

from __future__ import annotations

import os
import threading
import time

import psutil

# CPU use is measured over at least this long; snapshots taken closer together repeat the last
# figure rather than divide a few milliseconds of CPU time by a few milliseconds.
MIN_CPU_INTERVAL = 1.0


class ProcessStats:
    def __init__(self) -> None:
        self.process = psutil.Process(os.getpid())
        self.pid = self.process.pid
        self.started = self.process.create_time()
        self._lock = threading.Lock()
        self._last = (time.monotonic(), self._cpu_secs())
        self._cpu_percent = 0.0

    def _cpu_secs(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def read(self) -> dict[str, float | int]:
        """pid, started (epoch), uptime, cpu_percent (100 = one core busy, since the previous
        read at least a second ago) and rss_bytes."""
        with self._lock:
            now, cpu = time.monotonic(), self._cpu_secs()
            then, cpu_then = self._last
            if now - then >= MIN_CPU_INTERVAL:
                self._cpu_percent = round(100 * (cpu - cpu_then) / (now - then), 1)
                self._last = (now, cpu)
        return {"pid": self.pid, "started": self.started, "uptime": time.time() - self.started,
                "cpu_percent": self._cpu_percent, "rss_bytes": self.process.memory_info().rss}
