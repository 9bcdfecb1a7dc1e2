"""Stateful windowed bolts: a window and a state checkpointed together (Storm's
``IStatefulWindowedBolt`` with ``withPersistence``: its ``PersistentWindowedBoltExecutor`` and
``WindowState``).

    class RunningTotal(StatefulWindowedBolt):
        outputs = ["n", "total"]
        def init_state(self, state):
            self.state = state
        def execute(self, window):
            n = sum(1 for _ in window.get_iter())
            total = self.state.get("total", 0) + n
            self.state.put("total", total)
            self.collector.emit([n, total])

    bolt = RunningTotal().with_tumbling_window(Count(1000)).with_persistence()
    builder.set_bolt("totals", bolt.with_max_events_in_memory(50_000)).shuffle_grouping("s")

The window is configured as a ``WindowedBolt``'s (processing time: ``Count`` and ``Duration``
lengths and sliding intervals); ``init_state`` and the ``pre_*`` hooks are a
``StatefulBolt``'s. With ``with_persistence()`` the window's tuples, its own bookkeeping (when it
fires next, how many tuples it has taken since) and the bolt's state are checkpointed together
at every checkpoint of the topology (``topology.state.checkpoint.interval.ms``):

- A tuple is acked when the checkpoint after its arrival commits, not when it leaves the window,
  so a window may be longer than the message timeout (only the checkpoint interval must fit in
  it), and a spout's pending tuples are not held for a window's length.
- A restarted worker's bolt resumes the window of its last committed checkpoint; the tuples that
  came after it were not acked, so their spouts replay them. Nothing is lost and, as with any
  stateful bolt, a tuple is counted twice only if its ack was lost after its checkpoint
  committed (at least once).
- A rolled-back checkpoint takes the window back to the committed one, and the tuples since
  are failed and replayed.

The window is kept in the state store in partitions of ``PARTITION_EVENTS`` tuples, at most
``with_max_events_in_memory(n)`` of them in memory (default ``DEFAULT_MAX_EVENTS_IN_MEMORY``;
never fewer than ``MIN_PARTITIONS_IN_MEMORY`` partitions, as Storm): older partitions are
written to the store and read back when the window is iterated. Use ``window.get_iter()`` to
read a large window one tuple at a time (``get()`` reads it all into a list);
``get_new()`` and ``get_expired()`` raise ``NotImplementedError``, as in Storm. Tuples changed
since the last checkpoint are held in memory until it (encoded), as Storm's states hold them.

As in Storm, emits are unanchored unless ``anchors`` are given (the window's tuples are acked
at checkpoints, not by the window's output), and ``fail(tup)`` is refused. If
``execute(window)`` raises, what it changed in the state is undone, the error is reported and
the next checkpoint is rolled back, so the tuples since the last one are replayed.

Not in stormlet: Storm's other form, without persistence (``withMessageIdField``: the window in
memory, with the last expired and evaluated message ids checkpointed), and event-time windows
with persistence; both are refused when the topology is built. The tuples' values are stored
as msgpack, as state values are: a value of a registered serializer type cannot be persisted.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..collectors import AnchoringCollector
from ..components import OutputFieldsDeclarer
from ..errors import TopologyError
from ..tuples import StreamInfo, Tuple
from ..windowing import Length, Window, WindowedBolt, WindowManager
from ..windowing.managers import Event
from ..windowing.wrapper import WindowedBoltRunner, refuse_problems
from .bolt import StatefulBolt
from .checkpoint import CHECKPOINT_FIELDS, CHECKPOINT_STREAM, COMMIT, INITSTATE, PREPARE, ROLLBACK
from .key_value import _ABSENT, KeyValueState
from .providers import namespace, open_store
from .store import StateError, decoded_value, encode_key
from .wrappers import StatefulBoltRunner

if TYPE_CHECKING:
    from typing import Self

    from ..collectors import OutputCollector
    from ..context import TopologyContext

log = logging.getLogger(__name__)

# As Storm's WindowState: tuples per partition, and the fewest partitions kept in memory.
PARTITION_EVENTS = 1000
MIN_PARTITIONS_IN_MEMORY = 10
DEFAULT_MAX_EVENTS_IN_MEMORY = 1_000_000   # IStatefulWindowedBolt.maxEventsInMemory
# The window's namespace: the task's state namespace with this after it.
WINDOW_NAMESPACE_SUFFIX = "/window"
_PARTITIONS_KEY = "partitions"   # {"ids": [...], "next": id, "count": tuples}
_SYSTEM_KEY = "system"           # the window manager's bookkeeping
_MISSING = object()


class StatefulWindowedBolt(WindowedBolt, StatefulBolt):
    """Subclass it, implement ``init_state(state)`` and ``execute(window)``; configure its window
    as a ``WindowedBolt``'s and call ``with_persistence()``. See the module's docstring."""

    persistent = False
    max_events_in_memory = DEFAULT_MAX_EVENTS_IN_MEMORY

    def with_persistence(self) -> Self:
        """Keep the window's tuples in the state store, checkpointed with the state, and ack
        them at checkpoints."""
        self.persistent = True
        return self

    def with_max_events_in_memory(self, n: int) -> Self:
        """At most ``n`` of the window's tuples in memory (never fewer than
        ``MIN_PARTITIONS_IN_MEMORY`` partitions of ``PARTITION_EVENTS``); the rest are in the
        state store. 0 means the default, as in Storm."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TopologyError(f"max events in memory must be a whole number >= 0 (0: the "
                                f"default, {DEFAULT_MAX_EVENTS_IN_MEMORY}), got {n!r}")
        self.max_events_in_memory = n or DEFAULT_MAX_EVENTS_IN_MEMORY
        return self

    def execute(self, window: Window) -> None:   # type: ignore[override]
        raise NotImplementedError


class SpillingState(KeyValueState):
    """A ``KeyValueState`` that keeps no value once it is read or checkpointed: the window's
    partitions, which together may not fit in memory. Reads see changes at once, as a
    ``KeyValueState``'s do; ``savepoint`` is not used."""

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._pending.get(key, _MISSING)
        if value is _MISSING:
            raw_key = encode_key(key, self._pack)
            raw = (self._prepared[raw_key] if raw_key in self._prepared
                   else self._store.get(raw_key))
            return default if raw is None else decoded_value(self.namespace, key, raw_key, raw)
        return default if value is _ABSENT else value

    def put(self, key: Any, value: Any) -> None:
        self._pending[key] = value

    def delete(self, key: Any) -> None:
        self._pending[key] = _ABSENT


class EventCodec:
    """A window's event, ``(arrival ms, serial, tuple)``, as stored: the tuple's values with its
    source component, stream and task. A tuple read back is untracked (it was acked)."""

    def __init__(self, context: TopologyContext):
        self._context = context
        self._infos: dict[tuple[str, str], StreamInfo] = {}

    def encode(self, event: Event) -> list:
        ms, serial, tup = event
        return [ms, serial, tup.source_component, tup.stream, tup.source_task, list(tup.values)]

    def decode(self, raw: list) -> Event:
        ms, serial, component, stream, task, values = raw
        info = self._infos.get((component, stream))
        if info is None:
            info = StreamInfo(component, stream,
                              self._context.get_component_output_fields(component, stream))
            self._infos[component, stream] = info
        return Event(ms, serial, Tuple(values, info, task))


class WindowPartitions:
    """A window's events, oldest first, in partitions of ``PARTITION_EVENTS`` under ``state``
    (Storm's ``WindowState``): what ``WindowManager`` keeps in a deque (``append``,
    ``popleft``, ``[0]``, ``len``, iteration). At most ``capacity`` partitions are in memory,
    the least recently used written to the state when another is needed."""

    def __init__(self, state: KeyValueState, max_events: int, codec: EventCodec):
        self.state = state
        self.codec = codec
        self.capacity = max(MIN_PARTITIONS_IN_MEMORY, max_events // PARTITION_EVENTS)
        record = state.get(_PARTITIONS_KEY) or {"ids": [], "next": 0, "count": 0}
        self.ids: collections.deque[int] = collections.deque(record["ids"])
        self.next_id: int = record["next"]
        self.count: int = record["count"]
        self._cache: collections.OrderedDict[int, collections.deque] = collections.OrderedDict()
        self._dirty: set[int] = set()
        # For tests: partitions read from the state, dropped from memory to make room, and
        # written to the state when dropped (a partition unchanged since its checkpoint is not).
        self.loads = self.evictions = self.spills = 0

    def _partition(self, pid: int) -> collections.deque:
        part = self._cache.get(pid)
        if part is not None:
            self._cache.move_to_end(pid)
            return part
        raw = self.state.get(("p", pid))
        part = collections.deque(self.codec.decode(e) for e in raw or ())
        self.loads += 1
        self._keep(pid, part)
        return part

    def _keep(self, pid: int, part: collections.deque) -> None:
        self._cache[pid] = part
        while len(self._cache) > self.capacity:
            old, events = self._cache.popitem(last=False)
            self.evictions += 1
            if old in self._dirty:
                self._write(old, events)
                self.spills += 1

    def _write(self, pid: int, events: Iterable) -> None:
        self._dirty.discard(pid)
        encode = self.codec.encode
        self.state.put(("p", pid), [encode(e) for e in events])

    def append(self, event: Event) -> None:
        if self.ids:
            pid = self.ids[-1]
            part = self._partition(pid)
        if not self.ids or len(part) >= PARTITION_EVENTS:
            pid, part = self.next_id, collections.deque()
            self.next_id += 1
            self.ids.append(pid)
            self._keep(pid, part)
        part.append(event)
        self._dirty.add(pid)
        self.count += 1

    def popleft(self) -> Event:
        pid = self.ids[0]
        part = self._partition(pid)
        event = part.popleft()
        self.count -= 1
        if not part and len(self.ids) > 1:
            self.ids.popleft()
            del self._cache[pid]
            self._dirty.discard(pid)
            self.state.delete(("p", pid))
        else:
            self._dirty.add(pid)
        return event

    def __getitem__(self, index: int) -> Event:
        if index != 0 or not self.count:
            raise IndexError(f"a persistent window reads its oldest event only, not [{index}]")
        return self._partition(self.ids[0])[0]

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Event]:
        for pid in list(self.ids):
            # A copy: reading the next partition may evict this one.
            yield from list(self._partition(pid))

    def flush(self) -> None:
        """Put every changed partition and the partition list into the state (at a checkpoint's
        prepare)."""
        for pid in list(self._dirty):
            self._write(pid, self._cache[pid])
        self.state.put(_PARTITIONS_KEY, {"ids": list(self.ids), "next": self.next_id,
                                         "count": self.count})


class PersistentWindow(Window):
    """One firing of a persistent window: its tuples are read from the partitions as
    ``get_iter`` goes; ``get_new`` and ``get_expired`` are not available (as in Storm)."""

    __slots__ = ("_events",)

    def __init__(self, events: WindowPartitions, start: int, end: int):
        super().__init__([], [], [], start, end)
        self._events = events

    def get(self) -> list:
        return list(self.get_iter())

    def get_iter(self) -> Iterator:
        return (item for _ms, _serial, item in self._events)

    def get_new(self) -> list:
        raise NotImplementedError("a persistent window has no get_new() (as in Storm): keep "
                                  "what you need across windows in the state")

    def get_expired(self) -> list:
        raise NotImplementedError("a persistent window has no get_expired() (as in Storm): "
                                  "keep what you need across windows in the state")

    def __repr__(self) -> str:
        return f"PersistentWindow({len(self._events)} tuples, {self.start}..{self.end})"


class PersistentWindowManager(WindowManager):
    """``WindowManager`` over ``WindowPartitions``: tuples leaving the window are dropped (they
    were acked at a checkpoint). A firing's window reads the partitions lazily, so it is run
    (``run``) as it fires: before a later firing evicts from them, and before the tuple whose
    arrival fired it joins them."""

    def __init__(self, length: Length, sliding: Length, start_ms: int,
                 events: WindowPartitions, run: Callable[[Window], None]):
        super().__init__(length, sliding, start_ms)
        self._events = events   # type: ignore[assignment]
        self._run = run

    def _left(self, item: Any) -> None:
        pass   # acked at its checkpoint already: nothing to show expired, nothing to ack

    def _window(self, start: int, end: int, expired: list) -> None:
        self._run(PersistentWindow(self._events, start, end))   # type: ignore[arg-type]
        return None   # run already

    def system(self) -> list:
        """The bookkeeping a restored window resumes from (no record of which items are new:
        a persistent window has no ``get_new``)."""
        return [self._serial, self._added_since_fire, self._next_fire]

    def restore(self, system: list) -> None:
        if len(system) == 4:   # a checkpoint from before: it held the fired serial second
            system = [system[0], *system[2:]]
        self._serial, self._added_since_fire, self._next_fire = system


class _PersistentCollector(AnchoringCollector):
    """A persistent windowed bolt's ``self.collector``: emits unanchored unless anchors are
    given, acks nothing (the window's tuples are acked at checkpoints), refuses ``fail``."""

    def ack(self, tup: Tuple) -> None:
        """Nothing: the window's tuples are acked when their checkpoint commits."""

    def fail(self, tup: Tuple, reason: str | None = None) -> None:
        raise StateError("a persistent window's tuples are acked at checkpoints: fail() cannot "
                         "take one back")


class StatefulWindowedBoltRunner(StatefulBoltRunner):
    """The bolt a topology runs in a ``StatefulWindowedBolt``'s place: a stateful bolt's
    checkpoints, with the window's tuples and bookkeeping in them. The window's settings,
    checks, ticks and clock are a plain windowed bolt's (``windowing``)."""

    inner: StatefulWindowedBolt

    def __init__(self, bolt: StatefulWindowedBolt):
        self.inner = bolt
        self.windowing = WindowedBoltRunner(bolt)

    @property
    def bolt(self) -> StatefulWindowedBolt:
        return self.inner

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.windowing.declare_output_fields(declarer)
        declarer.declare(list(CHECKPOINT_FIELDS), stream=CHECKPOINT_STREAM)

    def get_component_configuration(self) -> dict[str, Any] | None:
        return self.windowing.get_component_configuration()

    def problems(self, component_id: str, timeout_secs: float) -> list[str]:
        """What is wrong with the stateful window of bolt ``component_id``."""
        bolt = self.inner
        if bolt.window_length is None or bolt.window_sliding is None:
            return self.windowing.problems(component_id, timeout_secs)
        if not bolt.persistent:
            return [f"stateful windowed bolt {component_id!r} needs with_persistence(): "
                    f"stormlet keeps a stateful window in the state store (Storm's form "
                    f"without persistence, with_message_id_field, is not in stormlet)"]
        if bolt.event_time:
            return [f"stateful windowed bolt {component_id!r}: event-time windows cannot be "
                    f"persisted in stormlet (use processing time: drop "
                    f"with_timestamp_field/with_timestamp_extractor)"]
        return []

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        refuse_problems(self, conf, context)
        name = namespace(context.topology_name, context.component_id, context.task_id)
        self.window_state = SpillingState(open_store(conf, context.topology_name,
                                                     name + WINDOW_NAMESPACE_SUFFIX))
        self.codec = EventCodec(context)
        self.broken: str | None = None
        # The window is restored at INITSTATE (or a rollback), once the checkpoints agree on
        # what was committed: no tuple reaches it before.
        super().prepare(conf, context, collector)

    def _bolt_collector(self, collector: OutputCollector) -> AnchoringCollector:
        return _PersistentCollector(collector)

    def _restore(self) -> None:
        """The window as committed: its partitions and bookkeeping."""
        self.partitions = WindowPartitions(self.window_state, self.inner.max_events_in_memory,
                                           self.codec)
        length, sliding = self.inner.window_length, self.inner.window_sliding
        assert length is not None and sliding is not None   # refuse_problems checked
        self.manager = PersistentWindowManager(length, sliding, self.windowing.now_ms(),
                                               self.partitions, self._run)
        system = self.window_state.get(_SYSTEM_KEY)
        if system is not None:
            self.manager.restore(system)

    def _execute_data(self, tup: Tuple) -> None:
        # The windows that fire run inside the manager's add and advance (see
        # PersistentWindowManager).
        now_ms = self.windowing.now_ms()
        if tup.is_tick():
            self.manager.advance(now_ms)
        else:
            self.hold_ack(tup)   # acked when the checkpoint holding it commits
            self.manager.add(tup, now_ms)

    def _run(self, window: Window) -> None:
        state = self.state
        state.savepoint()
        try:
            self.inner.execute(window)
        except Exception as exc:
            state.undo()
            # The window cannot be shown again as it was: roll back to the last checkpoint and
            # replay what came since.
            self.broken = f"windowed bolt raised {type(exc).__name__}: {exc}"
            log.error("stateful windowed bolt %s: %s: the next checkpoint rolls back",
                      self.component_id, self.broken)
            self.collector.report_error(exc)

    def act(self, action: str, txid: int) -> None:
        if action == PREPARE and self.initialized:
            if self.broken is not None:
                raise StateError(f"{self.broken}: rolling back")
            self.partitions.flush()
            self.window_state.put(_SYSTEM_KEY, self.manager.system())
            self.window_state.prepare_commit(txid)
        elif action == COMMIT:
            self.window_state.commit(txid)   # before the acks the bolt's commit sends
        elif action == INITSTATE and not self.initialized:
            self._restore()   # a COMMIT during recovery may have changed the committed window
        super().act(action, txid)
        if action == ROLLBACK:
            self._roll_back_window()

    def _roll_back_window(self) -> None:
        self.window_state.rollback()
        self.broken = None
        self._restore()

    def _roll_back_for_new_epoch(self) -> None:
        super()._roll_back_for_new_epoch()
        self._roll_back_window()

    def cleanup(self) -> None:
        try:
            super().cleanup()
        finally:
            self.window_state.close()

