"""Per task counters, cheap on the hot path: owned by one executor thread and read by anyone.

Most are counted per batch, not per tuple: busy time and execute latency per batch of
``execute`` calls, transferred tuples per flush, time throttled per refused handoff. Emits are
counted per stream in the collector (one dict increment, replacing the single counter there was).

Latencies, and how they are measured:

- execute: a batch's time in ``execute`` divided by its size, recorded once with the batch's
  weight (so a batch of 200 quick tuples and one slow one read as 201 of the mean).
- process (bolts): Storm's definition, the time from the start of a tuple's ``execute`` to its
  ack, for the first tuple of each batch (a sample; the few still unacked are held in the
  collector, and one never acked is dropped after the message timeout).
- complete (spouts): emit to the spout's ack, one ack in 4.

Counters are cumulative; windows (10 min, 3 h, 1 day) are differences of samples, see
``stormlet.metrics.windows``.
"""

from __future__ import annotations

from typing import Any

import cython

from ..metrics.histogram import LatencyHistogram, summary_ms, to_wire
from ..metrics.user import UserMetrics
from .task_errors import ErrorRecord, TaskErrors

__all__ = ["ErrorRecord", "LatencyHistogram", "TaskMetrics", "summarize", "window_stats"]

LATENCIES = ("execute", "process", "complete")


@cython.cclass
class TaskMetrics:
    """Counters for one task. Written by its executor thread only (except ``errors``, which
    takes its own lock: the watchdog adds to it too); reads may be a moment stale."""

    __slots__ = (
        "acked",
        "busy_secs",
        "complete_latency",
        "component",
        "_emit_counters",
        "errors",
        "execute_latency",
        "executed",
        "fail_reasons",
        "failed",
        "partitions",
        "process_latency",
        "streams",
        "task",
        "throttled_secs",
        "transferred",
        "user",
    )

    def __init__(self, component: str, task: int, errors: TaskErrors | None = None,
                 streams: tuple[str, ...] | list[str] = ()):
        self.component = component
        self.task = task
        self.streams = tuple(streams)
        # What counts each stream's emits (``.emitted``): the collector's routes, given once it
        # exists. An emit then adds to a C field, not to a dict.
        self._emit_counters: dict[str, Any] = {}
        self.transferred = 0
        self.executed = 0
        self.acked = 0
        self.failed = 0
        # (kind, component) -> count; the component is the one that failed the tuple or, for a
        # timeout, the last one its tree reached (None if unknown). A bolt's are its own fails.
        self.fail_reasons: dict[tuple[str, str | None], int] = {}
        self.busy_secs = 0.0
        self.throttled_secs = 0.0
        self.execute_latency = LatencyHistogram()
        self.process_latency = LatencyHistogram()
        self.complete_latency = LatencyHistogram()
        self.errors = errors or TaskErrors(component, task)
        self.user = UserMetrics(f"component {component!r} task {task}")
        # An offset-tracking spout's partition rows (lag etc.), refreshed on the spout's thread.
        self.partitions: list[dict] | None = None

    def count_fail(self, kind: str, component: str | None) -> None:
        key = (kind, component)
        self.fail_reasons[key] = self.fail_reasons.get(key, 0) + 1
        self.failed += 1

    def count_emits_with(self, counters: dict[str, Any]) -> None:
        """Read each stream's emits from ``counters[stream].emitted`` from now on."""
        self._emit_counters = dict(counters)

    @property
    def emitted(self) -> dict[str, int]:
        """Emits per stream, every declared stream present."""
        counters = self._emit_counters
        return {stream: counters[stream].emitted if stream in counters else 0
                for stream in self.streams}

    def emitted_total(self) -> int:
        return sum(self.emitted.values())

    def sample(self) -> dict:
        """The cumulative counters, as nested dicts of numbers (see windows.subtract)."""
        return {
            "emitted": dict(self.emitted), "transferred": self.transferred,
            "executed": self.executed, "acked": self.acked, "failed": self.failed,
            "fail_reasons": dict(self.fail_reasons),
            "busy_secs": self.busy_secs, "throttled_secs": self.throttled_secs,
            "execute": self.execute_latency.sample(), "process": self.process_latency.sample(),
            "complete": self.complete_latency.sample(),
        }


def window_stats(seconds: float, delta: dict) -> dict:
    """One window of the metrics snapshot (``W`` in the contract) from a difference of samples:
    latencies summarized in ms, and their histograms in wire form for merging across tasks."""
    reasons = sorted(((kind, component or "", component, n)
                      for (kind, component), n in delta["fail_reasons"].items() if n))
    stats = {
        "seconds": round(seconds, 3),
        "emitted": delta["emitted"],
        "transferred": delta["transferred"],
        "executed": delta["executed"],
        "acked": delta["acked"],
        "failed": delta["failed"],
        "fail_reasons": [[kind, component, n] for kind, _, component, n in reasons],
        "busy_secs": round(delta["busy_secs"], 6),
        "throttled_secs": round(delta["throttled_secs"], 6),
    }
    for name in LATENCIES:
        h = delta[name]
        stats[f"{name}_latency_ms"] = summary_ms(h["count"], h["sum"], h["buckets"])
    stats["histograms"] = {name: to_wire(delta[name]["count"], delta[name]["sum"],
                                         delta[name]["buckets"]) for name in LATENCIES}
    return stats


def summarize(tasks: list[TaskMetrics]) -> dict[str, dict]:
    """Per component totals since the start, with complete latency percentiles in ms (what
    ``LocalCluster.metrics``, ``stormlet local`` and heartbeats show)."""
    by_component: dict[str, list[TaskMetrics]] = {}
    for m in tasks:
        by_component.setdefault(m.component, []).append(m)
    summary = {}
    for component, ms in sorted(by_component.items()):
        latency = LatencyHistogram()
        reasons: dict[str, int] = {}
        for m in ms:
            latency.merge(m.complete_latency)
            for (kind, _), n in list(m.fail_reasons.items()):
                reasons[kind] = reasons.get(kind, 0) + n
        summary[component] = {
            "tasks": len(ms),
            "emitted": sum(m.emitted_total() for m in ms),
            "executed": sum(m.executed for m in ms),
            "acked": sum(m.acked for m in ms),
            "failed": sum(m.failed for m in ms),
            "fail_reasons": reasons,
            # Seconds the tasks spent executing (a bolt's batches, a spout's bursts), and
            # waiting for room downstream (backpressure).
            "busy_secs": sum(m.busy_secs for m in ms),
            "throttled_secs": sum(m.throttled_secs for m in ms),
            "complete_latency_ms": summary_ms(latency.total, latency.sum,
                                              dict(enumerate(latency.counts))),
            "errors": sum(m.errors.count for m in ms),   # every one, logged or not
        }
    return summary
