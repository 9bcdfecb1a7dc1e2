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

A topology resubmitted under its name with fewer sink tasks (or with its task ids moved by
another component's count) leaves tasks of the earlier run that this one does not have, and one
of them may have staged the writes of a decided checkpoint without publishing them (the run
stopped between the decision and its COMMIT). The writes are in that task's state, which no task
of the new run reads, so the component's lowest task takes them over in its ``init_state``
(Flink hands a removed subtask's committables to the remaining ones): it reads the tasks of the
earlier runs from the state store (namespace ``<topology>/<component>``, key ``TASKS_KEY``); for
each that this run does not have, it commits that task's state at the decided checkpoint (if
the task prepared it and died before the commit) or rolls back a later one, which was never
decided, and publishes what the task staged as that task would have, with that task's mark, so
a publish that was out already does nothing; then ``end_former_task`` lets the sink close what
the task left open. It records this run's tasks with the earlier ones before it begins, and in
their place once done, so a crash meanwhile leaves them all to the next start. It never touches
the state or mark of a task of this run. (In effectively-once no data flows before every task's
INITSTATE is done; in at-least-once another task may begin first, which touches only its own.)
The record and the former tasks' state are in the topology's state store: with the embedded
store, each host's file holds only its own tasks', so on several hosts use Redis for this too.

Inputs that arrive between ``PREPARE t`` and ``COMMIT t`` belong to ``t + 1``: they are gathered
for it and not written until ``t`` is published.

Subclasses say how a write is made of a tuple (``gather``), how writes are merged
(``merge``), how they are published (``publish``, and ``publish_former`` as a former task,
which a submit checks is there), and may write ahead (``write_ahead``, as the Kafka sink does
into its open transaction) and close what a former task left open (``end_former_task``).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ..state.bolt import StatefulBolt
from ..state.key_value import KeyValueState
from ..state.providers import namespace, open_state
from ..state.store import OtherCheckpointPrepared, StateError
from ..tuples import Tuple
from .base import Sink

log = logging.getLogger(__name__)

PENDING_KEY = "__sink_pending__"   # in the sink task's state: (txid, writes) of its last PREPARE
# In a sink component's namespace: the tasks of its last run (and, while the lowest task takes
# over the former ones, theirs too). Until 2026-11-30 only the Kafka sink kept them, under
# LEGACY_TASKS_KEY, which a take-over reads too and then deletes.
TASKS_KEY = "sink_tasks"
LEGACY_TASKS_KEY = "transactional_tasks"


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
        self.tasks = sorted(context.get_this_component_tasks())
        self.writer = self.writer_of(self.task)
        self.restored: int | None = None   # the committed checkpoint INITSTATE restores
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

    def publish_former(self, task: int, txid: int, writes: list[Any]) -> None:
        """``publish`` as task ``task`` of an earlier run would have (its mark), from this
        task: the writes that task staged for the decided checkpoint ``txid``."""
        raise NotImplementedError

    def config_problems(self, conf: dict[str, Any]) -> list[str]:
        problems = super().config_problems(conf)
        if type(self).publish_former is CheckpointedSink.publish_former:
            problems.append(f"{type(self).__name__} does not implement publish_former(task, "
                            f"txid, writes): a run with fewer tasks could not publish what a "
                            f"former task staged (see stormlet.sinks.checkpointed)")
        return problems

    def end_former_task(self, task: int) -> None:
        """Close what task ``task`` of an earlier run, which this run no longer has, may have
        left open (after its staged writes are published)."""

    def discard(self) -> None:
        """Drop what was written ahead (the checkpoint rolled back)."""

    def started(self) -> None:
        """Called once ``self.state`` is set, before the staged writes are published again."""

    # ----- the component's tasks

    def writer_of(self, task: int) -> str:
        """Task ``task``'s name as the writer of its marks."""
        return f"{self.topology}.{self.component}.{task}"

    def open_registry(self) -> KeyValueState:
        """Where the component's tasks of earlier runs are recorded (``TASKS_KEY``): the state
        store's namespace ``<topology>/<component>``, which only its lowest task opens."""
        return open_state(self.conf, self.topology, namespace(self.topology, self.component))

    # ----- the checkpoint actions

    def pre_init_state(self, txid: int) -> None:
        self.restored = txid

    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        self.started()
        # Run by hand (a test's harness), with no INITSTATE to say what is decided, it leaves
        # the former tasks as they are.
        if self.task == self.tasks[0] and self.restored is not None:
            self._take_over_former_tasks()
        staged = _staged(state)
        if staged is not None:
            log.info("%s: publishing checkpoint %d's %d staged write(s) again (if not out "
                     "yet)", self.writer, staged.txid, len(staged.writes))
            self.publish(staged.txid, staged.writes, ahead=False)

    def _take_over_former_tasks(self) -> None:
        """Publish what the tasks of earlier runs that this run no longer has staged for a
        decided checkpoint, and end them (see the module's docstring)."""
        registry = self.open_registry()
        try:
            legacy = registry.get(LEGACY_TASKS_KEY)
            former = set(registry.get(TASKS_KEY) or []) | set(legacy or [])
            if former == set(self.tasks) and legacy is None:
                return
            gone = sorted(former - set(self.tasks))
            if gone:
                registry.put(TASKS_KEY, sorted(former | set(self.tasks)))
                registry.commit()
            for task in gone:
                self._publish_staged_by(task)
                self.end_former_task(task)
            if gone:
                log.info("%s: took over task(s) %s of an earlier run, which this run no longer "
                         "has", self.component, ", ".join(map(str, gone)))
            registry.put(TASKS_KEY, list(self.tasks))
            registry.delete(LEGACY_TASKS_KEY)
            registry.commit()
        finally:
            registry.close()

    def _publish_staged_by(self, task: int) -> None:
        """Publish, as task ``task`` of an earlier run, what it staged for the decided
        checkpoint, if its own COMMIT never came."""
        assert self.restored is not None   # INITSTATE said which checkpoint is decided
        state = open_state(self.conf, self.topology,
                           namespace(self.topology, self.component, task))
        try:
            try:
                state.commit(self.restored)   # prepared, decided, then the run stopped
            except OtherCheckpointPrepared as exc:
                if exc.prepared < self.restored:
                    # Cannot happen while the registry holds every task: a checkpoint is
                    # decided only once every task prepared it. Not dropped, said.
                    raise StateError(f"{self.component}: task {task} of an earlier run has "
                                     f"checkpoint {exc.prepared} prepared, before the decided "
                                     f"{self.restored}: its state is left as it is; "
                                     f"resubmit with that task to go on") from None
                state.rollback()              # a later checkpoint, never decided
            staged = _staged(state)
            if staged is not None:
                log.info("%s: publishing checkpoint %d's %d write(s) staged by task %d of an "
                         "earlier run (if not out yet)", self.writer, staged.txid,
                         len(staged.writes), task)
                self.publish_former(task, staged.txid, staged.writes)
        finally:
            state.close()

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


def _staged(state: KeyValueState) -> Staged | None:
    """What the task whose state this is staged at its last PREPARE, if it staged writes."""
    saved = state.get(PENDING_KEY)
    if saved is None or not saved[1]:
        return None
    return Staged(saved[0], list(saved[1]))
