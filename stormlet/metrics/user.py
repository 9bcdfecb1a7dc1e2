"""Metrics a component registers through its context, Storm 2 style:

    def prepare(self, conf, context, collector):
        self.parsed = context.register_counter("parsed")
        self.sizes = context.register_histogram("size_bytes")
        context.register_gauge("cache_entries", lambda: len(self.cache))

    def execute(self, tup):
        self.parsed.inc()
        self.sizes.update(len(tup["raw"]))

Each task has its own; they appear in the metrics snapshot under the task's ``"user"``.
Counters and histograms are updated on the task's thread and read by whichever thread takes the
snapshot; a gauge's function is called on that thread, so it should only read a value.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Values a histogram keeps: its percentiles are over the most recent ones.
RESERVOIR = 1024


class Counter:
    """A count that only goes up: ``inc()``, ``inc(5)``."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n

    def read(self) -> int:
        return self.value


def _finite(value: Any) -> Any:
    """``value``, or None for NaN and infinities: JSON has no such numbers, and a snapshot that
    holds one cannot be sent or shown."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Gauge:
    """A value read when the snapshot is taken, by calling ``fn()``; None when it raises."""

    __slots__ = ("fn", "logged")

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.logged = False   # a gauge that keeps raising is logged once, not every snapshot

    def read(self) -> Any:
        try:
            value = self.fn()
        except Exception:  # a broken gauge must not break the snapshot of every other metric
            if not self.logged:
                self.logged = True
                log.warning("gauge %r raised; it reads as None (logged once)", self.fn,
                            exc_info=True)
            return None
        if isinstance(value, (int, float)):
            return _finite(value)
        return None if value is None else str(value)


class Histogram:
    """A distribution of values: ``update(value)``. Reports the count and mean of every value
    since the start, and the median and 99th percentile of the last 1024."""

    __slots__ = ("count", "recent", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.recent: deque[float] = deque(maxlen=RESERVOIR)

    def update(self, value: float) -> None:
        self.recent.append(value)
        self.count += 1
        self.sum += value

    def read(self) -> dict[str, float | None]:
        recent = sorted(self.recent)   # copied in one C call: never torn by an update
        if not self.count or not recent:
            return {"count": self.count, "mean": None, "p50": None, "p99": None}
        return {"count": self.count, "mean": _finite(self.sum / self.count),
                "p50": _finite(_nearest_rank(recent, 50)),
                "p99": _finite(_nearest_rank(recent, 99))}


def _nearest_rank(ordered: list[float], p: float) -> float:
    return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]


class UserMetrics:
    """One task's registered metrics, by name."""

    def __init__(self, owner: str = "this task"):
        self.owner = owner
        self.metrics: dict[str, Counter | Gauge | Histogram] = {}

    def _register(self, name: str, kind: type, make: Callable[[], Any]) -> Any:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.owner}: a metric name must be a non-empty string, "
                             f"got {name!r}")
        existing = self.metrics.get(name)
        if existing is not None:
            if type(existing) is not kind:
                raise ValueError(f"{self.owner}: metric {name!r} is already registered as a "
                                 f"{type(existing).__name__.lower()}")
            return existing
        metric = self.metrics[name] = make()
        return metric

    def counter(self, name: str) -> Counter:
        return self._register(name, Counter, Counter)

    def gauge(self, name: str, fn: Callable[[], Any]) -> Gauge:
        if not callable(fn):
            raise TypeError(f"{self.owner}: gauge {name!r} needs a function to call, got {fn!r}")
        gauge = self._register(name, Gauge, lambda: Gauge(fn))
        gauge.fn = fn   # registering again replaces the function, as a re-prepared bolt expects
        return gauge

    def histogram(self, name: str) -> Histogram:
        return self._register(name, Histogram, Histogram)

    def read(self) -> dict[str, Any]:
        return {name: metric.read() for name, metric in list(self.metrics.items())}
