"""Simulated time: a clock that moves only when a test moves it (Storm's ``Time`` in
simulation, ``Testing.withSimulatedTime``).

    with simulated_time() as clock:     # clock.time() is 0.0 until advanced
        clock.advance(2.5)

Within ``simulated_time()``, ``current_clock()`` is that clock; the kit's harnesses and
``SimulatedCluster`` read it. Stormlet reads the clock in two places a test cares about: a
processing-time window (``WindowedBoltRunner.clock``) and the tick tuples a bolt asks for
(``topology.tick.tuple.freq.secs``, sent by the runtime's tick thread). The kit sets the first to
this clock and sends the second itself as this clock passes each tick's time, so both follow it
exactly. Message timeouts and spout waits stay on real time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_current: SimulatedClock | None = None
_current_lock = threading.Lock()


class SimulatedClock:
    """Seconds since the simulation started (0.0 at first), moved only by ``advance``.

    Shared, never copied: a component that holds ``clock.time`` keeps reading this clock after
    the runtime deep-copies it for each task."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)
        self._lock = threading.Lock()

    def time(self) -> float:
        """The simulated time in seconds (what ``time.time`` is in real time)."""
        return self._now

    def advance(self, secs: float) -> float:
        """Move the clock ``secs`` (>= 0) on; returns the new time."""
        if secs < 0:
            raise ValueError(f"simulated time only moves forward, got {secs!r} s")
        with self._lock:
            self._now += secs
            return self._now

    def advance_to(self, when: float) -> None:
        """Move the clock to ``when``, if that is later than now."""
        with self._lock:
            self._now = max(self._now, float(when))

    def __deepcopy__(self, memo: dict[int, Any]) -> SimulatedClock:
        return self

    def __repr__(self) -> str:
        return f"SimulatedClock({self._now:g} s)"


@contextlib.contextmanager
def simulated_time(start: float = 0.0) -> Iterator[SimulatedClock]:
    """Storm's ``Testing.withSimulatedTime``: within the block, ``current_clock()`` is a new
    simulated clock, which the kit's cluster and harnesses use. Blocks do not nest."""
    global _current
    with _current_lock:
        if _current is not None:
            raise RuntimeError("simulated_time() is already active: blocks do not nest")
        _current = clock = SimulatedClock(start)
    try:
        yield clock
    finally:
        with _current_lock:
            _current = None


def current_clock() -> SimulatedClock | None:
    """The clock of the enclosing ``simulated_time()`` block, or None outside one."""
    return _current
