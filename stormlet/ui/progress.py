"""The live one-line progress display of ``stormlet local``: totals and rates, rewritten in
place with a carriage return about once a second.

    submitted_at = time.monotonic()
    cluster.submit(name, conf, topology)
    progress = ProgressLine(lambda: totals(cluster.metrics(name), spouts), sys.stdout,
                            submitted_at=submitted_at).start()
    ...
    progress.stop()   # erases the line, so what is printed next starts clean

Only for a terminal: the caller checks ``out.isatty()`` (a log file should not fill with
carriage returns).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from typing import TextIO

from ..runtime.protocol import ACKER_COMPONENT

# Shown in this order; the rate of each is per second since the previous refresh.
FIELDS = ("emitted", "acked", "failed", "executed")


def totals(summary: dict[str, dict], spouts: set[str]) -> dict[str, int]:
    """From ``LocalCluster.metrics()``: what the spouts emitted, acked and failed (whole tuple
    trees) and what the user's bolts executed (not the ackers' bookkeeping)."""
    return {
        "emitted": sum(m["emitted"] for c, m in summary.items() if c in spouts),
        "acked": sum(m["acked"] for c, m in summary.items() if c in spouts),
        "failed": sum(m["failed"] for c, m in summary.items() if c in spouts),
        "executed": sum(m["executed"] for c, m in summary.items()
                        if c not in spouts and c != ACKER_COMPONENT),
    }


def format_line(elapsed: float, now: dict[str, int], rates: dict[str, float]) -> str:
    """``  12s  emitted 51,303 23.2k/s  acked 47,425 23.3k/s  failed 0  executed 491,430
    120k/s``: what the spouts emitted, acked and failed, and what the bolts executed."""
    parts = [f"{elapsed:.0f}s"]
    for key in FIELDS:
        rate = f" {_rate(rates[key])}/s" if rates[key] or key != "failed" else ""
        parts.append(f"{key} {now[key]:,}{rate}")
    return "  ".join(parts)


def _rate(per_sec: float) -> str:
    if per_sec >= 100_000:
        return f"{per_sec / 1000:.0f}k"
    if per_sec >= 1000:
        return f"{per_sec / 1000:.1f}k"
    return f"{per_sec:.0f}"


class ProgressLine:
    """Rewrites the line every ``interval`` seconds from ``read()``'s totals.

    ``submitted_at`` (a ``time.monotonic()`` reading) says the topology was submitted then,
    when every total was zero: the first line's rates and the elapsed time count from there.
    Without it they count from the first read, and a topology that finishes before that read
    would show no rate at all.
    """

    def __init__(self, read: Callable[[], dict[str, int]], out: TextIO, interval: float = 1.0,
                 submitted_at: float | None = None):
        self.read = read
        self.out = out
        self.interval = interval
        self.submitted_at = submitted_at
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def start(self) -> ProgressLine:
        self._thread.start()
        return self

    def _run(self) -> None:
        if self.submitted_at is None:
            started = last_time = time.monotonic()
            last = self._read()
        else:
            started = last_time = self.submitted_at
            last = dict.fromkeys(FIELDS, 0)
        while not self._stopping.wait(self.interval):
            now_time, now = time.monotonic(), self._read()
            if now is None:
                continue
            if last is not None:   # rates need a previous read
                span = max(now_time - last_time, 1e-9)
                rates = {k: max(0, now[k] - last[k]) / span for k in FIELDS}
                self._write(format_line(now_time - started, now, rates))
            last, last_time = now, now_time

    def _read(self) -> dict[str, int] | None:
        """The totals, or None while there are none: every read, the first included, goes
        through here, so that a missing topology never ends the thread."""
        try:
            return self.read()
        except LookupError:   # the topology is gone (killed from the UI) or not there yet
            return None

    def _write(self, line: str) -> None:
        width = shutil.get_terminal_size().columns - 1   # the last column would wrap
        self.out.write("\r" + line[:width].ljust(width))
        self.out.flush()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self.out.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
        self.out.flush()
