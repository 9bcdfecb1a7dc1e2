"""A topology's metrics over time, per component: what the UI's charts draw. Kept by the nimbus
leader, fed by its workers' reports (``cluster.chart_service``), and by the UI in local mode,
fed by a sampler of the local runtime (``ui.source.LocalSource``): the same class, so both draw
the same charts.

Gains, not samples. Each snapshot (``TopologyRuntime.metrics_snapshot``) holds every task's
counters since its worker process started (its ``"all"`` window). A task's counters minus the
same task's in the same process's previous snapshot are what it gained between the two reports;
the gain is spread evenly over the time between them (on this process's clock, as the reports
arrive) and filed, pro rata, in buckets on a fixed grid of that clock. So a bucket's rate is the
tuples of its own seconds however the reports fall across it, and several workers, a worker's
restart (its new process counts from zero: its counters since it started are its gain) or a
late report cost nothing but the moment they arrive. A process first heard of after it ran for
more than ``FRESH_SECS`` (by a nimbus that has just become leader) gives its counters as a base
only: its past is not known to lie in any bucket.

Two series of buckets per topology:

- **fine**: ``step`` seconds each (10: two reports at the default
  ``topology.metrics.report.secs``), for the last ``hour``;
- **coarse**: the topology's whole life, ``coarse_step`` seconds each at first; when it would
  span more than ``coarse_points`` buckets, neighbours are merged in pairs (the step doubles,
  and the grid stays aligned: bucket ``i`` becomes ``i // 2``). A year-old topology holds no
  more buckets than a day-old one.

A bucket holds, per component: tuples emitted, executed, acked and failed (summed over tasks),
busy and throttled seconds per task, and the complete-latency histogram's buckets. Merged
buckets add them up, so a merged bucket answers what one bucket of its length would have.
Answers per bucket: rates per second; ``capacity``, the busiest task's busy fraction (as Storm
shows it); ``backpressure``, the fraction of the time the most throttled task waited on it; and
``complete_p50_ms`` / ``complete_p99_ms``, percentiles of the merged histogram (spouts only).

Only complete buckets are answered: those ending before the newest report of every worker
still reporting (so the last point never dips because a report is yet to come). A bucket no
report covered is a gap (``None``); a component no report of which covered a bucket is ``None``
in it; an idle one is 0.

Memory per topology: at most ``hour / step + 1`` fine buckets and ``coarse_points`` coarse ones,
each as big as the components' tasks and non-empty latency buckets; and the counters of each
worker process heard within the last hour. Topologies are forgotten with ``retain``.

    history = MetricsHistory()
    history.add("wc-1-ab12", snapshot)               # each worker report, as it arrives
    history.series("wc-1-ab12", "fine")              # {"step", "times", "components": {...}}
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .histogram import upper_edge

# Resolutions a reader may ask for: the last hour in fine buckets, the whole life in coarse.
FINE, COARSE = "fine", "coarse"
RESOLUTIONS = (FINE, COARSE)
STEP_SECS = 10.0
HOUR_SECS = 3600.0
COARSE_STEP_SECS = 60.0
COARSE_POINTS = 360
# A process first heard of no older than this counts everything since it started as gained
# since then (a new or restarted worker's first report); an older one gives only a base.
FRESH_SECS = 60.0
# A worker is still reporting while its last report is at most this many of its own report
# intervals old (its buckets wait for it); one silent longer holds back no bucket.
LIVE_INTERVALS = 3
# Assumed until a worker's second report shows its interval.
FIRST_INTERVAL_SECS = 10.0

# What a series answers per component, in this order: tuples per second, then latencies (ms),
# then fractions of the time.
RATES = ("emitted", "executed", "acked", "failed")
METRICS = (*RATES, "complete_p50_ms", "complete_p99_ms", "capacity", "backpressure")
COMPONENT_KINDS = ("spout", "bolt")   # ackers are the runtime's, not the user's


class _Counters:
    """One task's counters since its process started, as one report gives them."""

    __slots__ = ("component", "kind", "counts", "busy", "throttled", "latency")

    def __init__(self, row: dict):
        w = row["windows"]["all"]
        self.component: str = row["component"]
        self.kind: str = row["kind"]
        self.counts: tuple[float, ...] = (float(sum(w["emitted"].values())), float(w["executed"]),
                       float(w["acked"]), float(w["failed"]))
        self.busy = float(w["busy_secs"])
        self.throttled = float(w["throttled_secs"])
        self.latency = {bucket: float(n) for bucket, n in w["histograms"]["complete"]["buckets"]}

    def gained_since(self, before: _Counters | None) -> _Counters | None:
        """What was gained since ``before`` (None: since zero); None if some counter went
        back, which a process's counters never do (then nothing is counted)."""
        if before is None:
            return self
        gain = object.__new__(_Counters)
        gain.component, gain.kind = self.component, self.kind
        gain.counts = tuple(a - b for a, b in zip(self.counts, before.counts))
        gain.busy = self.busy - before.busy
        gain.throttled = self.throttled - before.throttled
        gain.latency = {}
        for bucket, n in self.latency.items():
            d = n - before.latency.get(bucket, 0.0)
            if d < 0:
                return None
            if d:
                gain.latency[bucket] = d
        if min(gain.counts) < 0 or gain.busy < 0 or gain.throttled < 0:
            return None
        return gain


class _Gains:
    """One component's gains in one bucket."""

    __slots__ = ("kind", "counts", "busy", "throttled", "latency")

    def __init__(self, kind: str):
        self.kind = kind
        self.counts = [0.0] * len(RATES)
        self.busy: dict[int, float] = {}        # task -> busy seconds
        self.throttled: dict[int, float] = {}   # task -> seconds waited on backpressure
        self.latency: dict[int, float] = {}     # histogram bucket -> tuples (pro rata: float)

    def add(self, task: int, gain: _Counters, share: float) -> None:
        counts = self.counts
        for i, n in enumerate(gain.counts):
            counts[i] += n * share
        self.busy[task] = self.busy.get(task, 0.0) + gain.busy * share
        self.throttled[task] = self.throttled.get(task, 0.0) + gain.throttled * share
        if gain.latency:
            latency = self.latency
            for bucket, n in gain.latency.items():
                latency[bucket] = latency.get(bucket, 0.0) + n * share

    def merge(self, other: _Gains) -> None:
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        for mine, theirs in ((self.busy, other.busy), (self.throttled, other.throttled),
                             (self.latency, other.latency)):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0.0) + n

    def values(self, seconds: float) -> list[float | None]:
        """The answer for a bucket covering ``seconds``, in METRICS order."""
        rates = [round(n / seconds, 3) for n in self.counts]
        p50, p99 = _percentile(self.latency, 50), _percentile(self.latency, 99)
        capacity = max(self.busy.values(), default=0.0) / seconds
        backpressure = max(self.throttled.values(), default=0.0) / seconds
        return [*rates, p50, p99, round(min(capacity, 1.0), 4), round(min(backpressure, 1.0), 4)]


def _percentile(buckets: dict[int, float], p: float) -> float | None:
    """The ``p``-th percentile in ms of a histogram whose counts are shares (floats)."""
    total = sum(buckets.values())
    if total <= 1e-9:
        return None
    rank, seen = total * p / 100, 0.0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank * (1 - 1e-9):
            return round(upper_edge(bucket) * 1000, 3)
    return round(upper_edge(max(buckets)) * 1000, 3)


class _Bucket:
    """The gains filed in one bucket of a series, and the span of time they covered."""

    __slots__ = ("since", "until", "components")

    def __init__(self, since: float, until: float):
        self.since, self.until = since, until
        self.components: dict[str, _Gains] = {}

    def gains(self, component: str, kind: str) -> _Gains:
        found = self.components.get(component)
        if found is None:
            found = self.components[component] = _Gains(kind)
        return found

    def merge(self, other: _Bucket) -> None:
        self.since, self.until = min(self.since, other.since), max(self.until, other.until)
        for cid, gains in other.components.items():
            self.gains(cid, gains.kind).merge(gains)


class _Series:
    """Buckets of ``step`` seconds on the grid of multiples of ``step``; ``index -> bucket``."""

    def __init__(self, step: float):
        self.step = step
        self.buckets: dict[int, _Bucket] = {}
        self.lowest = math.inf   # no bucket has a lower index

    def file(self, t0: float, t1: float, gains: list[tuple[int, _Counters]],
             horizon: float = -math.inf) -> None:
        """Spread ``gains`` (task, gain) over [t0, t1] into the buckets it overlaps, leaving
        out the shares of the buckets that end before ``horizon``."""
        step = self.step
        if t1 <= t0:   # no time between the two: all of it in the bucket of t1
            self._file(math.floor(t1 / step), t1, t1, gains, 1.0)
            return
        first = math.floor(max(t0, horizon) / step) if horizon < t1 else math.floor(t1 / step)
        for index in range(first, math.floor(t1 / step) + 1):
            since, until = max(t0, index * step), min(t1, (index + 1) * step)
            if until > since:
                self._file(index, since, until, gains, (until - since) / (t1 - t0))

    def _file(self, index: int, since: float, until: float,
              gains: list[tuple[int, _Counters]], share: float) -> None:
        bucket = self.buckets.get(index)
        if bucket is None:
            bucket = self.buckets[index] = _Bucket(since, until)
            self.lowest = min(self.lowest, index)
        else:
            bucket.since, bucket.until = min(bucket.since, since), max(bucket.until, until)
        for task, gain in gains:
            bucket.gains(gain.component, gain.kind).add(task, gain, share)

    def drop_before(self, index: int) -> None:
        if self.lowest >= index:
            return
        for old in [i for i in self.buckets if i < index]:
            del self.buckets[old]
        self.lowest = min(self.buckets, default=math.inf)

    def coarsen(self, points: int) -> None:
        """Merge neighbours in pairs (doubling the step) until the series spans at most
        ``points`` buckets."""
        while self.buckets and max(self.buckets) - min(self.buckets) + 1 > points:
            merged: dict[int, _Bucket] = {}
            for index in sorted(self.buckets):
                bucket, held = self.buckets[index], merged.get(index // 2)
                if held is None:
                    merged[index // 2] = bucket
                else:
                    held.merge(bucket)
            self.buckets, self.step = merged, self.step * 2
            self.lowest = min(merged)

    def answer(self, first: int, last: int) -> dict:
        """Buckets ``first`` to ``last`` (indexes, both in), the missing ones as gaps."""
        present = [i for i in self.buckets if first <= i <= last]
        if present:
            first = max(first, min(present))
        indexes = range(first, last + 1) if present else range(0)
        components: dict[str, dict[str, Any]] = {}
        for i in indexes:   # every component any bucket has, in the order first seen
            bucket = self.buckets.get(i)
            for cid, gains in (bucket.components.items() if bucket else ()):
                if cid not in components:
                    components[cid] = {"kind": gains.kind, **{m: [] for m in METRICS}}
        for i in indexes:
            bucket = self.buckets.get(i)
            for cid, answer in components.items():
                gained = bucket.components.get(cid) if bucket else None
                seconds = bucket.until - bucket.since if bucket else 0.0
                values = (gained.values(seconds) if gained and seconds > 0
                          else [None] * len(METRICS))
                for metric, value in zip(METRICS, values):
                    answer[metric].append(value)
        return {"step": self.step, "times": [i * self.step for i in indexes],
                "components": components}


class _Worker:
    """One worker process of a topology: when it last reported and its tasks' counters."""

    __slots__ = ("last", "interval", "tasks")

    def __init__(self, now: float):
        self.last = now
        self.interval = FIRST_INTERVAL_SECS
        self.tasks: dict[int, _Counters] = {}


class _Topology:
    def __init__(self, step: float, coarse_step: float):
        self.fine = _Series(step)
        self.coarse = _Series(coarse_step)
        # (host, port, pid, started): a restarted worker is another process, from zero.
        self.workers: dict[tuple, _Worker] = {}


class MetricsHistory:
    """The time series of every topology fed to it. Thread-safe: reports and reads may come
    from any thread."""

    def __init__(self, clock: Callable[[], float] = time.time, step: float = STEP_SECS,
                 hour: float = HOUR_SECS, coarse_step: float = COARSE_STEP_SECS,
                 coarse_points: int = COARSE_POINTS):
        """``clock``: epoch seconds, the times the series answer (a wall clock: the charts
        show them; a step back merely files a gain in an earlier bucket)."""
        if not (step > 0 and hour >= step and coarse_step > 0 and coarse_points >= 2):
            raise ValueError("a metrics history needs step > 0, hour >= step, coarse_step > 0 "
                             "and coarse_points >= 2")
        self.clock = clock
        self.step, self.hour = float(step), float(hour)
        self.coarse_step, self.coarse_points = float(coarse_step), int(coarse_points)
        self._lock = threading.Lock()
        self._topologies: dict[str, _Topology] = {}

    def add(self, topology_id: str, snapshot: dict) -> None:
        """File what ``snapshot`` (one worker's, well formed: see ``shape.py``) says its tasks
        gained since that worker's previous one."""
        now = self.clock()
        worker = snapshot["worker"]
        key = (worker.get("host"), worker.get("port"), worker["pid"], worker["started"])
        rows = [row for row in snapshot["tasks"] if row.get("kind") in COMPONENT_KINDS]
        with self._lock:
            topology = self._topologies.get(topology_id)
            if topology is None:
                topology = self._topologies[topology_id] = _Topology(self.step,
                                                                     self.coarse_step)
            held = topology.workers.get(key)
            if held is None:
                held = topology.workers[key] = _Worker(now)
                first = True
            else:
                first = False
                if now > held.last:
                    held.interval = now - held.last
            # Gains over [since, now], grouped by their start: a fresh process's tasks count
            # from when each started.
            spans: dict[float, list[tuple[int, _Counters]]] = {}
            for row in rows:
                counters = _Counters(row)
                before = held.tasks.get(row["task"])
                held.tasks[row["task"]] = counters
                if before is not None:
                    since = held.last
                elif row["windows"]["all"]["seconds"] <= FRESH_SECS:
                    since = now - row["windows"]["all"]["seconds"]   # counted from zero
                else:
                    continue   # a base only: its past is not known to lie in any bucket
                gain = counters.gained_since(before)
                if gain is not None:
                    spans.setdefault(since, []).append((row["task"], gain))
            if not first:
                held.last = max(held.last, now)
            for since, gains in spans.items():
                topology.fine.file(since, now, gains, horizon=now - self.hour)
                topology.coarse.file(since, now, gains)
            topology.fine.drop_before(math.floor((now - self.hour) / self.step))
            topology.coarse.coarsen(self.coarse_points)
            for gone in [k for k, w in topology.workers.items() if now - w.last > self.hour]:
                del topology.workers[gone]

    def series(self, topology_id: str, resolution: str = FINE) -> dict:
        """The topology's complete buckets at ``resolution`` (``"fine"``: the last hour;
        ``"coarse"``: its whole life): ``{"resolution", "step", "times": [epoch seconds, each
        bucket's start], "components": {cid: {"kind", metric: [value or None per time]}}}``,
        the metrics being ``METRICS``. Empty (no times) for a topology not heard of."""
        if resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}, "
                             f"got {resolution!r}")
        now = self.clock()
        with self._lock:
            topology = self._topologies.get(topology_id)
            if topology is None:
                return {"resolution": resolution,
                        "step": self.step if resolution == FINE else self.coarse_step,
                        "times": [], "components": {}}
            complete = _complete_until(topology.workers.values(), now)
            first: float
            if resolution == FINE:
                series = topology.fine
                first = math.floor((complete - self.hour) / series.step)
            else:
                series, first = topology.coarse, -math.inf
            last = math.floor(complete / series.step) - 1   # the last bucket ending by then
            first = max(first, min(series.buckets, default=last + 1))
            return {"resolution": resolution, **series.answer(int(first), last)}

    def retain(self, topology_ids: Iterable[str]) -> None:
        """Forget every topology not in ``topology_ids`` (killed ones)."""
        keep = set(topology_ids)
        with self._lock:
            for tid in [t for t in self._topologies if t not in keep]:
                del self._topologies[tid]

    def topologies(self) -> list[str]:
        with self._lock:
            return list(self._topologies)


def _complete_until(workers: Iterable[_Worker], now: float) -> float:
    """The time up to which every worker still reporting has reported; without one, the
    newest report's."""
    workers = list(workers)
    live = [w.last for w in workers if now - w.last <= LIVE_INTERVALS * w.interval]
    if live:
        return min(live)
    return max((w.last for w in workers), default=now)
