"""``CheckpointedSink``: what the sinks that take part in effectively-once share (Flink's
``TwoPhaseCommitSinkFunction``, on stormlet's checkpoint actions).

A checkpointed sink is a stateful bolt. Its writes of checkpoint ``t`` are gathered while ``t``
is open; at ``PREPARE t`` they are *staged*: kept in the sink's own checkpointed state, under
``PENDING_KEY``, as ``(t, writes)``, so the checkpoint itself holds them; at ``COMMIT t`` they
are *published*, made visible outside in one atomic step that also records ``t`` beside them
(the sink's *mark*, one per task); at ``ROLLBACK`` (and at a new epoch) they are dropped.

Why the writes are staged in the state: the checkpoint spout decides a checkpoint when it saves
it COMMITTING, before any bolt commits. A sink task that dies after that, before it published,
would lose the checkpoint's writes while the spouts' positions moved past them. So when the
sink starts (``init_state``, handed the last committed checkpoint ``T``) it publishes the
writes staged with ``T`` again, and a COMMIT that fails is retried by the checkpoint spout's
recovery. Publishing is idempotent: the mark says whether ``t`` (or a later one) is out already,
and a publish of ``t`` where the mark is ``t`` or later does nothing. That also fences a zombie:
a task cut off from the topology that publishes late cannot overwrite what a later checkpoint
published.

Inputs that arrive between ``PREPARE t`` and ``COMMIT t`` belong to ``t + 1``: they are gathered
for it and not written until ``t`` is published.

Subclasses say how a write is made of a tuple (``gather``), how writes are merged
(``merge``), and how they are published (``publish``), and may write ahead
(``write_ahead``, as the Kafka sink does into its open transaction).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ..state.bolt import StatefulBolt
from ..state.key_value import KeyValueState
from ..tuples import Tuple
from .base import Sink

log = logging.getLogger(__name__)

PENDING_KEY = "__sink_pending__"   # in the sink task's state: (txid, writes) of its last PREPARE


class Staged(NamedTuple):
    """The writes a PREPARE staged, and its txid: what is saved under ``PENDING_KEY`` (a
    msgpack array, read back as a list)."""

    txid: int
    writes: list[Any]


class CheckpointedSink(StatefulBolt, Sink):
    """See the module's docstring."""

    takes_part = True
    outputs = None   # a sink: it emits nothing

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.conf = conf
        self.component = context.component_id
        self.task = context.task_id
        self.topology = context.topology_name
        self.writer = f"{self.topology}.{self.component}.{self.task}"
        self.state: KeyValueState | None = None
        self.gathered: list[Any] = []            # this checkpoint's writes, in order
        self.staged: Staged | None = None   # prepared, not yet published

    # ----- what a subclass gives

    def gather(self, tup: Tuple) -> Any:
        """The write ``tup`` makes (msgpack-able), or None for none."""
        raise NotImplementedError

    def merge(self, writes: list[Any]) -> list[Any]:
        """The writes to stage, from a checkpoint's writes in order (upserts keep the last
        per key)."""
        return writes

    def write_ahead(self, write: Any) -> None:
        """Called with each write while its checkpoint is open (before PREPARE)."""

    def sealed(self, txid: int) -> None:
        """Called at PREPARE ``txid``, before the staged writes are saved: raise if the writes
        made ahead cannot be made durable (the checkpoint then fails and rolls back)."""

    def publish(self, txid: int, writes: list[Any], ahead: bool) -> None:
        """Make ``writes`` visible with mark ``txid`` in one atomic step, unless the mark is
        ``txid`` or later already. ``ahead``: the writes were written ahead (into an open
        transaction) by this task in this run."""
        raise NotImplementedError

    def discard(self) -> None:
        """Drop what was written ahead (the checkpoint rolled back)."""

    def started(self) -> None:
        """Called once ``self.state`` is set, before the staged writes are published again."""

    # ----- the checkpoint actions

    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        self.started()
        saved = state.get(PENDING_KEY)
        pending = None if saved is None else Staged(*saved)
        if pending is not None and pending.writes:
            txid, writes = pending
            log.info("%s: publishing checkpoint %d's %d staged write(s) again (if not out "
                     "yet)", self.writer, txid, len(writes))
            self.publish(txid, list(writes), ahead=False)

    def execute(self, tup: Tuple) -> None:
        write = self.gather(tup)
        if write is not None:
            self.gathered.append(write)
            if self.staged is None:
                self.write_ahead(write)
        self.collector.ack(tup)

    def pre_prepare(self, txid: int) -> None:
        if self.staged is not None:
            # A second PREPARE before a COMMIT (Storm's state machine allows it): the first
            # one's writes are staged again with the new ones, which are written ahead now.
            for write in self.gathered:
                self.write_ahead(write)
            self.gathered = self.staged.writes + self.gathered
            self.staged = None
        writes = self.merge(self.gathered)
        self.sealed(txid)
        assert self.state is not None   # PREPARE comes after INITSTATE
        staged = Staged(txid, writes)
        self.state.put(PENDING_KEY, staged)
        self.staged, self.gathered = staged, []

    def pre_commit(self, txid: int) -> None:
        if self.state is None or self.staged is None or self.staged.txid != txid:
            # Restarted before INITSTATE (init_state publishes what the checkpoint staged), or
            # published already (a COMMIT sent again by a recovery).
            return
        self.publish(txid, self.staged.writes, ahead=True)
        self.staged = None
        for write in self.gathered:   # the next checkpoint's, held back while this one was open
            self.write_ahead(write)

    def pre_rollback(self) -> None:
        self.discard()
        self.gathered, self.staged = [], None
