"""An offset spout's part in effectively-once (``stormlet.state.exactly`` has the design).

    follower = CheckpointFollower(spout, conf, context)
    if follower.may_emit(): ...       # in next_tuple, before anything is emitted

The follower reads the checkpoint spout's progress record from the state store (never more
often than every ``LOOK_SECS``) and, for its spout task:

- at a new epoch, rewinds every partition to the positions saved with the last committed
  checkpoint and sends the epoch's marker before any new tuple;
- while a checkpoint is PREPARING, holds the spout; once every tuple it emitted is acked it
  saves ``(epoch, positions)`` for the checkpoint (``(epoch, "failed")`` if one of its tuples
  failed this epoch), and it emits again once the checkpoint is past PREPARING;
- a task that finds its own start record of the current epoch is a restarted one that lost
  what it had in flight: it reports a failure, so the whole topology recovers.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..state.checkpoint import (
    CHECKPOINT_COMPONENT,
    CHECKPOINT_STREAM,
    COMMITTED,
    PREPARING,
    Progress,
)
from ..state.exactly import (
    EPOCH,
    FAILED,
    PROGRESS_KEY,
    PositionsReport,
    open_reader,
    positions_key,
    read,
    read_report,
)
from ..state.providers import namespace, open_state

log = logging.getLogger(__name__)

# How often the follower reads the checkpoint spout's progress.
LOOK_SECS = 0.005
_STARTED_KEY = "started"   # the epoch this task last started (rewound) at


class CheckpointFollower:
    """See the module's docstring; ``spout`` is an ``OffsetSpout`` opened in this mode."""

    def __init__(self, spout: Any, conf: dict[str, Any], context: Any):
        topology = context.topology_name
        self.spout = spout
        self.name = f"{context.component_id}:{context.task_id}"
        self.progress = open_reader(conf, topology, namespace(topology, CHECKPOINT_COMPONENT))
        self.own = open_state(conf, topology,
                              namespace(topology, context.component_id, context.task_id))
        # Every task of the component: a partition's positions are where its last owner left.
        self.siblings = [open_reader(conf, topology,
                                     namespace(topology, context.component_id, t))
                         for t in context.get_component_tasks(context.component_id)]
        self.epoch = 0            # none yet: nothing is emitted before the first one is read
        self.reported = -1        # the last txid whose positions this task saved, this epoch
        self.broken = False       # a tuple failed this epoch (or this task restarted in it)
        self.holding = True
        self.pending: dict[int, int] = {}      # positions reported, not yet committed
        self.checkpointed: dict[int, int] = {}  # positions of the last committed checkpoint
        self.next_look = 0.0

    def may_emit(self) -> bool:
        """True when the spout may emit now."""
        now = time.monotonic()
        if now >= self.next_look:
            self.next_look = now + LOOK_SECS
            self._look()
        return self.epoch > 0 and not self.holding and not self.broken

    def owns(self, msg_id: Any) -> bool:
        """True when ``msg_id`` was emitted in this epoch (older acks and fails are moot)."""
        return len(msg_id) > 2 and msg_id[2] == self.epoch

    def failed(self) -> None:
        if not self.broken:
            log.warning("%s: a tuple failed in epoch %d: the next checkpoint recovers",
                        self.name, self.epoch)
        self.broken = True

    def _look(self) -> None:
        # Saved by the checkpoint spout as [txid, phase, epoch] ([txid, phase] before epochs).
        progress = Progress(*(read(self.progress, PROGRESS_KEY) or ()))
        txid, phase, epoch = progress.txid, progress.phase, progress.epoch
        if epoch > self.epoch:
            self._rewind(epoch, txid if phase == COMMITTED else txid - 1)
        if epoch != self.epoch:
            return
        self.holding = phase == PREPARING
        if self.holding and txid > self.reported:
            if self.broken:
                self._report(txid, FAILED)
            elif self.spout.outstanding() == 0:
                self.pending = self.spout.positions()
                self._report(txid, sorted(self.pending.items()))
        elif not self.holding and txid == self.reported and self.pending:
            self.checkpointed, self.pending = self.pending, {}

    def _report(self, txid: int, report: list[tuple[int, int]] | str) -> None:
        saved = self.own.get(positions_key(txid))
        if saved is not None and PositionsReport(*saved).epoch == self.epoch:
            # This task reported before it was restarted, and the checkpoint spout may have
            # acted on that report: never replace it (a failure waits for the next checkpoint).
            self.reported = txid
            return
        self.own.put(positions_key(txid), PositionsReport(self.epoch, report))
        self.own.commit()
        self.reported = txid

    def _rewind(self, epoch: int, committed: int) -> None:
        restarted = self.epoch == 0 and self.own.get(_STARTED_KEY) == epoch
        positions: dict[int, int] = {}
        for store in self.siblings:
            found = read_report(store, committed) if committed > 0 else None
            if found is not None and not isinstance(found.positions, str):   # else FAILED
                positions.update((p, offset) for p, offset in found.positions)
        self.spout.rewind_to_checkpoint(positions)
        self.spout.collector.emit([epoch, EPOCH, epoch], None, CHECKPOINT_STREAM)
        self.own.put(_STARTED_KEY, epoch)
        self.own.commit()
        self.epoch, self.reported, self.pending = epoch, committed, {}
        self.checkpointed = {p: o for p, o in positions.items() if p in self.spout.partitions}
        self.broken = restarted
        log.info("%s: epoch %d: rewound to checkpoint %d's positions %s%s", self.name, epoch,
                 committed, self.spout.positions(),
                 " (restarted within the epoch: the next checkpoint recovers)"
                 if restarted else "")

    def close(self) -> None:
        for store in (self.progress, *self.siblings):
            store.close()
        self.own.close()
