"""The worker side of ``stormlet backfill``: each Spark partition runs one task of one component.

A stage is one component. Partition ``i`` of a bolt's input stands for its task index ``i`` and
holds, in order, what that task would receive in streaming. ``BoltRunner`` builds the task's bolt
as the runtime does (a deep copy of the spec's object, ``prepare`` with a context whose task id
matches), feeds ``execute`` and yields what the bolt emits, already addressed, in chunks:

    (slot, (task index, [((subscription, source task), values), ...]))   to consumer ``slot``
    (~k, (0, [values, ...]))                                              to output ``k``

``InputRunner`` does the same for the dataset standing in for a spout: its partition ``j`` is the
spout's task index ``j mod tasks``, and each record becomes the tuple the spout would emit.

    runner = BoltRunner(code, stage, tally)
    emitted = input_rdd.mapPartitionsWithIndex(runner)

What crosses from the driver is plain data and the topology's code (``TopologyCode``): executors
load the topology from that code themselves, so they never unpickle a user's class from a module
they cannot import.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .. import config as cfg
from .. import groupings as g
from ..cluster.code import MANIFEST, unpack
from ..components import BasicBolt
from ..context import TopologyContext, TopologyLayout
from ..loader import load_topology_file
from ..protocol import DEFAULT_STREAM, SYSTEM_TASK
from ..runtime.bolt_executor import TICK_INFO
from ..runtime.collector import check_stream
from ..runtime.routing import _nobody
from ..runtime.tuning import tune_for_streaming
from ..serialization import INT_MAX, INT_MIN, PLAIN_TYPES, check_values
from ..sources.offset_spout import OffsetSpout
from ..topology import ComponentSpec, Topology
from ..tuples import StreamInfo, Tuple

log = logging.getLogger(__name__)

# How a consumer's input is cut into its tasks' partitions (decided on the driver, see backfill).
ROUTE = "route"      # the grouping picks the task, as in streaming; Spark repartitions by it
NARROW = "narrow"    # shuffle-like, as many partitions as tasks: partition i feeds task i
MERGE = "merge"      # shuffle-like from the input, more partitions than tasks: Spark merges them

# Input formats: what one record of the dataset is.
LOG = "log"          # a stormlet partitioned log: each record as a LogSpout emits it
TEXT = "text"        # one message per line, into the spout stream's single field
JSONL = "jsonl"      # one JSON object (by field name) or array (by position) per line

CHUNK = 256          # input messages per hand-over to Spark (one record per destination)
SAMPLES = 5          # error messages kept per component
# Per user and private: code found here is executed.
CODE_DIR = Path(tempfile.gettempdir()) / f"stormlet-backfill-code-{os.getuid()}"


class BackfillWorkerError(RuntimeError):
    """A task cannot run on a Spark worker (its code does not load, its input cannot be read)."""


# ----- the topology's code, as shipped to the workers


@dataclass(frozen=True)
class TopologyCode:
    """The topology file and the Python files beside it (a code package, as ``stormlet submit``
    ships), broadcast to the workers, with what every task needs to agree on: the name, the
    topology instance id, the config overrides and the acker count that fixes task numbering."""

    name: str
    digest: str
    package: Any              # a Broadcast of the package's bytes
    origin: str               # the directory the code came from, for messages
    overrides: dict[str, Any]
    n_ackers: int
    topology_id: str

    def load(self) -> LoadedTopology:
        loaded = _LOADED.get(self.digest)
        if loaded is None:
            # A Python worker running bolts allocates tuples as a streaming worker does, and
            # CPython's default gen-0 threshold would collect every few hundred of them (more
            # than half the time of a word count). Spark's workers are this job's processes.
            tune_for_streaming()
            _LOADED.clear()    # one code version at a time: see _forget_other_code
            loaded = _LOADED[self.digest] = _load(self.digest, self.package.value,
                                                   self.origin)
        topology, file_conf = loaded
        return LoadedTopology(self, topology, file_conf)


# One load per worker process and code version: Python workers are reused across tasks and
# jobs.
_LOADED: dict[str, tuple[Topology, dict[str, Any]]] = {}


def _load(digest: str, package: bytes, origin: str) -> tuple[Topology, dict[str, Any]]:
    _private_code_dir()
    directory = CODE_DIR / digest
    if not directory.is_dir():
        # Unpacked aside and renamed into place: another worker process may be doing the same.
        staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=CODE_DIR))
        unpack(package, staging)
        try:
            os.rename(staging, directory)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    entry = json.loads((directory / MANIFEST).read_text())["entry"]
    _forget_other_code(directory)
    try:
        return load_topology_file(directory / entry)
    except Exception as exc:
        where = str(exc).replace(str(directory), origin)   # name the user's file, not our copy
        raise BackfillWorkerError(f"cannot load the topology on a Spark worker: {where}") from None


def _private_code_dir() -> None:
    CODE_DIR.mkdir(mode=0o700, exist_ok=True)
    st = CODE_DIR.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise BackfillWorkerError(f"{CODE_DIR} belongs to another user or is writable by others; "
                                  f"remove it (topology code is unpacked there and run)")


def _forget_other_code(keep: Path) -> None:
    # A reused worker may have imported another topology's modules: a sibling with the same
    # name (helpers.py) must come from this code, not from the cache of the last job's.
    root, mine = str(CODE_DIR.resolve()) + os.sep, str(keep.resolve())
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None) or ""
        if where.startswith(root) and not where.startswith(mine + os.sep):
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not p.startswith(root) or p == mine]


def code_digest(package: bytes) -> str:
    return hashlib.sha256(package).hexdigest()[:32]


class LoadedTopology:
    """The topology as one worker process loaded it, with the config and task numbering a
    streaming run of the same file would have."""

    def __init__(self, code: TopologyCode, topology: Topology, file_conf: dict[str, Any]):
        self.topology = topology
        self.layout = TopologyLayout(code.name, topology, code.n_ackers)
        self.conf = backfill_conf(file_conf, code.overrides, code.topology_id)

    def component_conf(self, spec: ComponentSpec) -> dict[str, Any]:
        return spec.component_conf(self.conf)


BACKFILL_KEY = "stormlet.backfill"


def backfill_conf(file_conf: dict[str, Any], overrides: dict[str, Any],
                  topology_id: str) -> dict[str, Any]:
    """The topology config as bolts see it in a backfill: the file's, the overrides, the run's
    topology id, and ``stormlet.backfill: True`` so a bolt can tell it is not live."""
    conf = cfg.merged(file_conf, overrides)
    conf[cfg.STORMLET_TOPOLOGY_ID] = topology_id
    conf[BACKFILL_KEY] = True
    return conf


# ----- the plan of one stage, as plain data


@dataclass(frozen=True)
class RouteSpec:
    """One subscription of a downstream consumer to a stream the stage emits."""

    slot: int         # the consumer's number among this stage's consumers
    consumer: str
    sub: int          # the subscription's index in the consumer's inputs
    mode: str         # ROUTE, NARROW or MERGE


@dataclass(frozen=True)
class StageSpec:
    component: str
    routes: dict[str, tuple[RouteSpec, ...]] = field(default_factory=dict)   # per stream
    outputs: dict[str, int] = field(default_factory=dict)     # stream -> output number


@dataclass(frozen=True)
class InputSpec:
    """The dataset standing in for one spout stream."""

    kind: str         # LOG, TEXT or JSONL
    path: str
    stream: str


# ----- counts, gathered through one Spark accumulator


class Tally:
    """Spark accumulator parameter for per-component counts: ``{component: {name: n,
    "emitted": {stream: n}, "samples": [error text, ...]}}``. Duck-typed as pyspark's
    ``AccumulatorParam`` so importing this module does not need pyspark."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, total: dict, more: dict) -> dict:   # pyspark's name for it
        for component, counts in more.items():
            mine = total.setdefault(component, {})
            for key, value in counts.items():
                if key == "samples":
                    mine[key] = (mine.get(key, []) + value)[:SAMPLES]
                elif key == "emitted":
                    emitted = mine.setdefault(key, {})
                    for stream, n in value.items():
                        emitted[stream] = emitted.get(stream, 0) + n
                else:
                    mine[key] = mine.get(key, 0) + value
        return total


class TaskCounts:
    __slots__ = ("executed", "acked", "failed", "errors", "reported", "bad_input", "samples")

    def __init__(self) -> None:
        self.executed = self.acked = self.failed = self.errors = self.reported = 0
        self.bad_input = 0
        self.samples: list[str] = []

    def sample(self, text: str) -> None:
        if len(self.samples) < SAMPLES:
            self.samples.append(text if len(text) <= 300 else text[:297] + "...")

    def as_dict(self, emitter: Emitter) -> dict[str, Any]:
        counts = {name: getattr(self, name) for name in self.__slots__ if name != "samples"}
        counts["tasks"] = 1
        counts["emitted"] = {s: out.count for s, out in emitter.streams.items() if out.count}
        counts["samples"] = self.samples
        return counts


# ----- emitting: the collectors' common part


class _Chunks:
    """Emitted tuples gathered per destination (a consumer's task, or an output) and handed to
    Spark as ``(slot, (task index, [item, ...]))`` by ``flush``, which the runners call after
    each chunk of input: Spark then moves and shuffles one record per chunk rather than one per
    tuple. Each destination keeps its tuples in emit order, which is all the order streaming
    promises (per sender and receiver)."""

    def __init__(self) -> None:
        self._open: list[tuple[int, int, list]] = []

    def destination(self, slot: int, index: int) -> list:
        """The list to append a destination's items to."""
        items: list = []
        self._open.append((slot, index, items))
        return items

    def flush(self) -> list:
        """The records gathered since the last flush, one per destination that has items."""
        records: list = []
        hand_over = records.append
        for slot, index, items in self._open:
            if items:
                hand_over((slot, (index, items.copy())))
                items.clear()
        return records


class _StreamOut:
    """Where one declared stream's tuples go from this task: ``send(values)`` hands them to every
    planned destination and returns the task ids, as the runtime's emit does."""

    __slots__ = ("count", "direct", "direct_targets", "direct_tasks", "info", "nfields", "output",
                 "send")

    def __init__(self, info: StreamInfo, direct: bool):
        self.info = info
        self.nfields = len(info.fields)
        self.direct = direct
        self.send: Callable[[list], list[int]] = _nobody
        self.direct_targets: dict[int, tuple[list, tuple[int, int]]] = {}  # task -> (list, head)
        self.direct_tasks: set[int] = set()   # every task subscribed directly, planned or not
        self.output: list | None = None
        self.count = 0


class Emitter:
    """Turns emits into chunks of addressed tuples, choosing tasks exactly as the runtime's
    groupings do (the same choosers, over the same task ids). ``flush()`` returns what is
    gathered, as Spark records."""

    def __init__(self, loaded: LoadedTopology, stage: StageSpec, task: int, index: int,
                 context: TopologyContext):
        self.component_id = stage.component
        self.task = task
        self._chunks = _Chunks()
        self.flush = self._chunks.flush
        layout = loaded.layout
        topology = loaded.topology
        spec = topology.components[stage.component]
        rng = random.Random(os.urandom(16))
        self.streams: dict[str, _StreamOut] = {}
        for stream, declaration in spec.streams.items():
            fields = list(declaration.fields)
            out = _StreamOut(StreamInfo(stage.component, stream, fields), declaration.direct)
            if stream in stage.outputs:
                out.output = self._chunks.destination(~stage.outputs[stream], 0)
            for subscriber, grouping in topology.subscribers(stage.component, stream):
                if grouping.kind == g.DIRECT:
                    out.direct_tasks.update(layout.component_tasks[subscriber.id])
            sends = []
            for route in stage.routes.get(stream, ()):
                tasks = layout.component_tasks[route.consumer]
                grouping = topology.components[route.consumer].inputs[route.sub].grouping
                head = (route.sub, task)
                if grouping.kind == g.DIRECT:
                    for i, t in enumerate(tasks):
                        out.direct_targets[t] = (self._chunks.destination(route.slot, i), head)
                    continue
                sends.append(self._send(route, grouping, stream, fields, tasks, index, head,
                                        context, rng))
            out.send = _combined(sends, out.output)
            self.streams[stream] = out
        # The streams emit() takes without a second look: every non-direct one.
        self._plain = {s: out for s, out in self.streams.items() if not out.direct}

    def _send(self, route: RouteSpec, grouping: g.Grouping, stream: str, fields: list[str],
              tasks: list[int], index: int, head: tuple[int, int], context: TopologyContext,
              rng: random.Random) -> Callable[[list], list[int]]:
        if route.mode in (NARROW, MERGE):
            # NARROW: partition i feeds task i. MERGE (only ever the input, whose emits nobody
            # reads): Spark decides which task once it merges partitions.
            narrow = route.mode == NARROW
            append = self._chunks.destination(route.slot, index if narrow else 0).append
            mine = [tasks[index]] if narrow else []

            def send_here(values: list) -> list[int]:
                append((head, values))
                return mine
            return send_here
        # The runtime's own chooser: the same hash, over the same task ids, so a key lands on the
        # task index it would in streaming; custom and partial-key groupings keep per-emitting-
        # task state as they do there.
        chooser = g.make_chooser(grouping, fields, tasks, source_task=self.task, context=context,
                                 stream=stream, rng=rng)
        appends = {t: self._chunks.destination(route.slot, i).append for i, t in enumerate(tasks)}

        def send_chosen(values: list) -> list[int]:
            chosen = chooser(values)
            item = (head, values)
            for t in chosen:
                appends[t](item)
            return chosen
        return send_chosen

    def _out(self, stream: str, direct: bool) -> _StreamOut:
        out = self.streams.get(stream)
        check_stream(self.component_id, stream, out, self.streams, direct)
        return out

    def _checked(self, values: Any, out: _StreamOut) -> list:
        if type(values) is not list:
            values = list(values) if isinstance(values, tuple) else values
        check_values(values, self.component_id, out.info.stream, out.info.fields)
        return values

    def emit(self, values: Any, stream: str = DEFAULT_STREAM) -> list[int]:
        # The hot path, as the runtime's: a list of plain values on a declared stream goes
        # straight out; anything else (and every error) takes the checked path.
        out = self._plain.get(stream)
        if out is None:
            out = self._out(stream, False)
        if type(values) is not list or len(values) != out.nfields:
            values = self._checked(values, out)
        else:
            for v in values:
                t = type(v)
                if t is str:
                    if not v.isascii():
                        values = self._checked(values, out)
                        break
                elif t is int:
                    if not INT_MIN <= v <= INT_MAX:
                        values = self._checked(values, out)
                        break
                elif t not in PLAIN_TYPES:
                    values = self._checked(values, out)
                    break
        out.count += 1
        return out.send(values)

    def emit_anchored(self, values: Any, anchors: Any = (),
                      stream: str = DEFAULT_STREAM) -> list[int]:
        # Anchors mean nothing in a batch: nothing is tracked, nothing replayed.
        return self.emit(values, stream)

    def emit_direct(self, task: int, values: Any, stream: str = DEFAULT_STREAM) -> list[int]:
        out = self._out(stream, True)
        values = self._checked(values, out)
        if task not in out.direct_tasks:
            raise ValueError(
                f"{self.component_id!r} emitted directly to task {task} on stream {stream!r}, "
                f"but that task does not subscribe to it with a direct grouping (tasks that do: "
                f"{sorted(out.direct_tasks)})")
        target = out.direct_targets.get(task)
        if target is not None:   # else its subscriber is not part of this backfill
            items, head = target
            items.append((head, values))
        if out.output is not None:
            out.output.append(values)
        out.count += 1
        return [task]


def _combined(sends: list[Callable[[list], list[int]]],
              output: list | None) -> Callable[[list], list[int]]:
    if output is None:
        if not sends:
            return _nobody
        if len(sends) == 1:
            return sends[0]
        # (else the general case below)
    elif not sends:
        to_output = output.append

        def send_output(values: list) -> list[int]:
            to_output(values)
            return []
        return send_output

    def send_all(values: list) -> list[int]:
        tasks: list[int] = []
        for send in sends:
            tasks += send(values)
        if output is not None:
            output.append(values)
        return tasks
    return send_all


# ----- the collectors a bolt gets


class BackfillCollector:
    """A ``Bolt``'s collector in a backfill. Emits are captured and addressed; nothing is
    tracked, so ``ack`` only counts and ``fail`` counts what streaming would have replayed."""

    def __init__(self, emitter: Emitter, counts: TaskCounts):
        self._emitter = emitter
        self._counts = counts
        self.emit = emitter.emit_anchored   # emit(values, anchors=(), stream="default")

    def emit_direct(self, task: int, values: Any, anchors: Any = (),
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._emitter.emit_direct(task, values, stream)

    def ack(self, tup: Tuple) -> None:
        self._counts.acked += 1

    def fail(self, tup: Tuple, reason: Any = None) -> None:
        self._counts.failed += 1

    def reset_timeout(self, tup: Tuple) -> None:
        pass

    def report_error(self, error: BaseException | str) -> None:
        self._counts.reported += 1
        self._counts.sample(f"{self._emitter.component_id}:{self._emitter.task} reported: "
                            f"{error}")


class BackfillBasicCollector:
    """A ``BasicBolt``'s collector in a backfill (its input is acked after ``execute``)."""

    __slots__ = ("_collector", "emit", "input")

    def __init__(self, collector: BackfillCollector):
        self._collector = collector
        self.input: Tuple | None = None
        self.emit = collector._emitter.emit     # emit(values, stream="default")

    def emit_direct(self, task: int, values: Any, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector._emitter.emit_direct(task, values, stream)

    def reset_timeout(self, tup: Tuple) -> None:
        pass

    def report_error(self, error: BaseException | str) -> None:
        self._collector.report_error(error)


# ----- running one task over one partition


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
        bolt = spec.new_instance()
        basic = BackfillBasicCollector(collector) if isinstance(bolt, BasicBolt) else None
        broken: BaseException | None = None
        try:
            if basic is not None:
                bolt.prepare(conf, context)
            else:
                bolt.prepare(conf, context, collector)
        except Exception as exc:
            broken = exc
            counts.errors += 1
            counts.sample(_error_text(f"{where} prepare raised", exc))
        yield from emitter.flush()     # what prepare emitted goes out, as in streaming

        infos = [StreamInfo(sub.source, sub.stream,
                            list(loaded.topology.components[sub.source].streams[sub.stream].fields))
                 for sub in spec.inputs]
        execute = bolt.execute
        for _task_index, chunk in records:
            counts.executed += len(chunk)
            if broken is not None:
                counts.errors += len(chunk)
                continue
            for head, values in chunk:
                tup = Tuple(values, infos[head[0]], head[1], None)
                try:
                    if basic is not None:
                        basic.input = tup
                        execute(tup, basic)
                        counts.acked += 1
                    else:
                        execute(tup)
                except Exception as exc:
                    counts.errors += 1
                    counts.sample(_error_text(f"{where} execute raised on {tup!r}", exc))
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
                counts.errors += 1
                counts.sample(_error_text(f"{where} execute raised on the final tick", exc))
        yield from emitter.flush()
        try:
            bolt.cleanup()
        except Exception as exc:
            counts.errors += 1
            counts.sample(_error_text(f"{where} cleanup raised", exc))
        if emitter.flush():
            # The runtime stops delivering before cleanup; so does a backfill.
            log.warning("%s emitted in cleanup; those tuples are dropped, as in streaming", where)
        self.tally.add({cid: counts.as_dict(emitter)})


class _BadInput(ValueError):
    pass


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
        stream = self.source.stream
        fields = list(spec.streams[stream].fields)
        emit = emitter.emit
        for n, values in enumerate(self._values(items, spec, fields, counts), 1):
            try:
                emit(values, stream)
            except (TypeError, ValueError) as exc:
                counts.bad_input += 1
                counts.sample(f"{self.source.path}: a record does not fit spout {spout!r}: {exc}")
            if n % CHUNK == 0:
                yield from emitter.flush()
        yield from emitter.flush()
        summary = counts.as_dict(emitter)
        summary["partitions"] = summary.pop("tasks")   # of the input, not the spout's tasks
        self.tally.add({spout: summary})

    def _values(self, items: Iterable, spec: ComponentSpec, fields: list[str],
                counts: TaskCounts) -> Iterator[list]:
        kind = self.source.kind
        if kind == LOG:
            # An offset spout's own translate, so each record is the tuple that spout emits.
            translate = spec.obj.translate if isinstance(spec.obj, OffsetSpout) \
                else _default_translate
            for record in read_log(self.source.path, items):
                try:
                    yield translate(record)
                except Exception as exc:
                    counts.bad_input += 1
                    counts.sample(f"{self.source.path}: partition {record.partition} offset "
                                  f"{record.offset}: translate raised {type(exc).__name__}: "
                                  f"{exc}")
            return
        decode = _decode_text if kind == TEXT else _json_decoder(fields)
        for line in items:
            if not line or line.isspace():
                continue   # as `stormlet log append` skips blank lines
            try:
                yield decode(line)
            except _BadInput as exc:
                counts.bad_input += 1
                counts.sample(f"{self.source.path}: {exc}")


def _default_translate(record: Any) -> list:
    return [record.partition, record.offset, record.key, record.value]


def _decode_text(line: str) -> list:
    return [line]


def _json_decoder(fields: list[str]) -> Callable[[str], list]:
    decode = json.JSONDecoder().decode
    n = len(fields)

    def decode_line(line: str) -> list:
        try:
            obj = decode(line)
        except ValueError as exc:
            raise _BadInput(f"a line is not JSON ({exc}): {line[:120]!r}") from None
        if type(obj) is dict:
            try:
                return [obj[f] for f in fields]
            except KeyError as exc:
                raise _BadInput(f"a line has no field {exc.args[0]!r} (the spout's fields are "
                                f"{fields}): {line[:120]!r}") from None
        if type(obj) is list and len(obj) == n:
            return obj
        raise _BadInput(f"a line is neither an object with the fields {fields} nor an array of "
                        f"{n} values: {line[:120]!r}")
    return decode_line


READ_BATCH = 2000


def read_log(path: str, items: Iterable[tuple[int, int, int]]) -> Iterator[Any]:
    """The records of a partitioned log for each ``(partition, start, end)`` item, in offset
    order: the snapshot the driver took, whatever is appended meanwhile."""
    from ..sources.partitioned_log import LogError, PartitionedLog
    from ..sources.source import SourceError

    try:
        plog = PartitionedLog(path)
    except LogError as exc:
        raise BackfillWorkerError(f"cannot read the input on a Spark worker: {exc}") from None
    try:
        for partition, start, end in items:
            offset = start
            while offset < end:
                try:
                    records = plog.read(partition, offset, min(READ_BATCH, end - offset))
                except SourceError as exc:
                    raise BackfillWorkerError(f"cannot read the input log: {exc}") from None
                if not records:
                    break
                for record in records:
                    if record.offset >= end:
                        break
                    yield record
                offset = records[-1].offset + 1
    finally:
        plog.close()


# ----- small functions the driver composes RDDs from (module-level, so they pickle by name)


def identity(key: int) -> int:
    return key


def has_slot(slot: int, record: tuple) -> bool:
    return record[0] == slot


def payload(record: tuple) -> Any:
    return record[1]


class JsonLines:
    """``mapPartitions`` function writing an output's chunks as JSON Lines: one object per
    tuple with the stream's field names. Bytes become text when they are UTF-8, else
    ``{"base64": ...}``. Each chunk becomes one Spark record of several lines (JSON text never
    holds a raw newline), so text output moves one record per chunk, not per tuple."""

    def __init__(self, fields: list[str]):
        self.fields = list(fields)

    def __call__(self, records: Iterable) -> Iterator[str]:
        encode = json_encoder()
        fields = self.fields
        for _index, chunk in records:
            lines = []
            for values in chunk:
                obj = dict(zip(fields, values))
                try:
                    lines.append(encode(obj))
                except TypeError:   # bytes as a dict key: convert everything
                    lines.append(encode(_plain(obj)))
            if lines:
                yield "\n".join(lines)


def json_encoder() -> Callable[[Any], str]:
    """Compact JSON, UTF-8 text left as it is. ``JSONEncoder.encode`` builds its C encoder on
    every call, half the cost of a small object: build it once where the C encoder exists."""
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_bytes)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    try:
        # Values were checked to be msgpack-encodable, so they hold no cycles: no markers.
        c_encode = make(None, encoder.default, json.encoder.encode_basestring, None,
                        encoder.key_separator, encoder.item_separator, False, False, True)
        join = "".join

        def encode(obj: Any) -> str:
            return join(c_encode(obj, 0))
        sample = {"a": [1, 2.5, None, True, "é"], "b": {"1": "x"}}
        if encode(sample) != encoder.encode(sample):
            return encoder.encode
        return encode
    except TypeError:     # another Python's C encoder signature
        return encoder.encode


def _bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            import base64
            return {"base64": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.decode("utf-8", "backslashreplace") if isinstance(k, bytes) else k): _plain(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return _bytes(value)
    return value
