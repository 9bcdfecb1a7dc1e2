"""A task's emitted tuples, gathered per destination and handed to Spark a chunk at a time.

A destination is a consumer's task (the consumer's ``slot``, the task index) or an output (``~k``,
index 0). Between two ``flush``es it keeps its tuples in emit order as *runs*: ``(head,
[values, ...])``, where ``head`` is ``(subscription, source task)``, what a receiver needs besides
the values to make the tuple (``None`` for an output). A destination fed by one subscription, by
far the usual case, has one run, so an emit costs it one list append; one fed by several keeps
their interleaving, a new run where the head changes.

``flush`` makes one record per destination that has tuples: ``(slot, (index, runs))``. Where the
records leave the Python worker (a shuffle, a merge, a cached stage), ``runs`` is encoded
(``encode_runs``) into one bytes object: Spark pickles records with cloudpickle, which calls back
into Python for every list and tuple, so a chunk of small tuples would cost more to move than to
run. The receiver takes either form through ``decoded``.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Callable

Runs = list  # [(head, [values, ...]), ...]


def encode_runs(runs: Runs) -> bytes:
    """``runs`` as bytes, in one call of the C pickler. Fast mode (no memo) is safe and half the
    cost: values were checked to be msgpack-encodable, so nothing in them refers to itself."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    pickler.dump(runs)
    return buffer.getvalue()


def decoded(runs: Runs | bytes) -> Runs:
    """A record's runs, as ``flush`` gathered them, whether or not they were encoded."""
    return pickle.loads(runs) if isinstance(runs, bytes) else runs


class _Destination:
    """One destination's runs since the last flush."""

    __slots__ = ("encoded", "head", "index", "one_run", "runs", "slot", "values")

    def __init__(self, slot: int, index: int, one_run: bool, encoded: bool):
        self.slot = slot
        self.index = index
        self.one_run = one_run
        self.encoded = encoded
        self.runs: Runs = []
        self.values: list = []
        self.head: Any = _NO_HEAD

    def appender(self, head: Any) -> Callable[[Any], None]:
        """The append of subscription ``head``'s tuples to this destination."""
        if self.one_run:
            self.head = head
            return self.values.append

        def append(values: Any) -> None:
            if self.head is not head:
                self.head = head
                self.values = []
                self.runs.append((head, self.values))
            self.values.append(values)
        return append

    def take(self) -> Runs | bytes | None:
        """The runs gathered since the last call (``None`` if none), and start afresh."""
        if self.one_run:
            values = self.values
            if not values:
                return None
            # The append is bound to this list: hand over a copy (or its encoding), empty it.
            runs = [(self.head, values if self.encoded else values.copy())]
            taken = encode_runs(runs) if self.encoded else runs
            values.clear()
            return taken
        runs = self.runs
        if not runs:
            return None
        self.runs, self.values, self.head = [], [], _NO_HEAD
        return encode_runs(runs) if self.encoded else runs


_NO_HEAD = object()   # before a shared destination's first run: any head starts one


class Chunks:
    """Every destination of one task. ``appender`` gives the function a subscription's tuples
    are appended with; ``flush`` hands over what was gathered, as Spark records."""

    def __init__(self) -> None:
        self._destinations: dict[tuple[int, int], _Destination] = {}

    def appender(self, slot: int, index: int, head: Any, *, shared: bool,
                 encoded: bool) -> Callable[[Any], None]:
        """Where the tuples of subscription ``head`` to destination ``(slot, index)`` go.
        ``shared``: other subscriptions feed the same destination (say so for every one of
        them); ``encoded``: its records leave the Python worker."""
        destination = self._destinations.get((slot, index))
        if destination is None:
            destination = self._destinations[(slot, index)] = _Destination(
                slot, index, not shared, encoded)
        return destination.appender(head)

    def flush(self) -> list:
        """The records gathered since the last flush: ``(slot, (index, runs))`` per destination
        that has tuples."""
        records = []
        for destination in self._destinations.values():
            runs = destination.take()
            if runs is not None:
                records.append((destination.slot, (destination.index, runs)))
        return records
