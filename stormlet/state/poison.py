"""What a stateful bolt's runner does about a poison key: a stored value that does not decode
(``UndecodableValue``).

Every tuple that reads the key fails, with the error as its reason (naming the namespace and
the key), until an operator repairs it; nothing the tuple changed stays (the runner undoes to
its savepoint). Two things keep one bad key from flooding the topology:

- the error is reported (one log line, ``stormlet errors``, the UI) once per key per
  ``REPORT_INTERVAL_SECS``, with the count of tuples failed on it since, not once per tuple;
- a tuple of a tree that has already failed here on a poison key fails at once, unapplied:
  the spout replays the whole tree, so applying the rest of it now would count it twice.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from ..tuples import Tuple
from .store import UndecodableValue

#: A poison key is logged and reported at most once in this many seconds.
REPORT_INTERVAL_SECS = 60.0
#: Roots of trees failed on a poison key, remembered per task (the oldest forgotten first): a
#: tree that failed is replayed under a new root, so an old one is only ever met again by
#: tuples of the same, failed, attempt.
MAX_FAILED_ROOTS = 10_000


class _Reported:
    """When a poison key was last reported, and the tuples failed on it since; counted up in
    place."""

    __slots__ = ("at", "failed_since")

    def __init__(self, at: float) -> None:
        self.at = at
        self.failed_since = 0


class PoisonKeys:
    """One stateful bolt task's poison keys: when each was last reported, and the trees that
    failed on one."""

    def __init__(self) -> None:
        self._reported: dict[tuple[str, bytes], _Reported] = {}   # by (namespace, raw key)
        self.failed_roots: OrderedDict[int, None] = OrderedDict()

    def failed(self, tup: Tuple, error: UndecodableValue, collector: Any) -> None:
        """Fail ``tup`` with ``error``, remember its tree, and report the key if it is due."""
        collector.fail(tup, str(error))
        roots = tup.roots
        if roots:
            for root in roots[::2]:
                self.failed_roots[root] = None
            while len(self.failed_roots) > MAX_FAILED_ROOTS:
                self.failed_roots.popitem(last=False)
        now = time.monotonic()
        key = (error.namespace, bytes(error.raw_key))
        seen = self._reported.get(key)
        if seen is not None and now - seen.at < REPORT_INTERVAL_SECS:
            seen.failed_since += 1
            return
        since = (f"; {seen.failed_since} more tuples failed on it since it was last reported"
                 if seen else "")
        self._reported[key] = _Reported(now)
        # One line: report_error logs it (naming the task) and shows it in `stormlet errors`.
        collector.report_error(f"{error}{since} (reported again in {REPORT_INTERVAL_SECS:.0f} s "
                               f"if it persists)")

    def tree_failed(self, tup: Tuple) -> bool:
        """Whether every tree of ``tup`` has already failed here on a poison key."""
        roots = tup.roots
        return (roots is not None and len(roots) > 0
                and all(root in self.failed_roots for root in roots[::2]))
