"""What a window is made of: its length and sliding interval (``Count``, ``Duration``),
one firing (``Window``), and the constants the windowed bolts share."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import TopologyError

# Ticks per sliding interval: a time window fires at most a quarter of its interval late.
TICKS_PER_SLIDE = 4
MIN_TICK_SECS = 0.01
DEFAULT_WATERMARK_INTERVAL_MS = 1000
# The one field of a late-tuple stream: the late tuple's values.
LATE_TUPLE_FIELD = "tuple"
LATE_DROPPED_METRIC = "late_tuples_dropped"


@dataclass(frozen=True)
class Count:
    """A number of tuples."""

    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise TopologyError(f"Count must be a whole number >= 1, got {self.n!r}")


@dataclass(frozen=True, init=False)
class Duration:
    """A span of time: ``Duration(seconds=10)``, ``Duration(ms=500)`` or both, added."""

    ms: int

    def __init__(self, seconds: float = 0, ms: int = 0):
        try:
            total = round(float(seconds) * 1000) + int(ms)
        except (TypeError, ValueError):
            raise TopologyError(f"Duration takes numbers, got seconds={seconds!r}, "
                                f"ms={ms!r}") from None
        if total < 0:   # Storm's Duration: any non-negative value (a lag of 0, say)
            raise TopologyError(f"a Duration cannot be negative, got {total} ms")
        object.__setattr__(self, "ms", total)


Length = Count | Duration


class Window:
    """One firing of a window: its tuples, those new since the previous firing, those that left
    it since then, and its bounds in milliseconds since the epoch (``start`` is the oldest
    tuple's arrival for a count-length window)."""

    __slots__ = ("_tuples", "_new", "_expired", "start", "end")

    def __init__(self, tuples: list, new: list, expired: list, start: int, end: int):
        self._tuples = tuples
        self._new = new
        self._expired = expired
        self.start = start
        self.end = end

    def get(self) -> list:
        return self._tuples

    def get_iter(self) -> Iterator:
        """The window's tuples one at a time (a persistent window reads them from its store as
        it goes, where ``get`` reads them all)."""
        return iter(self._tuples)

    def get_new(self) -> list:
        return self._new

    def get_expired(self) -> list:
        return self._expired

    def __repr__(self) -> str:
        return (f"Window({len(self._tuples)} tuples, {len(self._new)} new, "
                f"{len(self._expired)} expired, {self.start}..{self.end})")


class Firing(NamedTuple):
    """One firing: the window (None when nothing was in it) and the items that left since the
    previous firing (the caller acks those)."""

    window: Window | None
    expired: list
