"""Emitting in a backfill: a task's emits become Spark records addressed to the tasks (and
outputs) they go to, the tasks chosen exactly as the runtime's groupings choose them (the same
choosers, over the same task ids), so a key lands on the task index it would in streaming.

The records a runner yields, one per destination per chunk of input (``flush``; ``chunks``
describes the runs, and when they travel encoded)::

    (slot, (task index, [((subscription, source task), [values, ...]), ...]))  to consumer ``slot``
    (~k, (0, [(None, [values, ...])]))                                          to output ``k``

``slot`` is the consumer's number among the stage's consumers (``plan.RouteSpec.slot``), ``k``
the output's number in the plan (``~k`` is negative: an output never takes a consumer's slot).
The driver keeps a consumer's records (``has_slot``), drops the slot (``payload``) and, where the
grouping chose the task, partitions by the task index (``identity``): partition ``i`` is task
index ``i``. Each destination keeps its tuples in emit order, which is all the order streaming
promises (per sender and receiver).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from functools import partial
from typing import Any, Callable

import cython

from ... import groupings as g
from ...context import TopologyContext
from ...runtime import choosers
from ...runtime.protocol import DEFAULT_STREAM
from ...runtime.routing import _nobody, check_direct_task, check_stream
from ...runtime.serialization import checked
from ...tuples import StreamInfo
from .chunks import Chunks
from .plan import MERGE, NARROW, RouteSpec, StageSpec
from .shipping import LoadedTopology

# The groupings whose chooser always picks exactly one task.
ONE_TASK = frozenset((g.FIELDS, g.GLOBAL, g.SHUFFLE, g.NONE, g.LOCAL_OR_SHUFFLE, g.PARTIAL_KEY))


class _StreamOut:
    """Where one declared stream's tuples go from this task: ``send(values)`` hands them to every
    planned destination and returns the task ids, as the runtime's emit does."""

    __slots__ = ("appends", "chooser", "count", "direct", "direct_targets", "direct_tasks", "info",
                 "only_written", "output", "send")

    def __init__(self, info: StreamInfo, direct: bool):
        self.info = info
        self.direct = direct
        self.send: Callable[[list], list[int]] = _nobody
        self.direct_targets: dict[int, Callable[[list], None]] = {}   # task -> its append
        self.direct_tasks: set[int] = set()   # every task subscribed directly, planned or not
        self.output: Callable[[list], None] | None = None              # the output's append
        self.count = 0
        # What send does in its usual shapes, for emit to do without calling it: the stream goes
        # to one subscription whose chooser picks one task, and is not written (chooser and
        # appends: task -> its append); or it is only written.
        self.chooser: Callable[[list], list[int]] | None = None
        self.appends: dict[int, Callable[[list], None]] = {}
        self.only_written = False


class Emitter:
    """Turns emits into chunks of addressed tuples, choosing tasks exactly as the runtime's
    groupings do (the same choosers, over the same task ids). ``flush()`` returns what is
    gathered, as Spark records."""

    def __init__(self, loaded: LoadedTopology, stage: StageSpec, task: int, index: int,
                 context: TopologyContext):
        self.component_id = stage.component
        self.task = task
        self.registry = loaded.registry
        chunks = Chunks()
        self.flush = chunks.flush
        layout = loaded.layout
        topology = loaded.topology
        spec = topology.components[stage.component]
        rng = random.Random(os.urandom(16))
        # A consumer reading several of this stage's subscriptions gets their tuples interleaved
        # in emit order; the others get a destination that is one list.
        subscriptions = Counter(r.slot for routes in stage.routes.values() for r in routes)
        self.streams: dict[str, _StreamOut] = {}
        for stream, declaration in spec.streams.items():
            fields = list(declaration.fields)
            out = _StreamOut(StreamInfo(stage.component, stream, fields, self.registry),
                             declaration.direct)
            if stream in stage.outputs:
                out.output = chunks.appender(~stage.outputs[stream], 0, None, shared=False,
                                             encoded=stage.cached)
            for subscriber, grouping in topology.subscribers(stage.component, stream):
                if grouping.kind == g.DIRECT:
                    out.direct_tasks.update(layout.component_tasks[subscriber.id])
            sends = []
            for route in stage.routes.get(stream, ()):
                tasks = layout.component_tasks[route.consumer]
                grouping = topology.components[route.consumer].inputs[route.sub].grouping
                head = (route.sub, task)
                # appender(i): the append to its task index i. Its records leave this Python
                # worker unless they feed the next stage in place.
                appender = partial(chunks.appender, route.slot, head=head,
                                   shared=subscriptions[route.slot] > 1,
                                   encoded=stage.cached or route.mode != NARROW)
                if grouping.kind == g.DIRECT:
                    for i, t in enumerate(tasks):
                        out.direct_targets[t] = appender(i)
                    continue
                sends.append(self._send(route, grouping, stream, fields, tasks, index, appender,
                                        context, rng, out))
            out.send = _combined(sends, out.output)
            if len(sends) != 1 or out.output is not None:
                out.chooser = None     # set by _send for the one route, which is not all
            out.only_written = not sends and out.output is not None
            self.streams[stream] = out
        # The streams emit() takes without a second look: every non-direct one.
        self._plain = {s: out for s, out in self.streams.items() if not out.direct}

    def emitted(self) -> dict[str, int]:
        """Tuples emitted so far per stream, streams without any left out."""
        return {s: out.count for s, out in self.streams.items() if out.count}

    def _send(self, route: RouteSpec, grouping: g.Grouping, stream: str, fields: list[str],
              tasks: list[int], index: int, appender: Callable[[int], Callable[[list], None]],
              context: TopologyContext, rng: random.Random,
              out: _StreamOut) -> Callable[[list], list[int]]:
        if route.mode in (NARROW, MERGE):
            # NARROW: partition i feeds task i. MERGE (only ever the input, whose emits nobody
            # reads): Spark decides which task once it merges partitions.
            narrow = route.mode == NARROW
            append = appender(index if narrow else 0)
            mine = [tasks[index]] if narrow else []

            def send_here(values: list) -> list[int]:
                append(values)
                return mine
            return send_here
        # The runtime's own chooser: the same hash, over the same task ids, so a key lands on the
        # task index it would in streaming; custom and partial-key groupings keep per-emitting-
        # task state as they do there.
        made = choosers.make_chooser(grouping, fields, tasks, source_task=self.task,
                                     context=context, stream=stream, rng=rng,
                                     registry=self.registry)
        assert made is not None   # None only for DIRECT, which the caller handles
        chooser = choosers.as_function(made)
        appends = {t: appender(i) for i, t in enumerate(tasks)}
        if grouping.kind in ONE_TASK:
            out.chooser, out.appends = chooser, appends

            def send_one(values: list) -> list[int]:
                chosen = chooser(values)
                appends[chosen[0]](values)
                return chosen
            return send_one

        def send_chosen(values: list) -> list[int]:
            chosen = chooser(values)
            for t in chosen:
                appends[t](values)
            return chosen
        return send_chosen

    def _out(self, stream: str, direct: bool) -> _StreamOut:
        out = self.streams.get(stream)
        check_stream(self.component_id, stream, out, self.streams, direct)
        return out  # type: ignore[return-value]  # check_stream raised if it is None

    @cython.locals(out=_StreamOut)
    def emit(self, values: Any, anchors: Any = (), stream: str = DEFAULT_STREAM) -> list[int]:
        """Address one tuple. ``anchors`` mean nothing in a batch: nothing is tracked, nothing
        replayed."""
        out = self._plain.get(stream)
        if out is None:
            out = self._out(stream, False)
        values = checked(values, out.info, self.component_id)
        out.count += 1
        # The two usual shapes of send, inline: it costs a third of an emit as a call.
        chooser = out.chooser
        if chooser is not None:      # one subscription, one task per tuple, nothing written
            chosen = chooser(values)
            out.appends[chosen[0]](values)
            return chosen
        if out.only_written:         # written, nobody downstream
            out.output(values)  # type: ignore[misc]  # set whenever only_written is
            return []
        return out.send(values)

    def emit_direct(self, task: int, values: Any, anchors: Any = (),
                    stream: str = DEFAULT_STREAM) -> list[int]:
        out = self._out(stream, True)
        values = checked(values, out.info, self.component_id)
        check_direct_task(self.component_id, out, task)
        target = out.direct_targets.get(task)
        if target is not None:   # else its subscriber is not part of this backfill
            target(values)
        if out.output is not None:
            out.output(values)
        out.count += 1
        return [task]


def _combined(sends: list[Callable[[list], list[int]]],
              output: Callable[[list], None] | None) -> Callable[[list], list[int]]:
    if output is None:
        if not sends:
            return _nobody
        if len(sends) == 1:
            return sends[0]
        # (else the general case below)
    elif not sends:
        to_output = output

        def send_output(values: list) -> list[int]:
            to_output(values)
            return []
        return send_output

    def send_all(values: list) -> list[int]:
        tasks: list[int] = []
        for send in sends:
            tasks += send(values)
        if output is not None:
            output(values)
        return tasks
    return send_all


# ----- reading the records on the driver: small functions it composes RDDs from (module-level,
# so they pickle by name)


def identity(key: int) -> int:
    """The partitioner of a consumer's records: the task index is the partition."""
    return key


def has_slot(slot: int, record: tuple) -> bool:
    """Whether ``record`` goes to consumer (or output) ``slot``."""
    return record[0] == slot


def payload(record: tuple) -> Any:
    """A record without its slot: ``(task index, runs)``."""
    return record[1]
