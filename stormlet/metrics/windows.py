"""Rolling windows over cumulative counters: the last 10 minutes, 3 hours, 1 day and all time,
as Storm's UI shows them.

Counters only ever grow, so a window's value is the counters now minus the counters at the
window's start. A ``RollingWindows`` keeps, per window, a ring of past samples taken at most
every 1/20 of the window (Storm also splits each window into 20 buckets): 30 s apart for 10
minutes, 9 min for 3 hours, 72 min for a day. A window's baseline is its oldest sample no older
than the window, so a window covers between 19/20 of its length and all of it once the runtime
has run that long, and less early on; ``seconds`` always says what it covers.

A sample is a nested dict whose leaves are numbers (histogram buckets included, keyed by bucket),
so one ``subtract`` serves counters and histograms alike.

    windows = RollingWindows(start=now, zero=metrics.sample())
    windows.add(now, metrics.sample())                # every few seconds; keeps only what is due
    for key, (seconds, delta) in windows.deltas(now, metrics.sample()).items(): ...
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

# Window name (as Storm's UI spells it in ?window=) -> length in seconds.
WINDOWS: dict[str, float] = {"600": 600.0, "10800": 10800.0, "86400": 86400.0}
ALL_TIME = "all"
SLOTS = 20


def subtract(now: dict, before: dict) -> dict:
    """``now - before`` leaf by leaf; a leaf missing from ``before`` counts as zero."""
    out = {}
    for key, value in now.items():
        old = before.get(key)
        if type(value) is dict:
            out[key] = subtract(value, old or {})
        else:
            out[key] = value - old if old is not None else value
    return out


def add(a: dict, b: dict) -> dict:
    """``a + b`` leaf by leaf, as a new dict; a leaf missing from either counts as zero."""
    out = dict(a)
    for key, value in b.items():
        old = out.get(key)
        if type(value) is dict:
            out[key] = add(old or {}, value)
        else:
            out[key] = value + old if old is not None else value
    return out


class Sample(NamedTuple):
    """A task's counters, and when they were sampled."""

    time: float
    counters: dict


class RollingWindows:
    """Samples of one task's counters. Not thread-safe: its owner takes a lock."""

    def __init__(self, start: float, zero: dict, windows: dict[str, float] | None = None,
                 slots: int = SLOTS, bases: dict[str, tuple[float, dict]] | None = None):
        """``bases`` starts a window's ring with a (time, sample) instead of (start, zero): for
        counters picked up midway, whose value at the window's start is known (nimbus does
        this with a worker's first report, see ``cluster.retired_metrics``)."""
        self.start = start
        self.zero = zero
        self.windows = dict(WINDOWS if windows is None else windows)
        self.spacing = {key: length / slots for key, length in self.windows.items()}
        # Each ring holds samples, oldest first; the start counts as the first sample.
        bases = bases or {}
        self.rings: dict[str, deque[Sample]] = {
            key: deque([Sample(*bases.get(key, (start, zero)))]) for key in self.windows}

    def due(self, now: float) -> bool:
        """Whether ``add(now, ...)`` would keep the sample in some ring: a caller whose samples
        cost something to make asks first."""
        return any(now - ring[-1].time >= self.spacing[key] for key, ring in self.rings.items())

    def add(self, now: float, sample: dict) -> None:
        """Keep ``sample`` in each ring whose newest sample is at least a slot old, and drop
        samples older than their window."""
        for key, ring in self.rings.items():
            if now - ring[-1].time >= self.spacing[key]:
                ring.append(Sample(now, sample))
            oldest = now - self.windows[key]
            while len(ring) > 1 and ring[0].time < oldest:
                ring.popleft()

    def deltas(self, now: float, current: dict) -> dict[str, tuple[float, dict]]:
        """Per window (and ``"all"``): (seconds covered, counters gained over them)."""
        found: dict[str, tuple[float, Any]] = {}
        for key, ring in self.rings.items():
            oldest = now - self.windows[key]
            since, base = next(((t, s) for t, s in ring if t >= oldest), (now, current))
            found[key] = (now - since, subtract(current, base))
        found[ALL_TIME] = (now - self.start, subtract(current, self.zero))
        return found
