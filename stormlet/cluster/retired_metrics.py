"""What replaced workers counted, kept by the nimbus leader so that a topology's numbers survive
a reassignment.

A worker's counters start at zero with its process. When a worker is replaced (its slot leaves
the assignment and another worker takes its tasks, or its supervisor restarts it on the same
slot), the new worker's snapshot knows nothing of what the old one counted: its failed trees,
their fail reasons, its share of every window. So the leader keeps two things:

- ``TaskHistory``: for each task of each worker that reports, its cumulative counters sampled on
  nimbus's own clock as reports arrive, in the rings of a ``RollingWindows`` (a sample kept every
  1/20 of each window). The first report seeds each ring with the counters at the start of that
  window, which the report's own windows give (all time minus the window), so a worker first
  heard of late (by a new leader) is known back as far as its windows reach.
- ``RetiredTask``: per topology task, whatever ran it, what its replaced workers counted: the
  all-time sum, and per window what was gained in each 1/20 of that window (slots on a fixed grid
  of nimbus's clock). A worker is folded in once, when it is replaced; then its history goes.

How retired counts age: the counters gained between two samples t0 < t1 of a worker are filed in
the slot holding t0, which is as old as the oldest t0 filed in it; a slot counts in a window
while that time is inside the window, then is dropped. For one worker this is exactly how its
own window treats its samples (its base is its oldest sample inside the window); where several
workers' gains share a slot, some leave a window up to one slot (1/20 of it) early. So retired
counts leave a window as live ones do, and a window across a replacement covers between 19/20
of its length and all of it (as long as some worker of the task ran that long), not just the new
worker's uptime.

Memory: per topology task, one all-time sum and at most SLOTS + 1 slots per window, however many
workers have run it and for however long; per reporting worker task, the rings of one
``RollingWindows`` (at most SLOTS + 1 samples per window). Each sum or sample is as big as the
task's counters: streams, fail reasons (kind, component) and non-empty latency buckets.

    history = TaskHistory(now, row)                # a worker's first report of the task
    history.update(now, row)                       # each report after it
    retired = RetiredTask(row["component"], row["kind"])
    retired.merge(history)                         # the worker was replaced
    windows = retired.windows(now)                 # {"600": (seconds, counts), ..., "all": ...}
    row["windows"] = with_past(row["windows"], windows)   # a live row, counting its forerunners
"""

from __future__ import annotations

import math

from ..metrics.windows import ALL_TIME, SLOTS, WINDOWS, RollingWindows, add, subtract
from ..runtime.metrics import LATENCIES, window_stats

# Window key -> (seconds covered, counts gained): what ``RetiredTask.windows`` answers.
PastWindows = dict[str, tuple[float, dict]]


def window_counts(w: dict) -> dict:
    """One window of a snapshot's task row (``runtime.metrics.window_stats``'s output) back in
    the form of the counters it was made from (``TaskMetrics.sample``), so that windows can be
    added and subtracted (``metrics.windows.add``, ``subtract``) and made again with
    ``window_stats``."""
    counts = {
        "emitted": dict(w["emitted"]), "transferred": w["transferred"],
        "executed": w["executed"], "acked": w["acked"], "failed": w["failed"],
        "fail_reasons": {(kind, component): n for kind, component, n in w["fail_reasons"]},
        "busy_secs": w["busy_secs"], "throttled_secs": w["throttled_secs"],
    }
    for name in LATENCIES:
        h = w["histograms"][name]
        counts[name] = {"count": h["count"], "sum": h["sum"],
                        "buckets": {bucket: n for bucket, n in h["buckets"]}}
    return counts


def _nothing() -> dict:
    """Counters at zero, in the form ``window_stats`` takes."""
    return {"emitted": {}, "transferred": 0, "executed": 0, "acked": 0, "failed": 0,
            "fail_reasons": {}, "busy_secs": 0.0, "throttled_secs": 0.0,
            **{name: {"count": 0, "sum": 0.0, "buckets": {}} for name in LATENCIES}}


class TaskHistory:
    """One task's cumulative counters in one worker process, sampled on nimbus's monotonic clock
    as the worker's reports arrive. Not thread-safe: the store's lock guards it."""

    def __init__(self, now: float, row: dict, windows: dict[str, float] | None = None):
        found = row["windows"]
        current = window_counts(found[ALL_TIME])
        lengths = dict(WINDOWS if windows is None else windows)
        # Each ring starts where the worker's own window starts: the counters then are the
        # counters now minus what the window gained.
        bases = {key: (now - found[key]["seconds"], subtract(current, window_counts(found[key])))
                 for key in lengths}
        self.start = now - found[ALL_TIME]["seconds"]   # the worker's start, on nimbus's clock
        self.rings = RollingWindows(self.start, {}, lengths, bases=bases)
        self.time = now
        self.row = row
        self.rings.add(now, current)

    def update(self, now: float, row: dict) -> None:
        """The task's row of a newer report of the same worker process."""
        self.time, self.row = now, row
        if self.rings.due(now):   # converting the row costs: only when a ring keeps it
            self.rings.add(now, self.current())

    def current(self) -> dict:
        """The task's counters since the worker started, as of its newest report."""
        return window_counts(self.row["windows"][ALL_TIME])


class RetiredTask:
    """What the replaced workers of one topology task counted, aged as the module docstring
    says. Not thread-safe: the store's lock guards it."""

    def __init__(self, component: str, kind: str, windows: dict[str, float] | None = None,
                 slots: int = SLOTS):
        self.component = component
        self.kind = kind
        self.executor: list[int] | None = None
        self.lengths = dict(WINDOWS if windows is None else windows)
        self.spacing = {key: length / slots for key, length in self.lengths.items()}
        self.since: float | None = None   # the earliest start of a worker folded in
        self.total: dict = {}
        # window -> slot index (index * spacing is where it starts on the grid) -> (the oldest
        # sample time filed in it, the counts gained in it)
        self.slots: dict[str, dict[int, tuple[float, dict]]] = {key: {} for key in self.lengths}

    def merge(self, history: TaskHistory) -> None:
        """Fold in a replaced worker's history of this task (then the history may go)."""
        row = history.row
        self.component, self.kind, self.executor = row["component"], row["kind"], row.get(
            "executor")
        current = history.current()
        self.total = add(self.total, current)
        self.since = history.start if self.since is None else min(self.since, history.start)
        for key, ring in history.rings.rings.items():
            samples = [*ring, (history.time, current)]
            slots, spacing = self.slots[key], self.spacing[key]
            for (t0, s0), (t1, s1) in zip(samples, samples[1:]):
                if t1 > t0:   # the newest report may already be the ring's last sample
                    index = math.floor(t0 / spacing)
                    since, gained = slots.get(index, (t0, {}))
                    slots[index] = (min(since, t0), add(gained, subtract(s1, s0)))
        self._prune(history.time)

    def _prune(self, now: float) -> None:
        for key, slots in self.slots.items():
            oldest = now - self.lengths[key]
            for index in [i for i, (since, _gained) in slots.items() if since < oldest]:
                del slots[index]

    def windows(self, now: float) -> PastWindows:
        """Per window (and ``"all"``): (seconds covered, counts gained over them)."""
        self._prune(now)
        since = now if self.since is None else self.since
        found: PastWindows = {}
        for key, length in self.lengths.items():
            gained: dict = {}
            for _since, counts in self.slots[key].values():
                gained = add(gained, counts)
            found[key] = (min(length, now - since), gained)
        found[ALL_TIME] = (now - since, self.total)
        return found


def combine(a: PastWindows, b: PastWindows) -> PastWindows:
    """Two sets of past windows of one task as one: counts added, the longer coverage."""
    return {key: (max(a[key][0], b[key][0]), add(a[key][1], b[key][1])) for key in a}


def with_past(windows: dict, past: PastWindows) -> dict:
    """A live task row's windows with the past counts of the same task added: each window's
    counts summed, its seconds the longer of the two, its latencies merged."""
    out = {}
    for key, w in windows.items():
        if key not in past:
            out[key] = w
            continue
        seconds, counts = past[key]
        out[key] = window_stats(max(w["seconds"], seconds), add(window_counts(w), counts))
    return out


def past_only(past: PastWindows) -> dict:
    """The windows of a task that no reporting worker runs now: its past counts alone."""
    return {key: window_stats(seconds, add(_nothing(), counts))
            for key, (seconds, counts) in past.items()}
