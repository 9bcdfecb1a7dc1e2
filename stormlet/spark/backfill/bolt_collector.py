"""The collector a bolt gets in a backfill: ``BackfillCollector``, backfill's ``OutputCollector``
(``stormlet.collectors``); a ``BasicBolt`` gets the public ``BasicOutputCollector`` over it, as
in streaming.

Emits go to the task's ``Emitter``, which addresses them; nothing is tracked (anchors mean nothing
in a batch), so ``ack`` only counts, ``fail`` counts what streaming would have replayed, and
``reset_timeout`` does nothing.
"""

from __future__ import annotations

from ...tuples import Tuple
from .counts import TaskCounts
from .emitter import Emitter


class BackfillCollector:
    """A bolt's collector in a backfill. Emits are captured and addressed; nothing is tracked,
    so ``ack`` only counts and ``fail`` counts what streaming would have replayed."""

    def __init__(self, emitter: Emitter, counts: TaskCounts):
        self._emitter = emitter
        self._counts = counts
        self.emit = emitter.emit                # emit(values, anchors=(), stream="default")
        self.emit_direct = emitter.emit_direct  # emit_direct(task, values, anchors=(), stream=...)

    def ack(self, tup: Tuple) -> None:
        self._counts.acked += 1

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        self._counts.failed += 1

    def reset_timeout(self, tup: Tuple) -> None:
        pass

    def report_error(self, error: BaseException | str) -> None:
        self._counts.reported += 1
        self._counts.sample(f"{self._emitter.component_id}:{self._emitter.task} reported: "
                            f"{error}")
