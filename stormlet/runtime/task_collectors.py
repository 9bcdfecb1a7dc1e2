# cython: binding=False
# (Compiled, the emit, emit_direct and ack that bolts and spouts call once a tuple are plain C
# methods of their types, not function objects: a call from Python then costs ~180
# instructions a word fewer in the peer word count, callgrind, benchmarks/peers/instructions.py.)
"""The runtime's collectors: ``SpoutOutputCollector`` and ``OutputCollector``
(``stormlet.collectors``) as local mode and workers run them.

Spout emit (tracked, i.e. with a ``msg_id``): draw a root id, give each destination its own edge
id, and tell the acker ``init(root, xor of those edges, spout task)``. Bolt emit anchored to input
``t``: for each destination draw an edge id, XOR it into ``t.ack_val`` and into the new tuple's
entry for every root of ``t``. Bolt ``ack(t)``: tell each root's acker ``t``'s edge XOR
``t.ack_val``. Bolts never message the acker on emit, only on ack; see ``stormlet.runtime.acker``.

Everything here runs on the owning executor's thread and only appends to that task's Transfer
buffers, so the hot path takes no locks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from time import monotonic
from typing import Any

import cython

from ..collectors import BasicOutputCollector
from ..fail_reason import ERROR, FAIL, FailReason, utf8_text
from ..hooks import EmitInfo
from ..tuples import MAX_ID, StreamInfo, Tuple, tracked, untracked
from .metrics import TaskMetrics
from .protocol import DEFAULT_STREAM, AckFail
from .rotating_map import RotatingMap
from .routing import StreamRoute, check_direct_task, check_stream
from .sampling import Sampler
from .serialization import checked
from .transfer import Transfer

log = logging.getLogger(__name__)

# Tuples whose process latency a bolt task times at once (one per batch is started).
PROCESS_SAMPLES = 64
# Roots and edges are 64-bit ids, never 0: XORing 0 into a ledger entry changes nothing, so an
# edge with id 0 would be one the acker cannot see.
ID_BITS = 64
MASK64 = MAX_ID
# What _Emitter._last_stream holds before any emit: no stream name is this object.
_NO_STREAM = object()
# An emitter's countdown to its next sample while sampling is off: no task emits this often.
_NEVER = 1 << 62
# splitmix64's constants (Steele, Lea and Flood, "Fast splittable pseudorandom number generators").
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB


@cython.final
@cython.cclass
class EdgeIds:
    """The ids of a task's roots and edges: splitmix64 from a seed out of ``os.urandom``, the
    generator Java's ``SplittableRandom`` uses (Storm draws them from ``java.util.Random``). Ids
    only need to be distinct and unpredictable enough that the XOR of unrelated edges is not 0;
    compiled, one is a few multiplications and no object. Tests give ``random_bits`` instead,
    to know the ids."""

    def __init__(self, random_bits: Callable[[int], int] | None = None):
        self._given = random_bits
        self._state = int.from_bytes(os.urandom(8), "little")

    def next(self) -> int:
        if self._given is not None:
            return self._given(ID_BITS) or 1
        self._state = (self._state + GOLDEN) & MASK64
        z = self._state
        z = ((z ^ (z >> 30)) * MIX1) & MASK64
        z = ((z ^ (z >> 27)) * MIX2) & MASK64
        return (z ^ (z >> 31)) or 1


def root_for_acker(root: int, n: int, index: int) -> int:
    """``root`` changed only in its residue mod ``n``, so that acker ``index`` of ``n`` holds it
    (an acker holds the roots ``root % n`` names). The rest of its bits stay as drawn, so it is as
    hard to guess as before, and it is never 0."""
    base = root - root % n
    if index > MASK64 - base:   # base + index would pass 2**64 - 1: the class below has room
        return base - n + index
    if base + index == 0:
        return n
    return base + index


class _Emitter:
    """What both collectors share. Each has one ``emit`` that every emit goes through
    (``emit_direct`` passes its task as ``_to_task``): one frame per emit on the hot path."""

    def __init__(self, component_id: str, task: int, routes: dict[str, StreamRoute],
                 transfer: Transfer, tracking: bool, metrics: TaskMetrics, debug: bool = False,
                 random_bits: Callable[[int], int] | None = None):
        self.component_id = component_id
        self.task = task
        self._routes = routes
        self._transfer = transfer
        self._data = transfer.data
        self._tracking = tracking and bool(transfer.acker_tasks)
        self._n_ackers = max(1, len(transfer.acker_tasks))
        self._ids = EdgeIds(random_bits)   # tests pass their own random_bits, to read the edges
        self.metrics = metrics
        metrics.count_emits_with(routes)   # each route counts its stream's emits
        self._plain_routes = {stream: route for stream, route in routes.items() if not route.direct}
        # The stream of the latest plain emit and its route: most tasks emit on one stream, and an
        # identity test costs less than a dict lookup per emit.
        self._last_stream: Any = _NO_STREAM
        self._last_route: StreamRoute | None = None
        self.logs_emits = debug
        # Tuple sampling (runtime/sampling.py), off: see sample_with.
        self.sampler = None
        self._countdown = _NEVER
        # Task hooks (stormlet/hooks.py), none: see hook_with.
        self.hooks: list | None = None
        if debug:
            # emit is each subclass's method, replaced on the instance (its __dict__, see the .pxd)
            self.emit = self._logged(self.emit)  # type: ignore[has-type]

    def sample_with(self, sampler: Any) -> None:
        """Sample this task's emits with ``sampler`` (a ``sampling.Sampler``), or stop (None).

        Every emit path (``emit``, ``emit_direct``, a basic bolt's) ends in ``_emit``, which
        counts down (a C integer, compiled) and hands the emit to ``_sample`` when the count
        runs out. Off, the count starts at _NEVER and never runs out: a decrement and a test an
        emit, where swapping in a sampling ``emit`` cost every sampled emit an attribute lookup
        in the instance's ``__dict__`` and a call more.

        Safe from another thread while the executor runs: each step below is one store, and
        a count that runs out after sampling was turned off finds no sampler (see _sample)."""
        if sampler is None:
            self._countdown = _NEVER
            self.sampler = None
        else:
            self.sampler = sampler
            self._countdown = sampler.gap()

    def hook_with(self, hooks: list) -> None:
        """Run ``hooks`` (the task's ``stormlet.hooks.TaskHook`` list, which may grow) on
        every emit: ``emit`` becomes a wrapper in this instance's ``__dict__``, as the debug
        log's is (see _choose_emit); with no hooks, the class's own emit costs nothing more."""
        self.hooks = hooks
        self._choose_emit()

    def _choose_emit(self) -> None:
        """``emit``: the class's, or hooked, then logged, as each is on. Each choice is one
        attribute store, safe from another thread: an emit under way finishes with the emit it
        looked up."""
        emit = type(self).emit.__get__(self)  # type: ignore[misc]  # the class's, as above
        if self.hooks:
            emit = self._hooked(emit)
        if self.logs_emits:
            emit = self._logged(emit)
        if self.hooks or self.logs_emits:
            self.emit = emit
        else:
            vars(self).pop("emit", None)

    def _hooked(self, emit: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self.hooks
        assert hooks is not None   # _choose_emit hooks emit only when there are hooks
        task = self.task

        def hooked_emit(values: Any, *args: Any, **kwargs: Any) -> Any:
            tasks = emit(values, *args, **kwargs)
            stream = kwargs.get("stream", args[1] if len(args) > 1 else DEFAULT_STREAM)
            info = EmitInfo(values, stream, task, tasks)
            for hook in hooks:
                hook.emit(info)
            return tasks
        return hooked_emit

    def _sample(self, values: Any, stream: str, tasks: list[int], msg_id: Any) -> None:
        """The countdown ran out: hand this emit (its tuple is the last of its first
        destination's buffer) to the sampler (a C call when compiled), and count down from the
        next gap."""
        sampler: Sampler | None = self.sampler
        if sampler is None:   # turned off meanwhile
            self._countdown = _NEVER
            return
        roots = None
        if tasks:
            tup = self._data[tasks[0]][-1]
            values = tup.values
            if tup.root:
                roots = (tup.root,)
            elif tup.many is not None:
                roots = tup.many[::2]
        self._countdown = sampler.take(values, stream, tasks, msg_id, roots)

    def _logged(self, emit: Callable[..., Any]) -> Callable[..., Any]:
        # Both collectors' emit take (values, anchors or msg_id, stream, *, _to_task).
        def logged_emit(values: Any, *args: Any, **kwargs: Any) -> Any:
            tasks = emit(values, *args, **kwargs)
            stream = kwargs.get("stream", args[1] if len(args) > 1 else DEFAULT_STREAM)
            log.info("%s:%d emitted %r on %r to tasks %s", self.component_id, self.task,
                     values, stream, list(tasks))
            return tasks
        return logged_emit

    def _route(self, stream: str, to_task: int | None) -> StreamRoute:
        """The route of an emit that is not on a plain declared stream: a direct one, or an
        error saying what is wrong."""
        route = self._routes.get(stream)
        check_stream(self.component_id, stream, route, self._routes, to_task is not None)
        return route  # type: ignore[return-value]  # check_stream raised if it is None


# What both collectors' emits do first. Functions rather than _Emitter's methods: compiled,
# a subclass calls its base's C methods through the type's table (final or not), and a function
# is a direct call; these run on every emit.

def _route_of(emitter: _Emitter, stream: str, to_task: int | None) -> StreamRoute:
    """The route of an emit on ``stream``, to ``to_task`` for ``emit_direct``. The latest plain
    (not direct) stream's route is kept: most tasks emit on one stream, and an identity test
    costs less than a dict lookup."""
    if to_task is None:
        if stream is emitter._last_stream:
            return emitter._last_route  # type: ignore[return-value]  # set with _last_stream
        route = emitter._plain_routes.get(stream)
        if route is not None:
            emitter._last_stream = stream
            emitter._last_route = route
            return route
    return emitter._route(stream, to_task)


def _tasks_of(emitter: _Emitter, route: StreamRoute, values: list,
              to_task: int | None) -> list[int]:
    """The tasks an emit of ``values`` (checked) on ``route`` goes to."""
    if to_task is None:
        return route.tasks_for(values)
    return check_direct_task(emitter.component_id, route, to_task)


@cython.freelist(1024)
@cython.final
@cython.cclass
class InFlight:
    """A spout task's entry for a tracked tuple, from emit until its verdict. (One per spout
    tuple: compiled, a C struct from a free list.)"""

    __slots__ = ("msg_id", "emitted_at", "values")

    def __init__(self, msg_id: Any, emitted_at: float, values: list):
        self.msg_id = msg_id
        self.emitted_at = emitted_at    # monotonic
        self.values = values            # kept for the failed-message log


class SpoutCollector(_Emitter):
    """The runtime's ``SpoutOutputCollector`` (see ``stormlet.collectors``)."""

    def __init__(self, *args: Any, pending: RotatingMap, dead_letters: Any,
                 local_ackers: Iterable[int] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        # The ackers (indexes into the acker tasks) in this spout's own process. When only some
        # are, each root is drawn so that one of them holds it: its init and its verdict then
        # stay inside the worker, and only the acks of bolts elsewhere cross to it. Storm hashes
        # roots over every acker, so on a cluster most of that traffic crosses between workers.
        local = list(local_ackers)
        self._local_ackers = local if 0 < len(local) < self._n_ackers else []
        self._n_local_ackers = len(self._local_ackers)
        # root -> InFlight, in the executor's rotating map (it expires them as timeouts).
        self._pending = pending
        self._dead_letters = dead_letters
        self._inits = self._transfer.inits
        self.acked_at_emit: list[Any] = []  # msg ids to ack at once when tracking is off
        self.closed = False       # set at shutdown: later emits are refused
        self.refused = 0          # emits refused since
        self.emits = 0            # on every stream: how the executor sees next_tuple emit

    def _refuse(self, values: Any) -> list[int]:
        # A spout that replays from fail() emits once for every tuple the stop fails, a
        # thousand in flight making a thousand emits: one line says so, the rest are counted
        # (see log_refused).
        self.refused += 1
        if self.refused == 1:
            log.warning("%s:%d emitted %r while the topology was stopping (a replay from fail(), "
                        "say); not sent, nor any later emit of this task: its source must give "
                        "them again", self.component_id, self.task, values)
        return []

    def log_refused(self) -> None:
        """Once the task has stopped: one line with how many emits were refused, if more than
        the one already logged."""
        if self.refused > 1:
            log.warning("%s:%d: %d emits were refused while the topology was stopping",
                        self.component_id, self.task, self.refused)

    def emit(self, values: Any, msg_id: Any = None, stream: str = DEFAULT_STREAM, *,
             _to_task: int | None = None) -> list[int]:
        return self._emit(values, msg_id, stream, _to_task)

    @cython.locals(route=StreamRoute, data=list, ids=EdgeIds, root=cython.ulonglong,
                   edge=cython.ulonglong, xor=cython.ulonglong, info=StreamInfo,
                   root_key=object, t=cython.Py_ssize_t)
    def _emit(self, values: Any, msg_id: Any, stream: str, _to_task: int | None) -> list[int]:
        # Every spout emit: emit, emit_direct (naming the task in _to_task), sampled or not.
        if self.closed:
            return self._refuse(values)
        route = _route_of(self, stream, _to_task)
        values = checked(values, route.info, self.component_id)
        tasks = _tasks_of(self, route, values, _to_task)
        info = route.info
        src = self.task
        data = self._data
        if msg_id is None or not self._tracking:
            for t in tasks:
                data[t].append(untracked(values, info, src))
            if msg_id is not None:
                self.acked_at_emit.append(msg_id)
        else:
            ids = self._ids
            root = ids.next()
            if self._n_local_ackers:
                root = root_for_acker(root, self._n_ackers, self._local_ackers[
                    (root >> 32) % self._n_local_ackers])
            xor = 0
            for t in tasks:
                edge = ids.next()
                xor ^= edge
                data[t].append(tracked(values, info, src, root, edge))
            root_key = root   # one int object, for the record and the pending map
            # An AckInit record, its fields in their declared order: a plain tuple, since the
            # NamedTuple's constructor is a Python-level call per spout tuple.
            self._inits[root % self._n_ackers].extend((root_key, xor, src))
            # Timed here, so a tuple emitted from open(), ack() or fail() is timed right too.
            self._pending.put_new(root_key, InFlight(msg_id, monotonic(), values))
        route.emitted += 1
        self.emits += 1
        self._countdown -= 1   # tuple sampling: see _Emitter.sample_with
        if self._countdown <= 0:
            self._sample(values, stream, tasks, msg_id)
        return tasks

    def emit_direct(self, task: int, values: Any, msg_id: Any = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self.emit(values, msg_id, stream, _to_task=task)

    def dead_letter(self, values: Any, msg_id: Any = None, reason: FailReason | str | None = None,
                    attempts: int = 1) -> None:
        if not isinstance(reason, FailReason):
            reason = FailReason(FAIL, self.component_id, reason or "dead-lettered by the spout")
        self._dead_letters.write(values, msg_id, reason, attempts)
        self._dead_letters.flush()


class BoltCollector(_Emitter):
    """The runtime's ``OutputCollector`` (see ``stormlet.collectors``). Every input tuple must be
    acked or failed, or its tree times out."""

    def __init__(self, *args: Any, timeout_secs: float = 30.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._acks = self._transfer.acks
        # The acks of the latest root, XORed together until another root's ack or a flush: a
        # bolt usually acks a tree's tuples one after another (the words of one sentence), and
        # this makes all but the first an XOR in place, and the run one pair for the acker.
        self._run_root = 0
        self._run_value = 0
        self._transfer.before_flush.append(self.settle_acks)
        self._fails = self._transfer.fails
        self._resets = self._transfer.resets
        # The newest sampled tuple and when its execute started: most bolts ack it before the
        # next is sampled, so an ack usually costs one identity test (see sample_process).
        self._sampled: Tuple | None = None
        self._sampled_at = 0.0
        # Older samples still unacked (a bolt holding tuples) -> start time, oldest first.
        self._started: dict[Tuple, float] = {}
        self._timeout_secs = timeout_secs
        self._process_latency = self.metrics.process_latency

    def emit(self, values: Any, anchors: Tuple | Iterable[Tuple] = (),
             stream: str = DEFAULT_STREAM, *, _to_task: int | None = None) -> list[int]:
        return self._emit(values, anchors, stream, _to_task)

    @cython.locals(route=StreamRoute, data=list, anchor=Tuple, ids=EdgeIds, root=cython.ulonglong,
                   edge=cython.ulonglong, info=StreamInfo, t=cython.Py_ssize_t)
    def _emit(self, values: Any, anchors: Any, stream: str, _to_task: int | None) -> list[int]:
        # Every bolt emit, sampled or not: emit, emit_direct (naming the task in _to_task) and a
        # basic bolt's (BasicCollector, a C call when compiled). One anchor with one root (the
        # usual case) takes the short branch; several anchors or roots are merged by _anchor.
        route = _route_of(self, stream, _to_task)
        values = checked(values, route.info, self.component_id)
        tasks = _tasks_of(self, route, values, _to_task)
        info = route.info
        src = self.task
        data = self._data
        # `type(...) is Tuple`, not truthiness: a tuple of a no-field stream has len() 0.
        if type(anchors) is not Tuple and anchors:
            if type(anchors) is not list and type(anchors) is not tuple:
                anchors = tuple(anchors)
            if len(anchors) == 1 and type(anchors[0]) is Tuple:
                anchors = anchors[0]
        if type(anchors) is Tuple:
            anchor = anchors
            root = anchor.root
            if root and self._tracking:   # one anchor with one root
                ids = self._ids
                for t in tasks:
                    edge = ids.next()
                    anchor.ack_val ^= edge
                    data[t].append(tracked(values, info, src, root, edge))
                route.emitted += 1
                self._countdown -= 1   # tuple sampling: see _Emitter.sample_with
                if self._countdown <= 0:
                    self._sample(values, stream, tasks, None)
                return tasks
            # An untracked parent has nothing to anchor to.
            anchors = (anchor,) if anchor.many is not None else None
        if anchors and self._tracking:
            merge = self._anchor
            for t in tasks:
                data[t].append(merge(values, info, src, anchors))
        else:
            for t in tasks:
                data[t].append(untracked(values, info, src))
        route.emitted += 1
        self._countdown -= 1
        if self._countdown <= 0:
            self._sample(values, stream, tasks, None)
        return tasks

    def emit_direct(self, task: int, values: Any, anchors: Tuple | Iterable[Tuple] = (),
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self.emit(values, anchors, stream, _to_task=task)

    def _anchor(self, values: Any, info: Any, src: int, parents: tuple | list) -> Tuple:
        """The child of several parents, or of a parent of several trees: a new edge from each
        parent, folded into that parent's ack value; the child's entry for a root is the XOR of
        its edges in that tree (two parents in one tree give the XOR of both)."""
        ids = self._ids
        merged: dict[int, int] = {}
        for parent in parents:
            parent_roots = parent.roots
            if parent_roots:
                edge = ids.next()
                parent.ack_val ^= edge
                for i in range(0, len(parent_roots), 2):
                    root = parent_roots[i]
                    merged[root] = merged.get(root, 0) ^ edge
        if not merged:
            return untracked(values, info, src)
        return Tuple(values, info, src, tuple(x for pair in merged.items() for x in pair))

    @cython.locals(tup=Tuple, root=cython.ulonglong, value=cython.ulonglong)
    def ack(self, tup: Tuple) -> None:
        root = tup.root
        if root:
            value = tup.edge ^ tup.ack_val
            if root == self._run_root:
                self._run_value ^= value
            else:
                self.settle_acks()
                self._run_root = root
                self._run_value = value
        elif tup.many is not None:
            roots = tup.many
            for i in range(0, len(roots), 2):
                self._add_ack(roots[i], roots[i + 1] ^ tup.ack_val)
        self.metrics.acked += 1
        if tup is self._sampled:
            self._sampled = None
            self._process_latency.record(monotonic() - self._sampled_at)
        elif self._started:
            started = self._started.pop(tup, None)
            if started is not None:
                self._process_latency.record(monotonic() - started)

    def settle_acks(self) -> None:
        """Add the latest root's combined acks to the acker's buffer (done before every flush)."""
        if self._run_root:
            self._add_ack(self._run_root, self._run_value)
            self._run_root = 0

    def _add_ack(self, root: int, value: int) -> None:
        """Add the pair ``(root, value)`` to its acker's buffer (``protocol.ack_pairs``)."""
        pairs = self._acks[root % self._n_ackers]
        # The same two numbers appended either way; compiled, as two C integers written into
        # the array's memory, with no int object.
        if cython.compiled:
            n = len(pairs)
            resize_smart(pairs, n + 2)  # type: ignore[name-defined]  # noqa: F821
            # Cython's view of an array's memory, compiled only:
            pairs.data.as_ulonglongs[n] = root  # type: ignore[attr-defined]
            pairs.data.as_ulonglongs[n + 1] = value  # type: ignore[attr-defined]
        else:
            pairs.append(root)
            pairs.append(value)

    def sample_process(self, tup: Tuple, started: float) -> None:
        """Time ``tup`` from ``started`` (its execute's start) to its ack. At most
        PROCESS_SAMPLES wait for their ack; the oldest is given up once older than the message
        timeout (its tree has timed out), so a bolt that holds tuples a while is still timed."""
        previous, previous_at = self._sampled, self._sampled_at
        self._sampled, self._sampled_at = tup, started
        if previous is None:
            return   # the common case: the last sample was acked already
        # Still unacked: it waits with the older ones if there is room (the newest sample is
        # one of the PROCESS_SAMPLES).
        waiting = self._started
        if len(waiting) >= PROCESS_SAMPLES - 1:
            oldest = next(iter(waiting))
            if started - waiting[oldest] < self._timeout_secs:
                return
            del waiting[oldest]
        waiting[previous] = previous_at

    def fail(self, tup: Tuple, reason: Any = None) -> None:
        self._fail(tup, FAIL, None if reason is None else str(reason))

    def _fail(self, tup: Tuple, kind: str, message: str | None) -> None:
        if message is not None:
            message = utf8_text(message)   # it may cross between workers, packed as UTF-8
        roots = tup.roots
        if roots:
            fails = self._fails
            n = self._n_ackers
            for root in roots[::2]:
                fails[root % n].extend(AckFail(root, kind, message))
        self.metrics.count_fail(kind, self.component_id)
        if tup is self._sampled:
            self._sampled = None
        elif self._started:
            self._started.pop(tup, None)

    def fail_with_error(self, tup: Tuple, error: BaseException) -> None:
        self._fail(tup, ERROR, f"{type(error).__name__}: {error}")

    def reset_timeout(self, tup: Tuple) -> None:
        """Tell the ackers and the spout this tuple's tree is alive: restart its timeout."""
        roots = tup.roots
        if roots:
            resets = self._resets
            n = self._n_ackers
            for root in roots[::2]:
                resets[root % n].append(root)

    def report_error(self, error: BaseException | str) -> None:
        """Report an error without failing anything: counted, logged (throttled like errors
        raised from execute) and shown by ``stormlet errors``."""
        self.metrics.errors.report("reported", error)


class BasicCollector(BasicOutputCollector):
    """The ``BasicOutputCollector`` the runtime gives a basic bolt: its emits go straight into
    its ``BoltCollector``'s emit (a C call when compiled), so a basic bolt's emit costs what an
    explicitly anchoring bolt's does. (With ``topology.debug`` the runtime gives the plain
    ``BasicOutputCollector`` instead, whose emits go through the logged ``emit``.)"""

    @cython.locals(bolt=BoltCollector)
    def emit(self, values: Any, stream: str = DEFAULT_STREAM) -> list[int]:
        bolt = self._collector
        return bolt._emit(values, self.input, stream, None)  # type: ignore[attr-defined]

    @cython.locals(bolt=BoltCollector)
    def emit_direct(self, task: int, values: Any, stream: str = DEFAULT_STREAM) -> list[int]:
        bolt = self._collector
        return bolt._emit(values, self.input, stream, task)  # type: ignore[attr-defined]
