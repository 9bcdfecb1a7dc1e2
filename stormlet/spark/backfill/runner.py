"""The worker side of ``stormlet backfill``: each Spark partition runs one task of one component.

A stage is one component. Partition ``i`` of a bolt's input stands for its task index ``i`` and
holds, in order, what that task would receive in streaming. ``BoltRunner`` builds the task's bolt
as the runtime does (a deep copy of the spec's object, ``prepare`` with a context whose task id
matches), feeds ``execute`` and yields what the bolt emits, already addressed, in chunks (the
records ``emitter`` describes).

``InputRunner`` does the same for the dataset standing in for a spout: its partition ``j`` is the
spout's task index ``j mod tasks``, and each record becomes the tuple the spout would emit.

    runner = BoltRunner(code, stage, tally)
    emitted = input_rdd.mapPartitionsWithIndex(runner)

What crosses from the driver is plain data and the topology's code (``shipping.TopologyCode``):
executors load the topology from that code themselves, so they never unpickle a user's class
from a module they cannot import.
"""

from __future__ import annotations

import logging
from itertools import chain
from typing import Any, Iterable, Iterator

from ... import config as cfg
from ...collectors import BasicOutputCollector
from ...components import BasicBolt
from ...context import TopologyContext
from ...runtime.bolt_executor import TICK_INFO
from ...runtime.protocol import SYSTEM_TASK
from ...tuples import StreamInfo, Tuple
from .bolt_collector import BackfillCollector
from .chunks import decoded
from .counts import TaskCounts
from .emitter import Emitter
from .formats import log_translate, read_values
from .inputs import InputSpec
from .plan import StageSpec
from .shipping import TopologyCode
from .text_ranges import read_lines

log = logging.getLogger(__name__)

CHUNK = 256          # input messages per hand-over to Spark (one record per destination)


def _error_text(where: str, exc: BaseException) -> str:
    return f"{where}: {type(exc).__name__}: {exc}"


class BoltRunner:
    """``mapPartitionsWithIndex`` function running task index ``i`` of a bolt over partition
    ``i``: prepare, execute every tuple in order, one tick at the end if the bolt asks for
    ticks, cleanup. An exception from ``execute`` is counted as an error (with a sample of its
    text) and the task goes on, as in streaming; a bolt whose ``prepare`` raised counts that and
    every tuple sent to it as errors."""

    def __init__(self, code: TopologyCode, stage: StageSpec, tally: Any):
        self.code = code
        self.stage = stage
        self.tally = tally

    def __call__(self, index: int, records: Iterable) -> Iterator:
        loaded = self.code.load()
        cid = self.stage.component
        spec = loaded.topology.components[cid]
        task = loaded.layout.component_tasks[cid][index]
        conf = loaded.component_conf(spec)
        context = TopologyContext(loaded.layout, task, conf)
        emitter = Emitter(loaded, self.stage, task, index, context)
        counts = TaskCounts()
        collector = BackfillCollector(emitter, counts)
        where = f"{cid}:{task}"
        bolt: Any = spec.new_instance()   # a Bolt or a BasicBolt
        basic = BasicOutputCollector(collector) if isinstance(bolt, BasicBolt) else None
        broken: BaseException | None = None
        try:
            if basic is not None:
                bolt.prepare(conf, context)
            else:
                bolt.prepare(conf, context, collector)
        except Exception as exc:
            broken = exc
            counts.error(_error_text(f"{where} prepare raised", exc))
        yield from emitter.flush()     # what prepare emitted goes out, as in streaming

        infos = [StreamInfo(sub.source, sub.stream,
                            list(loaded.topology.components[sub.source].streams[sub.stream].fields))
                 for sub in spec.inputs]
        execute = bolt.execute
        for _task_index, runs in records:
            for (sub, source_task), chunk in decoded(runs):
                counts.executed += len(chunk)
                if broken is not None:
                    counts.errors += len(chunk)
                    continue
                info = infos[sub]
                for values in chunk:
                    tup = Tuple(values, info, source_task, None)
                    try:
                        if basic is not None:
                            basic.input = tup
                            execute(tup, basic)
                            counts.acked += 1
                        else:
                            execute(tup)
                    except Exception as exc:
                        counts.error(_error_text(f"{where} execute raised on {tup!r}", exc))
            yield from emitter.flush()

        tick_secs = conf.get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS)
        if tick_secs and broken is None:
            # No clock runs in a backfill: one tick after the last tuple, so whatever a bolt
            # emits or flushes on a tick covers all of its input.
            tick = Tuple([tick_secs], TICK_INFO, SYSTEM_TASK, None)
            try:
                if basic is not None:
                    basic.input = tick
                    execute(tick, basic)
                else:
                    execute(tick)
            except Exception as exc:
                counts.error(_error_text(f"{where} execute raised on the final tick", exc))
        yield from emitter.flush()
        try:
            bolt.cleanup()
        except Exception as exc:
            counts.error(_error_text(f"{where} cleanup raised", exc))
        if emitter.flush():
            # The runtime stops delivering before cleanup; so does a backfill.
            log.warning("%s emitted in cleanup; those tuples are dropped, as in streaming", where)
        self.tally.add({cid: counts.as_dict(emitter.emitted())})


class InputRunner:
    """``mapPartitionsWithIndex`` function turning a partition of the dataset into the tuples of
    the spout it stands for (spout task index ``j mod tasks`` for partition ``j``), routed to
    the spout's subscribers. A record that does not fit the spout's fields is counted as bad
    input (with a sample) and skipped."""

    def __init__(self, code: TopologyCode, stage: StageSpec, source: InputSpec, tally: Any):
        self.code = code
        self.stage = stage
        self.source = source
        self.tally = tally

    def __call__(self, index: int, items: Iterable) -> Iterator:
        loaded = self.code.load()
        spout = self.stage.component
        spec = loaded.topology.components[spout]
        tasks = loaded.layout.component_tasks[spout]
        task = tasks[index % len(tasks)]
        conf = loaded.component_conf(spec)
        context = TopologyContext(loaded.layout, task, conf)
        emitter = Emitter(loaded, self.stage, task, index, context)
        counts = TaskCounts()
        source = self.source
        stream = source.stream
        fields = list(spec.streams[stream].fields)
        emit = emitter.emit
        if source.files:    # byte ranges of the input's files: read here, not by Spark
            items = read_lines(chain.from_iterable(items))
        records = read_values(source.kind, source.path, items, fields, log_translate(spec),
                              counts.bad_record)
        for n, values in enumerate(records, 1):
            try:
                emit(values, stream=stream)
            except (TypeError, ValueError) as exc:
                counts.bad_record(f"{source.path}: a record does not fit spout {spout!r}: {exc}")
            if n % CHUNK == 0:
                yield from emitter.flush()
        yield from emitter.flush()
        summary = counts.as_dict(emitter.emitted())
        summary["partitions"] = summary.pop("tasks")   # of the input, not the spout's tasks
        self.tally.add({spout: summary})

