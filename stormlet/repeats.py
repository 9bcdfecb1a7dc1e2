"""One log line for a condition that lasts, not one for every pass of the loop that finds it.

Nimbus's monitor and the supervisor's loop run every second or so; what they find wrong (a
topology with nowhere to run, ZooKeeper out of reach) usually lasts much longer. ``Repeats``
logs a condition when it is first found or its text changes, then at most once every
``interval_secs`` with how many times it was found meanwhile; ``clear`` forgets it once it is
over, so that its return is logged at once::

    repeats = Repeats(log)
    for tid in topologies:                      # every second
        try:
            place(tid)
        except SchedulingError as exc:
            repeats.warning(("unplaced", tid), "topology %s has nowhere to run: %s", tid, exc)
        else:
            repeats.clear(("unplaced", tid))

Each key is one condition of one thing (its text a function of the key: a key whose text
changes on every call is logged on every call). Thread-safe: the Kafka sinks' tasks, on the
threads of one process, share one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

#: How often a condition that lasts is logged again.
INTERVAL_SECS = 60.0


@dataclass
class _Seen:
    text: str
    logged_at: float
    since: int = 0      # times found since it was last logged


class Repeats:
    """Rate-limits the lines of lasting conditions (see the module's docstring)."""

    def __init__(self, logger: logging.Logger, interval_secs: float = INTERVAL_SECS,
                 clock: Callable[[], float] = time.monotonic):
        self._log = logger
        self.interval_secs = interval_secs
        self._clock = clock
        self._seen: dict[Hashable, _Seen] = {}
        self._lock = threading.Lock()

    def warning(self, key: Hashable, message: str, *args: Any) -> None:
        """The condition ``key`` holds, as ``message % args`` says: logged if due."""
        text = message % args if args else message
        with self._lock:
            now = self._clock()
            seen = self._seen.get(key)
            if (seen is not None and seen.text == text
                    and now - seen.logged_at < self.interval_secs):
                seen.since += 1
                return
            line = text
            if seen is not None and seen.text == text and seen.since:
                secs = now - seen.logged_at
                line = f"{text} (still so: found {seen.since} more times in {secs:.0f} s)"
            self._seen[key] = _Seen(text, now)
        # The record names the caller's line, not this one.
        self._log.warning("%s", line, stacklevel=2)

    def clear(self, key: Hashable) -> bool:
        """The condition ``key`` is over; whether it held."""
        with self._lock:
            return self._seen.pop(key, None) is not None

    def retain(self, keep: Callable[[Hashable], bool]) -> None:
        """Forget the conditions whose key ``keep`` refuses (of a topology that is gone, say)."""
        with self._lock:
            for key in [key for key in self._seen if not keep(key)]:
                del self._seen[key]
