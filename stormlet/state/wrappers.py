"""What a topology runs for its stateful bolts, and for the bolts upstream of them, so that the
checkpoint stream reaches every stateful bolt (Storm's ``StatefulBoltExecutor`` and
``CheckpointTupleForwarder``).

A bolt acts on a checkpoint action once it has it from every task that sends it the checkpoint
stream (so every upstream task has passed the point), then sends it on, anchored, to the bolts
after it, and acks it. A failed action is recovered by the checkpoint spout.

In effectively-once, each also keeps an ``EpochGate`` over the tasks sending it data: stale
data is dropped, a new epoch rolls the state back, and PREPARE is refused unless the bolt and
every sender are at the checkpoint's epoch and the bolt has had its INITSTATE (see
``exactly``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..collectors import AnchoringCollector, BasicOutputCollector
from ..components import BasicBolt, Bolt, OutputFieldsDeclarer
from ..tuples import Tuple
from .bolt import StatefulBolt
from .checkpoint import CHECKPOINT_FIELDS, CHECKPOINT_STREAM, COMMIT, INITSTATE, PREPARE, ROLLBACK
from .exactly import EPOCH, EpochGate, effectively_once
from .key_value import KeyValueState
from .poison import PoisonKeys
from .providers import namespace, open_state
from .store import StateError, UndecodableValue

if TYPE_CHECKING:
    from ..collectors import OutputCollector
    from ..context import TopologyContext

log = logging.getLogger(__name__)


class CheckpointBarrier:
    """Tells when a checkpoint action has come from every input task.

    Counted per (action, txid) as a set of senders, so a retried action sent again by a task
    that sent it before is not counted twice; actions older than the last one acted on are
    stale (``arrive`` returns False and forgets them)."""

    def __init__(self, senders: Iterable[int]):
        self.senders = frozenset(senders)
        self._arrived: dict[tuple[str, int], set[int]] = {}
        self.last_txid = -1

    def arrive(self, tup: Tuple) -> bool:
        """Record ``tup`` (a checkpoint tuple); True when its action is due here now."""
        txid, action = tup[0], tup[1]
        if txid < self.last_txid:
            return False
        key = (action, txid)
        arrived = self._arrived.setdefault(key, set())
        arrived.add(tup.source_task)
        if not self.senders <= arrived:
            return False
        del self._arrived[key]
        self.last_txid = txid - 1 if action == ROLLBACK else txid
        for stale in [k for k in self._arrived if k[1] < self.last_txid]:
            del self._arrived[stale]
        return True


class _CheckpointingBolt(Bolt):
    """What the stateful runner and the forwarder share: the checkpoint stream's inputs and
    outputs. ``checkpoint_sources`` (the components sending this bolt the checkpoint stream) is
    set when the topology is built."""

    checkpoint_sources: tuple[str, ...] = ()
    epoch_sources: tuple[str, ...] = ()   # the components sending it data
    inner: Any
    initialized = False

    @property
    def outputs(self) -> Any:   # type: ignore[override]
        return self.inner.outputs

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.inner.declare_output_fields(declarer)
        declarer.declare(list(CHECKPOINT_FIELDS), stream=CHECKPOINT_STREAM)

    def get_component_configuration(self) -> dict[str, Any] | None:
        return self.inner.get_component_configuration()

    def config_problems(self, conf: dict[str, Any]) -> list[str]:
        return self.inner.config_problems(conf)

    def _open_barrier(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.barrier = CheckpointBarrier(task for source in self.checkpoint_sources
                                         for task in context.get_component_tasks(source))
        self.exactly = effectively_once(conf)
        self.gate = EpochGate(task for source in self.epoch_sources
                              for task in context.get_component_tasks(source))

    def _stale(self, tup: Tuple) -> bool:
        """Effectively-once: True (and the tuple acked, unapplied) for data its sender sent
        before its spouts rewound."""
        if not self.exactly or self.gate.admits(tup.source_task):
            return False
        self.collector.ack(tup)
        return True

    def _on_checkpoint(self, tup: Tuple) -> None:
        if tup[1] == EPOCH:
            if self.gate.arrive(tup.source_task, tup[2]):
                self.new_epoch(tup[2])
                # Ahead of this bolt's fresh output on every link: the cut travels down.
                self.collector.emit([tup[0], EPOCH, tup[2]], stream=CHECKPOINT_STREAM)
            self.collector.ack(tup)
            return
        if not self.barrier.arrive(tup):
            self.collector.ack(tup)
            return
        try:
            if self.exactly and tup[1] == PREPARE:
                self._check_whole(tup[2])
            self.act(tup[1], tup[0])
        except Exception as exc:
            log.error("%s of checkpoint %s failed: %s", tup[1], tup[0], exc)
            self.collector.fail(tup, f"checkpoint {tup[1]} {tup[0]} failed: {exc}")
            self.collector.report_error(exc)
            return
        self.collector.emit([tup[0], tup[1], tup[2]], tup, CHECKPOINT_STREAM)
        self.collector.ack(tup)

    def _check_whole(self, epoch: int) -> None:
        if not self.initialized:
            raise StateError("PREPARE before INITSTATE (a restarted task): recovering")
        behind = self.gate.behind(epoch)
        if behind:
            raise StateError(f"PREPARE of epoch {epoch} while tasks {behind} have not resumed "
                             f"at it here (this bolt is at epoch {self.gate.epoch}): "
                             f"recovering")

    def act(self, action: str, txid: int) -> None:
        """Do checkpoint ``action`` for ``txid`` (raise to fail it)."""
        if action == INITSTATE:
            self.initialized = True

    def new_epoch(self, epoch: int) -> None:
        """Effectively-once: the spouts rewound for ``epoch``; drop what stale data did."""

    def cleanup(self) -> None:
        self.inner.cleanup()


class CheckpointForwarder(_CheckpointingBolt):
    """Runs a bolt (or basic bolt) upstream of a stateful bolt, passing checkpoints on."""

    def __init__(self, bolt: Bolt | BasicBolt):
        self.inner = bolt

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        self.collector = collector
        self._open_barrier(conf, context)
        self.initialized = False
        if isinstance(self.inner, BasicBolt):
            self._basic = BasicOutputCollector(collector)
            self._execute_data = self._execute_basic
            self.inner.prepare(conf, context)
        else:
            self._execute_data = self.inner.execute
            self.inner.prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        if tup.stream == CHECKPOINT_STREAM:
            self._on_checkpoint(tup)
        elif not self._stale(tup):
            self._execute_data(tup)

    def _execute_basic(self, tup: Tuple) -> None:
        self._basic.input = tup
        self.inner.execute(tup, self._basic)   # raising fails it, as for any basic bolt
        self.collector.ack(tup)


def run_bolt(obj: Any) -> Any:
    """The bolt a topology runs as ``obj``: a forwarder's inner bolt, else ``obj`` itself."""
    return obj.inner if isinstance(obj, CheckpointForwarder) else obj


class StatefulBoltRunner(_CheckpointingBolt):
    """The bolt a topology runs in a ``StatefulBolt``'s place: it keeps the bolt's state, holds
    its acks until their checkpoint commits, and holds its input until its state is ready."""

    def __init__(self, bolt: StatefulBolt):
        self.inner = bolt

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        self.collector = collector
        self.component_id = context.component_id
        self._open_barrier(conf, context)
        self.state: KeyValueState = open_state(
            conf, context.topology_name,
            namespace(context.topology_name, context.component_id, context.task_id))
        self.initialized = False
        self.waiting: list[Tuple] = []    # arrived before init_state
        self.acked: list[Tuple] = []      # acked since the last PREPARE
        self.prepared: list[Tuple] = []   # acked before the last PREPARE, held for its COMMIT
        self.poison = PoisonKeys()
        self.inner.prepare(conf, context, self._bolt_collector(collector))

    def _bolt_collector(self, collector: OutputCollector) -> AnchoringCollector:
        """What the bolt's ``self.collector`` is."""
        return _StatefulCollector(self, collector)

    def execute(self, tup: Tuple) -> None:
        if tup.stream == CHECKPOINT_STREAM:
            self._on_checkpoint(tup)
        elif self._stale(tup):
            return
        elif self.initialized:
            self._execute_data(tup)
        else:
            self.waiting.append(tup)

    def _execute_data(self, tup: Tuple) -> None:
        # A tuple's changes are all or nothing: one that raises leaves the state as it found
        # it, so its replay does not count again what it changed before raising.
        poison, state = self.poison, self.state
        if poison.failed_roots and poison.tree_failed(tup):
            self.collector.fail(tup, "its tree already failed here on a state value that "
                                     "cannot be decoded")
            return
        state.savepoint()
        try:
            self.inner.execute(tup)
        except UndecodableValue as exc:
            state.undo()
            self._unhold(tup)
            poison.failed(tup, exc, self.collector)
        except BaseException:
            state.undo()
            self._unhold(tup)
            raise

    def _unhold(self, tup: Tuple) -> None:
        # An ack held for a tuple that then failed would be sent at the commit: drop it.
        if self.acked and self.acked[-1] is tup:
            self.acked.pop()

    def act(self, action: str, txid: int) -> None:
        bolt, state = self.inner, self.state
        if action == PREPARE:
            if not self.initialized:
                raise StateError("PREPARE before the state was initialized (a restarted task): "
                                 "recovering")
            bolt.pre_prepare(txid)
            state.prepare_commit(txid)
            self.prepared += self.acked
            self.acked = []
        elif action == COMMIT:
            bolt.pre_commit(txid)
            state.commit(txid)
            held, self.prepared = self.prepared, []
            for tup in held:
                self.collector.ack(tup)
        elif action == ROLLBACK:
            bolt.pre_rollback()
            held, self.prepared, self.acked = self.prepared + self.acked, [], []
            for tup in held:
                self.collector.fail(tup, f"checkpoint {txid} rolled back")
            state.rollback()
        elif action == INITSTATE and not self.initialized:
            # Bolts that are initialized already ignore it: it is sent again after a failure
            # for the sake of restarted tasks.
            bolt.pre_init_state(txid)
            bolt.init_state(state)
            self.initialized = True
            waiting, self.waiting = self.waiting, []
            for tup in waiting:
                self._execute_waiting(tup)

    def _execute_waiting(self, tup: Tuple) -> None:
        # As the executor does for any tuple: one that raises fails alone, with the reason.
        try:
            self._execute_data(tup)
        except Exception as exc:
            self.collector.fail(tup, f"stateful bolt raised {type(exc).__name__}: {exc}")
            self.collector.report_error(exc)

    def hold_ack(self, tup: Tuple) -> None:
        if self.exactly:
            # Recovery rolls back and rewinds as a whole: no tuple is replayed alone, and the
            # spout's positions wait for this ack (see exactly).
            self.collector.ack(tup)
        else:
            self.acked.append(tup)

    def new_epoch(self, epoch: int) -> None:
        stale, self.waiting = self.waiting, []
        for tup in stale:   # they came before their senders' markers
            self.collector.ack(tup)
        if self.initialized:
            self._roll_back_for_new_epoch()
        # Restarted (not initialized), it has applied nothing; a checkpoint its predecessor
        # prepared is the recovery's to commit or roll back (it may be decided): rolling it back
        # here, on the restarted spouts' marker, would make the recovery's COMMIT commit nothing.

    def _roll_back_for_new_epoch(self) -> None:
        """Drop what was applied since the last commit: a new epoch replays it."""
        self.inner.pre_rollback()
        self.state.rollback()

    def cleanup(self) -> None:
        try:
            self.inner.cleanup()
        finally:
            self.state.close()


class _StatefulCollector(AnchoringCollector):
    """What a stateful bolt's ``self.collector`` is: emits must be anchored, acks are held."""

    def __init__(self, runner: StatefulBoltRunner, collector: OutputCollector):
        super().__init__(collector)
        self._runner = runner

    def anchored(self, anchors: Tuple | Iterable[Tuple] | None) -> Tuple | Iterable[Tuple]:
        if isinstance(anchors, Tuple) or anchors:
            return anchors
        raise StateError(f"stateful bolt {self._runner.component_id!r} emitted without anchors: "
                         f"a stateful bolt's emits must be anchored to their input "
                         f"(emit(values, anchors=[tup])) so that a rolled-back checkpoint "
                         f"replays them")

    def ack(self, tup: Tuple) -> None:
        """Held until the checkpoint holding ``tup``'s changes is committed."""
        self._runner.hold_ack(tup)
