"""Latency histograms as log-scale bucket counts: cheap to record, constant in memory, and
mergeable, so per task histograms of several workers add up to a component's percentiles.

Buckets are 20 per factor of 10 (about 12% wide) from 1 µs to 10^4 s; a percentile reports its
bucket's upper edge, so it never says less than was measured. Outside a running task a histogram
travels as ``{"count": n, "sum": seconds, "buckets": [[bucket, count], ...]}`` (non-empty buckets
only), which is JSON- and msgpack-able.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import cython

BUCKETS_PER_DECADE = 20
BUCKETS = 10 * BUCKETS_PER_DECADE


def bucket_of(seconds: float) -> int:
    micros = seconds * 1e6
    if micros <= 1:
        return 0
    # Compiled, the C function math.log10 calls, without the call: the same bucket either way.
    bucket = int((c_log10(micros)  # type: ignore[name-defined]  # noqa: F821
                  if cython.compiled else math.log10(micros)) * BUCKETS_PER_DECADE)
    return bucket if bucket < BUCKETS else BUCKETS - 1


def upper_edge(bucket: int) -> float:
    """The largest latency (seconds) ``bucket`` holds."""
    return 10 ** ((bucket + 1) / BUCKETS_PER_DECADE) / 1e6


@cython.cclass
class LatencyHistogram:
    """Latencies in seconds, written by one thread. ``sample()`` may be called from another: a
    reader sees a moment-old state, never a torn bucket."""

    __slots__ = ("counts", "sum", "total")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.total = 0
        self.sum = 0.0

    def record(self, seconds: float) -> None:
        self.counts[bucket_of(seconds)] += 1
        self.total += 1
        self.sum += seconds

    def record_many(self, seconds: float, n: int) -> None:
        """``n`` latencies of ``seconds`` each: a batch's mean latency, weighted by its size."""
        self.counts[bucket_of(seconds)] += n
        self.total += n
        self.sum += seconds * n

    def merge(self, other: LatencyHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total += other.total
        self.sum += other.sum

    def sample(self) -> dict:
        """The cumulative state, sparse: ``{"count", "sum", "buckets": {bucket: count}}``."""
        counts = list(self.counts)   # one C-level copy: consistent buckets
        buckets = {i: c for i, c in enumerate(counts) if c}
        return {"count": sum(buckets.values()), "sum": self.sum, "buckets": buckets}

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0-100) in seconds, or None without samples."""
        return percentile(enumerate(self.counts), self.total, p)

    def mean(self) -> float | None:
        return self.sum / self.total if self.total else None


def percentile(buckets: Iterable[tuple[int, int]], total: int, p: float) -> float | None:
    """The ``p``-th percentile in seconds of (bucket, count) pairs in bucket order."""
    if total <= 0:
        return None
    rank = max(1, math.ceil(total * p / 100))
    seen = 0
    for bucket, count in buckets:
        seen += count
        if seen >= rank:
            return upper_edge(bucket)
    return None


def summary_ms(count: int, total_secs: float, buckets: dict[int, int]) -> dict[str, float | None]:
    """``{"mean", "p50", "p99"}`` in milliseconds (None without samples) of a sparse histogram."""
    if count <= 0:
        return {"mean": None, "p50": None, "p99": None}
    pairs = sorted(buckets.items())
    return {"mean": _ms(total_secs / count), "p50": _ms(percentile(pairs, count, 50)),
            "p99": _ms(percentile(pairs, count, 99))}


def to_wire(count: int, total_secs: float, buckets: dict[int, int]) -> dict:
    return {"count": count, "sum": total_secs,
            "buckets": [[b, c] for b, c in sorted(buckets.items()) if c]}


def merge_wire(histograms: Iterable[dict]) -> tuple[int, float, dict[int, int]]:
    """Add up histograms in their wire form: (count, sum in seconds, sparse buckets)."""
    buckets: dict[int, int]
    count, total, buckets = 0, 0.0, {}
    for h in histograms:
        count += h["count"]
        total += h["sum"]
        for b, c in h["buckets"]:
            buckets[b] = buckets.get(b, 0) + c
    return count, total, buckets


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
