"""Effectively-once (``topology.guarantee: effectively-once``): after any failure, each stateful
bolt's state holds every offset's effect exactly once, as a failure-free run's would.

At-least-once (Storm's) replays failed tuples one by one, so a tuple whose effect a committed
checkpoint already holds can be applied again. Effectively-once instead ties every checkpoint
to the offset spouts' positions and recovers as a whole: state rolls back to the last completed
checkpoint and every offset spout rewinds to exactly the positions saved with it. Flink does
this with barriers aligned in the data; this design reaches the same cut by quiescing, which
stormlet's spouts (they receive no tuples) allow without a new channel:

Checkpoint ``t`` (the checkpoint spout saves ``(t, PREPARING, epoch)`` before any step):

1. Each offset spout task reads that record from the state store, stops emitting, and waits
   until every tuple it emitted is acked (stateful bolts ack at once in this mode: a tree's ack
   means its every tuple was applied). It then saves ``(epoch, positions)`` (per partition,
   the next offset to emit) under ``positions_key(t)`` in its own namespace, or ``(epoch,
   "failed")`` if one of its tuples failed since the last recovery (no tuple is retried alone
   in this mode). A report is never replaced within its epoch: the checkpoint spout may have
   acted on it.
2. The checkpoint spout waits for every offset spout task's report of ``t`` in the current
   epoch (an earlier epoch's is of an attempt at ``t`` that was rolled back), then sends
   ``PREPARE t``. The pipeline holds no data (the spouts are stopped and drained), so every
   bolt stages exactly the effects of the offsets below the positions.
3. ``COMMIT t`` as before. Spouts emit again once ``t`` is COMMITTING or later.

So a committed checkpoint ``t`` holds, in every bolt, the effects of exactly the offsets below
each spout's positions for ``t``. A report of ``failed``, a spout that does not report within the
checkpoint timeout, or any failed checkpoint action, makes the checkpoint spout *recover*: it
finishes or rolls back the open checkpoint as in at-least-once, sends INITSTATE, then saves the
record with ``epoch + 1``. Each offset spout that reads a new epoch forgets what it had in
flight, rewinds every partition to the positions of the last committed checkpoint ``T`` (read
from whichever of its component's tasks saved it), and sends an ``EPOCH`` marker on the
checkpoint stream before its first new tuple. Tuples from before the rewind may still be in
queues (a worker that was cut off, a sibling of a failed tuple): an ``EpochGate`` in every
checkpoint-carrying bolt drops data from a sender until that sender's marker of the bolt's
epoch arrives; the first marker of a new epoch rolls the bolt's state back to its committed
checkpoint (dropping what stale tuples applied) and is passed on, ahead of the bolt's fresh
output, so the same cut travels down every path. A restarted task before its INITSTATE has
applied nothing and rolls nothing back: a checkpoint its predecessor prepared may be decided,
and is the recovery's to commit or roll back. A bolt refuses ``PREPARE`` (failing it, hence
a new recovery) while it is not at the checkpoint's epoch with every sender, or, restarted,
before its INITSTATE: a checkpoint can only complete over a pipeline that is whole.

The offset spouts' own commits (ZooKeeper, the local log's ``_offsets``) hold, in this mode,
the positions of the last committed checkpoint rather than the acked offsets, so lag reads
right; they are never read back while a checkpoint's positions exist.

Every task reads the others' reports from the state store, so they must share one: the
embedded store serves workers on one machine (its file is the supervisor's); across machines,
use Redis. What costs: the spouts pause for the drain and the PREPARE at every checkpoint, and
a recovery waits for the failed tuple's report (one checkpoint interval) or, when a message or a
checkpoint action is lost with a worker, for the checkpoint timeout
(``topology.state.checkpoint.timeout.secs``, the message timeout unless set; see ``checkpoint``).

A stateful windowed bolt (``StatefulWindowedBolt.with_persistence()``) with count windows takes
part: its window's tuples and bookkeeping are checkpointed with its state and roll back with it,
and the rewound spouts send its tuples again in each sender's order, so with one sender task
each window holds exactly what a failure-free run's does (with several, the senders'
interleaving differs between any two runs, failures or not; each tuple is still in the sequence
once). Its processing-time windows (a ``Duration`` length or sliding interval) hold what arrived
when, which a replay does not repeat: refused.

What the mode cannot protect is refused at submit (``problems``), sinks that cannot take part
among it: a sink's writes outside are exactly once when it commits them with the checkpoint
(``stormlet.sinks.checkpointed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from .. import config as cfg
from .store import decode_value, encode_key

EPOCH = "EPOCH"   # a checkpoint-stream action: (epoch, EPOCH, epoch), from offset spouts on
FAILED = "failed"  # a spout's report for a checkpoint in place of its positions
PROGRESS_KEY = "progress"


def effectively_once(conf: Mapping[str, Any]) -> bool:
    """True when ``conf`` (a task's merged config) asks for effectively-once."""
    return conf.get(cfg.TOPOLOGY_GUARANTEE) == cfg.EFFECTIVELY_ONCE


def positions_key(txid: int) -> tuple[str, int]:
    """The key, in an offset spout task's namespace, of its positions for checkpoint ``txid``."""
    return ("positions", txid)


class PositionsReport(NamedTuple):
    """An offset spout task's report for a checkpoint, saved under ``positions_key``: the epoch
    it was made in, and its positions (sorted ``(partition, next offset)`` pairs) or
    ``FAILED``. Stored as a msgpack array, as the plain tuple it once was."""

    epoch: int
    positions: list[tuple[int, int]] | str


def read_report(store: Reader, txid: int) -> PositionsReport | None:
    """The committed report of checkpoint ``txid`` in ``store`` (an offset spout task's
    namespace), or None."""
    found = read(store, positions_key(txid))
    return None if found is None else PositionsReport(*found)


def rewindable(obj: Any) -> bool:
    """True for a spout that can take part: it reports positions and rewinds to them."""
    return callable(getattr(obj, "rewind_to_checkpoint", None))


class Reader(Protocol):
    """What ``open_reader`` returns: a view of another task's committed namespace."""

    def get(self, key: bytes) -> bytes | None: ...

    def close(self) -> None: ...


def open_reader(conf: dict[str, Any], topology: str, name: str) -> Reader:
    """A read-only view of namespace ``name``, which another task writes. Not a ``Store``: a
    Redis store claims its namespace when opened, and would fence off the task that owns it."""
    from .providers import REDIS, open_store, provider_config, provider_name

    if provider_name(conf) == REDIS:
        from .redis_store import KEY_PREFIX, connect

        return _RedisReader(connect(provider_config(conf)), f"{KEY_PREFIX}{name}")
    return open_store(conf, topology, name)


class _RedisReader:
    def __init__(self, client: Any, committed_key: str):
        self._client, self._key = client, committed_key

    def get(self, key: bytes) -> bytes | None:
        return self._client.hget(self._key, key)

    def close(self) -> None:
        self._client.close()


def read(store: Reader, key: Any) -> Any:
    """The committed value of ``key`` in ``store``, read afresh (another task writes it), or
    None."""
    raw = store.get(encode_key(key))
    return None if raw is None else decode_value(raw)


class EpochGate:
    """Which senders' data a bolt takes: those whose marker of the bolt's epoch has come.

    A sender's tuples before its marker of epoch ``e`` were emitted before its spout rewound for
    ``e``; once the bolt is at ``e`` they are stale and dropped. Markers travel in order with the
    data on each sender-to-receiver link, which is what makes the cut exact."""

    def __init__(self, senders: Iterable[int]):
        self.senders = frozenset(senders)
        self.epoch = 0
        self._at: dict[int, int] = {}

    def admits(self, sender: int) -> bool:
        """True when data from ``sender`` is of the bolt's epoch."""
        return self._at.get(sender, 0) >= self.epoch

    def arrive(self, sender: int, epoch: int) -> bool:
        """Record ``sender``'s marker of ``epoch``; True when it starts a new epoch here (the
        caller rolls back and passes the marker on)."""
        if epoch > self._at.get(sender, 0):
            self._at[sender] = epoch
        if epoch <= self.epoch:
            return False
        self.epoch = epoch
        return True

    def behind(self, epoch: int) -> list[int]:
        """The senders not yet at ``epoch`` (all of them when the bolt is not at it either)."""
        if self.epoch != epoch:
            return sorted(self.senders)
        return sorted(s for s in self.senders if self._at.get(s, 0) < epoch)


def problems(components: Mapping[str, Any], conf: Mapping[str, Any]) -> list[str]:
    """What effectively-once cannot protect in a built topology's ``components`` (id to
    ``ComponentSpec``) under the merged topology ``conf``; empty in at-least-once."""
    if not effectively_once(conf):
        return []
    # Imported here: the runners import this module.
    from ..windowing import WindowedBoltRunner
    from .checkpoint import CHECKPOINT_COMPONENT
    from .providers import MEMORY, provider_name
    from .wrappers import CheckpointForwarder, StatefulBoltRunner, run_bolt

    mode = f"{cfg.TOPOLOGY_GUARANTEE} {cfg.EFFECTIVELY_ONCE}"
    if CHECKPOINT_COMPONENT not in components:
        return [f"{mode} protects the state of stateful bolts, and this topology has none "
                f"(use {cfg.AT_LEAST_ONCE})"]
    found = []
    carrying = {cid for cid, spec in components.items()
                if isinstance(spec.obj, (CheckpointForwarder, StatefulBoltRunner))}
    feeding = {sub.source for cid in carrying for sub in components[cid].inputs}
    for cid in sorted(feeding):
        spec = components[cid]
        if not spec.is_spout or cid == CHECKPOINT_COMPONENT:
            continue
        kind = type(spec.obj).__name__
        if not rewindable(spec.obj):
            found.append(f"spout {cid!r} ({kind}) cannot rewind: {mode} replays from the "
                         f"positions saved with the last checkpoint, and only offset spouts "
                         f"(LogSpout, KafkaSpout) have positions")
        elif getattr(spec.obj, "guarantee", "at_least_once") != "at_least_once":
            found.append(f"spout {cid!r} has guarantee={spec.obj.guarantee!r}: {mode} needs "
                         f"its tuples tracked (guarantee='at_least_once')")
    for cid in sorted(carrying):
        spec = components[cid]
        inner = run_bolt(spec.obj)
        if isinstance(inner, WindowedBoltRunner):
            why = ("its event-time windows hold tuples outside the checkpoint"
                   if inner.bolt.event_time else
                   "its processing-time windows depend on when tuples arrive, which a replay "
                   "does not repeat")
            found.append(f"windowed bolt {cid!r} feeds stateful bolts: {mode} cannot protect "
                         f"it ({why})")
        timed = _timed_stateful_window(inner)
        if timed:
            # (It gets tick tuples too: this one line says what they would break.)
            found.append(f"stateful windowed bolt {cid!r} has a processing-time window ({timed} "
                         f"is a Duration): which tuples a window holds depends on when they "
                         f"arrive, which a replay does not repeat, so {mode} cannot protect it "
                         f"(use Count lengths and sliding intervals)")
        elif spec.component_conf(dict(conf)).get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS):
            found.append(f"bolt {cid!r} gets tick tuples ({cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS}): "
                         f"they come by the wall clock, so a replay does not see them at the "
                         f"same places; {mode} cannot protect it")
    found += _sink_problems(components, mode)
    try:
        if provider_name(dict(conf)) == MEMORY:
            found.append(f"{cfg.TOPOLOGY_STATE_PROVIDER} memory cannot take part in {mode}: "
                         f"its state is neither durable nor shared, and the checkpoint spout "
                         f"reads the offset spouts' positions from the store (use embedded "
                         f"or redis)")
    except Exception:
        pass   # reported by providers.config_problems
    if conf.get(cfg.TOPOLOGY_ACKER_EXECUTORS) == 0:
        found.append(f"{cfg.TOPOLOGY_ACKER_EXECUTORS} 0 cannot run {mode}: a checkpoint waits "
                     f"for the spouts' tuples to be acked")
    return found


def _timed_stateful_window(bolt: Any) -> str | None:
    """"its length" or "its sliding interval" when ``bolt`` is a stateful windowed bolt's
    runner with a processing-time (``Duration``) one; else None. A count window over one
    sender's tuples fires at the same tuples in a replay, and its tuples and bookkeeping are
    checkpointed with the state, so it rolls back with it."""
    from ..windowing import Duration
    from .windowed import StatefulWindowedBoltRunner

    if not isinstance(bolt, StatefulWindowedBoltRunner):
        return None
    if isinstance(bolt.inner.window_length, Duration):
        return "its length"
    if isinstance(bolt.inner.window_sliding, Duration):
        return "its sliding interval"
    return None


def _sink_problems(components: Mapping[str, Any], mode: str) -> list[str]:
    """The sinks (``stormlet.sinks.base.Sink``) that cannot take part: their writes outside
    would not be exactly once."""
    from ..sinks.base import Sink
    from .bolt import StatefulBolt
    from .wrappers import StatefulBoltRunner, run_bolt

    found = []
    for cid in sorted(components):
        spec = components[cid]
        if spec.is_spout:
            continue
        obj = spec.obj
        bolt = obj.inner if isinstance(obj, StatefulBoltRunner) else run_bolt(obj)
        if not isinstance(bolt, Sink):
            continue
        kind = type(bolt).__name__
        if not bolt.takes_part:
            found.append(f"sink {cid!r} ({kind}) cannot take part in {mode}: {bolt.why_not} "
                         f"(use TransactionalKafkaBolt, RedisUpsertBolt or EmbeddedUpsertBolt)")
        elif not isinstance(bolt, StatefulBolt):
            found.append(f"sink {cid!r} ({kind}) says it takes part in {mode} but is not a "
                         f"StatefulBolt, so it never gets the checkpoint's PREPARE and COMMIT")
    return found
