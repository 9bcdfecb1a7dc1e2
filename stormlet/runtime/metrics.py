"""Cheap counters and a latency histogram, owned by one executor thread and read by anyone."""

from __future__ import annotations

import math
from collections import Counter

from .errors import ErrorRecord, TaskErrors

__all__ = ["ErrorRecord", "LatencyHistogram", "TaskMetrics", "summarize"]

# Log-scale buckets: 40 per factor of 10, i.e. about 6% resolution, from 1 µs to 10^4 s.
_BUCKETS_PER_DECADE = 40
_BUCKETS = 10 * _BUCKETS_PER_DECADE


class LatencyHistogram:
    """Latencies in seconds, kept as bucket counts so memory does not grow with the count."""

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.total = 0
        self.sum = 0.0

    def record(self, seconds: float) -> None:
        micros = seconds * 1e6
        bucket = int(math.log10(micros) * _BUCKETS_PER_DECADE) if micros > 1 else 0
        self.counts[bucket if bucket < _BUCKETS else _BUCKETS - 1] += 1
        self.total += 1
        self.sum += seconds

    def merge(self, other: LatencyHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total += other.total
        self.sum += other.sum

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0-100) in seconds, or None without samples."""
        if not self.total:
            return None
        rank = max(1, math.ceil(self.total * p / 100))
        seen = 0
        for bucket, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                # The bucket's upper edge: never reports less than was measured.
                return 10 ** ((bucket + 1) / _BUCKETS_PER_DECADE) / 1e6
        return None

    def mean(self) -> float | None:
        return self.sum / self.total if self.total else None


class TaskMetrics:
    """Counters for one task. Written by its executor thread only (except ``errors``, which
    takes its own lock: the watchdog adds to it too); reads may be a moment stale."""

    __slots__ = ("component", "task", "emitted", "executed", "acked", "failed", "fail_reasons",
                 "complete_latency", "errors")

    def __init__(self, component: str, task: int, errors: TaskErrors | None = None):
        self.component = component
        self.task = task
        self.emitted = 0
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.fail_reasons: Counter[str] = Counter()
        self.complete_latency = LatencyHistogram()
        self.errors = errors or TaskErrors(component, task)


def summarize(tasks: list[TaskMetrics]) -> dict[str, dict]:
    """Per component totals, with complete latency percentiles in milliseconds."""
    by_component: dict[str, list[TaskMetrics]] = {}
    for m in tasks:
        by_component.setdefault(m.component, []).append(m)
    summary = {}
    for component, ms in sorted(by_component.items()):
        latency = LatencyHistogram()
        reasons: Counter[str] = Counter()
        for m in ms:
            latency.merge(m.complete_latency)
            reasons.update(m.fail_reasons)
        summary[component] = {
            "tasks": len(ms),
            "emitted": sum(m.emitted for m in ms),
            "executed": sum(m.executed for m in ms),
            "acked": sum(m.acked for m in ms),
            "failed": sum(m.failed for m in ms),
            "fail_reasons": dict(reasons),
            "complete_latency_ms": {
                "mean": _ms(latency.mean()),
                "p50": _ms(latency.percentile(50)),
                "p99": _ms(latency.percentile(99)),
            },
            "errors": sum(m.errors.count for m in ms),   # every one, logged or not
        }
    return summary


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
