"""The bookkeeping of windows alone, on explicit timestamps (for tests and reuse):
``WindowManager`` by arrival, ``EventTimeWindowManager`` by the tuples' own times."""

from __future__ import annotations

import bisect
import collections
from typing import Any, NamedTuple

from .windows import Count, Duration, Firing, Length, Window


class Event(NamedTuple):
    """An item a window manager holds: its time (ms: of arrival, or its own in event time),
    its arrival serial, which tells new items from old ones and orders items of one time, and
    the item. Events sort by time, then serial."""

    time: int
    serial: int
    item: Any


def _keep(fired: list[Firing], firing: Firing) -> None:
    """Add ``firing`` to ``fired`` unless nothing happened in it."""
    if firing.window is not None or firing.expired:
        fired.append(firing)


class _HeldItems:
    """What both window managers hold: their events, oldest first."""

    _events: Any

    def items(self) -> list:
        return [item for _ts, _serial, item in self._events]

    def discard(self, item: Any) -> bool:
        """Take ``item`` out of the window (it was failed); True if it was there."""
        for index, (_ts, serial, held) in enumerate(self._events):
            if held is item:
                del self._events[index]
                self._forget(serial)
                return True
        return False

    def _forget(self, serial: int) -> None:
        """What else the manager keeps of a discarded item's serial."""


class WindowManager(_HeldItems):
    """Which items each window holds, when it fires, and which items leave it, given each
    item's arrival time (ms). ``add`` and ``advance`` return the firings, in order."""

    def __init__(self, length: Length, sliding: Length, start_ms: int):
        self.length = length
        self.sliding = sliding
        self._events: collections.deque[Event] = collections.deque()
        self._serial = 0          # arrival order, to tell new items from old ones
        self._fired_serial = 0    # the first serial not yet in a fired window
        self._added_since_fire = 0
        self._next_fire = (start_ms + sliding.ms) if isinstance(sliding, Duration) else None
        self._expired: list = []  # left by eviction or discard since the previous firing

    def add(self, item: Any, now_ms: int) -> list[Firing]:
        """Fire any time window due by ``now_ms``, then take ``item``; a count-sliding window
        that is due with it fires too."""
        fired = self.advance(now_ms)
        self._events.append(Event(now_ms, self._serial, item))
        self._serial += 1
        self._added_since_fire += 1
        if isinstance(self.sliding, Count) and self._added_since_fire >= self.sliding.n:
            _keep(fired, self._fire(now_ms))
        return fired

    def advance(self, now_ms: int) -> list[Firing]:
        """Fire every time window due by ``now_ms``."""
        fired: list[Firing] = []
        while self._next_fire is not None and now_ms >= self._next_fire:
            _keep(fired, self._fire(self._next_fire))
            assert isinstance(self.sliding, Duration)   # _next_fire is set only then
            self._next_fire += self.sliding.ms
        return fired

    def _fire(self, at_ms: int) -> Firing:
        self._evict(at_ms)
        self._added_since_fire = 0
        expired, self._expired = self._expired, []
        window = None
        if self._events:
            start = (at_ms - self.length.ms if isinstance(self.length, Duration)
                     else self._events[0].time)
            window = self._window(start, at_ms, expired)
        self._fired_serial = self._serial
        return Firing(window, expired)

    def _window(self, start: int, end: int, expired: list) -> Window | None:
        """The window firing from ``start`` to ``end`` (ms), with the items held now: those
        since the previous firing are new. A manager whose windows run as they fire (the
        persistent one) runs it here and returns None."""
        events = self._events
        return Window([item for _ts, _serial, item in events],
                      [item for _ts, serial, item in events if serial >= self._fired_serial],
                      list(expired), start, end)

    def _evict(self, at_ms: int) -> None:
        events = self._events
        if isinstance(self.length, Count):
            while len(events) > self.length.n:
                self._left(events.popleft().item)
        else:
            while events and events[0].time < at_ms - self.length.ms:
                self._left(events.popleft().item)

    def _left(self, item: Any) -> None:
        """``item`` left the window: the next firing shows it expired (and the caller acks it)."""
        self._expired.append(item)


class EventTimeWindowManager(_HeldItems):
    """Windows by the items' own timestamps (ms), fired as the watermark passes their ends. The
    watermark is the smallest, over ``sources``, of the largest timestamp each has sent, less
    ``lag_ms``; it moves only when ``advance`` is called (every watermark interval)."""

    def __init__(self, length: Duration, sliding: Duration, lag_ms: int, sources: set):
        self.length = length.ms
        self.sliding = sliding.ms
        self.lag = lag_ms
        self.sources = set(sources)
        self.watermark: int | None = None
        self._latest: dict[Any, int] = {}    # source -> the largest timestamp it has sent
        self._events: list[Event] = []   # sorted: by timestamp, then arrival
        self._serial = 0
        self._shown: set[int] = set()       # serials already in a fired window
        self._next_end: int | None = None

    def is_late(self, timestamp: int) -> bool:
        return self.watermark is not None and timestamp < self.watermark

    def add(self, item: Any, timestamp: int, source: Any) -> None:
        """Take an item that is not late (see ``is_late``)."""
        bisect.insort(self._events, Event(timestamp, self._serial, item))
        self._serial += 1
        if timestamp > self._latest.get(source, timestamp - 1):
            self._latest[source] = timestamp

    def advance(self) -> list[Firing]:
        """Move the watermark if it can, and fire every window it has passed."""
        if not self.sources or not self.sources <= set(self._latest):
            return []   # an input task has sent nothing yet
        candidate = min(self._latest[s] for s in self.sources) - self.lag
        if self.watermark is not None and candidate <= self.watermark:
            return []
        self.watermark = candidate
        fired: list[Firing] = []
        while self._events:
            if self._next_end is None or self._events[0].time >= self._next_end:
                # Past an empty stretch: the first window end after the earliest item.
                earliest = self._events[0].time
                self._next_end = max(self._next_end or 0,
                                     (earliest // self.sliding + 1) * self.sliding)
            if self._next_end > candidate:
                break
            _keep(fired, self._fire(self._next_end))
            self._next_end += self.sliding
        return fired

    def _forget(self, serial: int) -> None:
        self._shown.discard(serial)

    def _fire(self, end: int) -> Firing:
        start = end - self.length
        leaving = bisect.bisect_left(self._events, (start, -1))
        gone = self._events[:leaving]
        del self._events[:leaving]
        expired = [item for _ts, _serial, item in gone]
        self._shown.difference_update(serial for _ts, serial, _item in gone)
        inside = self._events[:bisect.bisect_left(self._events, (end, -1))]
        if not inside:
            return Firing(None, expired)
        new = [item for _ts, serial, item in inside if serial not in self._shown]
        self._shown.update(serial for _ts, serial, _item in inside)
        return Firing(Window([item for _ts, _serial, item in inside], new, list(expired), start,
                             end), expired)
