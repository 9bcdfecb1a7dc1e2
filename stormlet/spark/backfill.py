"""Backfill: run a topology's bolts over a historical dataset in Spark, so a fixed bolt can
recompute past results. For the same messages, the output equals what the streaming topology
emits, wherever that is fixed by the messages (not by timing: how tuples from different senders
interleave, wall-clock ticks, replays of failed tuples).

    from stormlet.spark.backfill import Backfill, InputOptions
    from stormlet.spark.session import spark_session

    job = Backfill("topologies/word_count.py", InputOptions("sentences.txt"))
    with spark_session("backfill", master="local[2]") as spark:
        result = job.run(spark, "out/counts")        # JSON Lines of what `count` emitted
    print(result.components["count"]["executed"])

The dataset stands in for one spout (``spout=``, needed when the topology has several): a
stormlet partitioned log (each record becomes the tuple that spout's ``translate`` makes, by
default ``partition, offset, key, value``), text (one message per line, into the spout's single
field) or JSON Lines (an object by field name, or an array by position, per line).

From that spout the topology graph is walked in order. Every bolt runs as many Spark partitions
as it has tasks, partition ``i`` being task index ``i`` with the task id, context and config a
streaming run would give it; each partition's tuples are what that task would get:

- fields, all, global, direct, partial-key and custom groupings choose tasks with the runtime's
  own choosers (the same CRC-32 hash over the same task ids), and Spark repartitions by them;
- shuffle, none and local-or-shuffle: any task will do, so partitions stay where they are when
  the counts match (or the input's are merged), else they are dealt round-robin.

Tuples are not tracked: ``ack`` is a no-op, ``fail`` is counted (streaming would replay those
messages; a backfill does not), an exception from ``execute`` is counted as an error with a
sample of its text. Bolts with ``topology.tick.tuple.freq.secs`` get one tick after their last
tuple. Bolts see ``stormlet.backfill: True`` in their config.

What is written: the tuples the leaf bolts emit (or every stream of ``components=``), one JSON
object per tuple with the stream's field names. One stream goes to ``output`` itself; several
go to ``output/<component>/<stream>``.

Spark's Python workers load the topology themselves, from its code package (the file and the
Python files beside it, as ``stormlet submit`` ships it) sent as a broadcast: nothing of the
user's classes is pickled. On a cluster the workers need stormlet (and what the topology
imports) installed. Paths without a scheme are local paths (on a cluster: a mount every worker
shares, which a partitioned log must be); give ``hdfs://``, ``s3a://`` and so on otherwise.
Refused, with the component named: a direct grouping from the spout the input replaces (only
that spout could choose the tasks) and bolts that feed each other in a cycle.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from .. import groupings as g
from ..cluster.code import CodeError, package_topology
from ..config import merged
from ..loader import TopologyFileError, load_topology_file
from ..protocol import DEFAULT_STREAM
from ..runtime.engine import acker_count
from ..sources.offset_spout import OffsetSpout
from ..sources.partitioned_log import METADATA, LogError, PartitionedLog
from ..topology import Topology
from . import bolt_runner as br

log = logging.getLogger(__name__)

FORMATS = ("auto", br.LOG, br.TEXT, br.JSONL)
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
SHUFFLE_LIKE = (g.SHUFFLE, g.NONE, g.LOCAL_OR_SHUFFLE)
LOG_FIELDS = ("partition", "offset", "key", "value")
MODE_WORDS = {br.NARROW: "input kept in place", br.MERGE: "input partitions merged",
              br.ROUTE: "input repartitioned by its grouping"}


class BackfillError(Exception):
    """A backfill that cannot run: the message names the file, component, stream or path."""


# ----- the plan: which bolts run, how their inputs are cut, what is written


@dataclass(frozen=True)
class Edge:
    source: str
    stream: str
    consumer: str
    sub: int                 # the subscription's index in the consumer's inputs
    grouping: str


@dataclass
class Plan:
    spout: str
    stream: str                          # the spout stream the dataset fills
    order: list[str]                     # the bolts that run, each after those it reads
    edges: list[Edge]
    outputs: list[tuple[str, str]]       # (component, stream) written
    notes: list[str] = field(default_factory=list)

    def consumers(self, emitter: str) -> list[str]:
        return list(dict.fromkeys(e.consumer for e in self.edges if e.source == emitter))

    def inputs(self, consumer: str) -> list[Edge]:
        return [e for e in self.edges if e.consumer == consumer]

    def uses(self, component: str) -> int:
        """How many Spark consumers a stage's records have: downstream bolts and outputs."""
        return len(self.consumers(component)) + sum(c == component for c, _ in self.outputs)


def plan_backfill(topology: Topology, spout: str | None = None, stream: str | None = None,
                  components: tuple[str, ...] | list[str] = ()) -> Plan:
    """Walk the topology from the spout the dataset replaces; raise ``BackfillError`` for what a
    backfill cannot do."""
    spout_spec = _choose_spout(topology, spout)
    spout = spout_spec.id
    stream = _choose_stream(spout_spec, stream)

    reached: set[str] = set()
    grew = True
    while grew:
        grew = False
        for spec in topology.bolts:
            if spec.id not in reached and any(_feeds(sub, spout, stream, reached)
                                               for sub in spec.inputs):
                reached.add(spec.id)
                grew = True
    if not reached:
        raise BackfillError(f"no bolt subscribes to spout {spout!r} stream {stream!r}: there is "
                            f"nothing to backfill")

    if components:
        for cid in components:
            if cid not in topology.components:
                raise BackfillError(f"there is no component {cid!r} (bolts: "
                                    f"{', '.join(sorted(b.id for b in topology.bolts))})")
            if cid not in reached:
                what = "a spout" if topology.components[cid].is_spout else \
                    f"a bolt that gets no tuples from spout {spout!r} stream {stream!r}"
                raise BackfillError(f"--component {cid!r} is {what}; choose a bolt downstream "
                                    f"of the input")
        reached = _ancestors(topology, set(components), reached)

    edges = [Edge(sub.source, sub.stream, spec.id, i, sub.grouping.kind)
             for spec in topology.bolts if spec.id in reached
             for i, sub in enumerate(spec.inputs) if _feeds(sub, spout, stream, reached)]
    for edge in edges:
        if edge.source == spout and edge.grouping == g.DIRECT:
            raise BackfillError(
                f"bolt {edge.consumer!r} subscribes to spout {spout!r} stream {stream!r} with a "
                f"direct grouping: only the spout can say which task gets each message, and the "
                f"input replaces it; backfill from a spout whose subscribers use other groupings")

    notes = []
    for spec in topology.bolts:
        if spec.id in reached:
            for sub in spec.inputs:
                if not _feeds(sub, spout, stream, reached):
                    notes.append(f"bolt {spec.id!r} also reads {sub.source!r} stream "
                                 f"{sub.stream!r}, which gets no tuples in this backfill")
    order = _upstream_first(reached, edges, spout)
    if components:
        outputs = [(cid, s) for cid in order if cid in components
                   for s in topology.components[cid].streams]
    else:
        leaves = [cid for cid in order if not any(e.source == cid for e in edges)]
        outputs = [(cid, s) for cid in leaves for s in topology.components[cid].streams]
        sinks = [cid for cid in leaves if not topology.components[cid].streams]
        if sinks:
            notes.append(f"bolts {sinks} declare no output streams: they run, nothing of theirs "
                         f"is written")
    return Plan(spout, stream, order, edges, outputs, notes)


def _choose_spout(topology: Topology, spout: str | None) -> Any:
    spouts = sorted(s.id for s in topology.spouts)
    if spout is None:
        if len(spouts) > 1:
            raise BackfillError(f"the topology has {len(spouts)} spouts ({', '.join(spouts)}): "
                                f"choose the one the input replaces with --spout")
        return topology.spouts[0]
    spec = topology.components.get(spout)
    if spec is None or not spec.is_spout:
        what = "a bolt" if spec is not None else "no such component"
        raise BackfillError(f"--spout {spout!r}: {what}; the topology's spouts are "
                            f"{', '.join(spouts)}")
    return spec


def _choose_stream(spec: Any, stream: str | None) -> str:
    streams = sorted(spec.streams)
    if stream is None:
        if DEFAULT_STREAM in spec.streams:
            stream = DEFAULT_STREAM
        elif len(streams) == 1:
            stream = streams[0]
        else:
            raise BackfillError(f"spout {spec.id!r} declares streams {streams} and no default "
                                f"stream: choose the one the input fills with --spout-stream")
    if stream not in spec.streams:
        raise BackfillError(f"spout {spec.id!r} declares no stream {stream!r} (it declares "
                            f"{streams or 'none'})")
    return stream


def _feeds(sub: Any, spout: str, stream: str, reached: set[str]) -> bool:
    return (sub.source == spout and sub.stream == stream) or sub.source in reached


def _ancestors(topology: Topology, chosen: set[str], reached: set[str]) -> set[str]:
    keep = set(chosen)
    todo = list(chosen)
    while todo:
        for sub in topology.components[todo.pop()].inputs:
            if sub.source in reached and sub.source not in keep:
                keep.add(sub.source)
                todo.append(sub.source)
    return keep


def _upstream_first(bolts: set[str], edges: list[Edge], spout: str) -> list[str]:
    waiting = {cid: {e.source for e in edges if e.consumer == cid and e.source != spout}
               for cid in bolts}
    order: list[str] = []
    while waiting:
        ready = sorted(cid for cid, sources in waiting.items() if not sources - set(order))
        if not ready:
            cycle = sorted(waiting)
            raise BackfillError(f"bolts {cycle} feed each other in a cycle: a backfill runs "
                                f"each bolt once, after those it reads")
        for cid in ready:
            order.append(cid)
            del waiting[cid]
    return order


def stage_specs(plan: Plan, topology: Topology,
                input_partitions: int) -> tuple[dict[str, br.StageSpec], dict[str, str]]:
    """Each component's stage, and how each bolt's input is cut into its tasks (``modes``)."""
    def partitions(cid: str) -> int:
        return input_partitions if cid == plan.spout else topology.components[cid].tasks

    modes: dict[str, str] = {}
    for cid in plan.order:
        inputs = plan.inputs(cid)
        tasks = topology.components[cid].tasks
        mode = br.ROUTE
        if len(inputs) == 1 and inputs[0].grouping in SHUFFLE_LIKE:
            source = inputs[0].source
            if partitions(source) == tasks:
                mode = br.NARROW
            elif source == plan.spout and partitions(source) > tasks:
                mode = br.MERGE
        modes[cid] = mode

    stages = {}
    for cid in [plan.spout, *plan.order]:
        slots = {consumer: slot for slot, consumer in enumerate(plan.consumers(cid))}
        routes: dict[str, list[br.RouteSpec]] = {}
        for e in plan.edges:
            if e.source == cid:
                routes.setdefault(e.stream, []).append(
                    br.RouteSpec(slots[e.consumer], e.consumer, e.sub, modes[e.consumer]))
        outputs = {s: k for k, (c, s) in enumerate(plan.outputs) if c == cid}
        stages[cid] = br.StageSpec(cid, {s: tuple(r) for s, r in routes.items()}, outputs)
    return stages, modes


# ----- the input


@dataclass(frozen=True)
class InputOptions:
    """Where the dataset is and what it holds (``format``: auto, log, text or jsonl)."""

    path: str
    format: str = "auto"


def _has_scheme(path: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", path) is not None


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[{")


def resolve_input(options: InputOptions, spout_stream: str) -> br.InputSpec:
    """Check a local input before any Spark starts, and settle its format. Paths with a scheme
    (``hdfs://``, ``s3a://``) and globs are left to Spark."""
    path, kind = options.path, options.format
    if kind not in FORMATS:
        raise BackfillError(f"unknown input format {kind!r} (choose from {', '.join(FORMATS)})")
    remote = _has_scheme(path) and not path.startswith("file://")
    if remote or _is_glob(path):
        if kind == br.LOG:
            raise BackfillError(f"{path}: a partitioned log must be a local (or shared) "
                                f"directory, not a URL or a pattern")
        if kind == "auto":
            kind = br.JSONL if path.lower().endswith(JSONL_SUFFIXES) else br.TEXT
        return br.InputSpec(kind, path, spout_stream)
    local = Path(path.removeprefix("file://")).absolute()
    if not local.exists():
        raise BackfillError(f"input {local}: no such file or directory")
    is_log = local.is_dir() and (local / METADATA).exists()
    if kind == "auto":
        kind = br.LOG if is_log else (br.JSONL if local.name.lower().endswith(JSONL_SUFFIXES)
                                      else br.TEXT)
    if kind == br.LOG:
        try:
            PartitionedLog(local).close()
        except LogError as exc:
            raise BackfillError(f"input {exc}") from None
    elif is_log:
        raise BackfillError(f"input {local} is a stormlet partitioned log, not {kind} files: "
                            f"use --format log (or auto)")
    else:
        files = [local] if local.is_file() else [
            p for p in sorted(local.rglob("*")) if p.is_file()
            and not any(part.startswith((".", "_")) for part in p.relative_to(local).parts)]
        if not files:
            raise BackfillError(f"input {local}: the directory holds no files")
        for p in files:
            if not os.access(p, os.R_OK):
                raise BackfillError(f"input {p}: not readable (permission denied)")
    return br.InputSpec(kind, str(local), spout_stream)


def check_input_fields(spec: Any, stream: str, source: br.InputSpec) -> None:
    """Refuse a dataset that cannot fill the spout's stream, naming the fields."""
    fields = list(spec.streams[stream].fields)
    where = f"spout {spec.id!r} stream {stream!r} has fields {fields}"
    if source.kind == br.TEXT and len(fields) != 1:
        raise BackfillError(f"{where}; a text input fills exactly one field: give JSON Lines "
                            f"(--format jsonl) with those fields")
    if source.kind == br.LOG and not isinstance(spec.obj, OffsetSpout) \
            and len(fields) != len(LOG_FIELDS):
        raise BackfillError(f"{where}; a log input gives {len(LOG_FIELDS)} values "
                            f"{list(LOG_FIELDS)} per record: give text or JSON Lines instead")


def _input_rdd(sc: Any, source: br.InputSpec, plan: Plan, topology: Topology) -> Any:
    if source.kind == br.LOG:
        with PartitionedLog(source.path) as plog:
            # A snapshot: what is appended while the job runs is not part of it.
            items = [(p, start, end) for p, (start, end) in sorted(plog.describe().items())]
        return sc.parallelize(items, len(items))
    first = plan.consumers(plan.spout)
    # As many partitions as the first bolt has tasks, so the spout's tuples need not move.
    wanted = topology.components[first[0]].tasks if len(first) == 1 else sc.defaultParallelism
    return sc.textFile(spark_uri(source.path), minPartitions=max(1, wanted))


# ----- the output


def output_paths(output: str, outputs: list[tuple[str, str]]) -> list[str]:
    if len(outputs) == 1:
        return [output]
    return [f"{output.rstrip('/')}/{quote(c, safe='')}/{quote(s, safe='')}" for c, s in outputs]


def _absolute(path: str) -> str:
    return path if _has_scheme(path) else str(Path(path).absolute())


def spark_uri(path: str) -> str:
    """What to give Spark for a path: a path without a scheme is a local path (that is how it
    was checked), not one on the cluster's default file system. Not percent-encoded: Hadoop
    parses the path itself, and a glob's ``*`` must stay one."""
    return path if _has_scheme(path) else f"file://{Path(path).absolute()}"


class _FileSystem:
    """Hadoop's file system API through Spark, so any path Spark can write is checked alike."""

    def __init__(self, spark: Any, path: str):
        jvm = spark.sparkContext._jvm
        self.path = jvm.org.apache.hadoop.fs.Path(path)
        self.fs = self.path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))

    def delete(self) -> None:
        self.fs.delete(self.path, True)


def prepare_output(spark: Any, output: str, overwrite: bool) -> None:
    """Refuse an existing output, or remove it with ``overwrite``."""
    fs = _FileSystem(spark, spark_uri(output))
    if fs.exists():
        if not overwrite:
            raise BackfillError(f"output {output} exists: choose another --output, or pass "
                                f"--overwrite to replace it")
        log.info("removing the previous output at %s", output)
        fs.delete()


# ----- progress


class Progress:
    """Reports every ``interval`` seconds while the job runs: the step, the tasks done in the
    running stages, and what the finished tasks executed so far."""

    def __init__(self, spark: Any, tally: Any, report: Callable[[str], None],
                 interval: float = 5.0):
        self._tracker = spark.sparkContext.statusTracker()
        self._tally = tally
        self._report = report
        self._interval = interval
        self._started = time.monotonic()
        self._stop = threading.Event()
        self.step = "starting"
        self._thread = threading.Thread(target=self._run, name="backfill-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def begin(self, step: str) -> None:
        self.step = step
        self._report(f"[{self.elapsed():.0f}s] {step}")

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._report(self.line())
            except Exception as exc:  # a status call racing the job's end must not kill it
                log.debug("progress: %s", exc)

    def line(self) -> str:
        tracker = self._tracker
        running = []
        for job_id in tracker.getActiveJobsIds():
            job = tracker.getJobInfo(job_id)
            stage_ids = sorted(job.stageIds) if job is not None else []
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None and stage_id in stage_ids:
                    running.append(f"Spark stage {stage_ids.index(stage_id) + 1} of "
                                   f"{len(stage_ids)}, {info.numCompletedTasks}/{info.numTasks} "
                                   f"partitions done")
        so_far = ", ".join(f"{c} {_processed(n):,}" for c, n in dict(self._tally.value).items())
        text = f"[{self.elapsed():.0f}s] {self.step}"
        if running:
            text += ": " + "; ".join(running)
        return f"{text}; finished partitions processed {so_far}" if so_far else text


def _processed(counts: dict[str, Any]) -> int:
    """Tuples a bolt executed, or messages the input emitted for a spout."""
    if counts.get("executed"):
        return int(counts["executed"])
    return sum(counts.get("emitted", {}).values())


# ----- the job


@dataclass
class OutputInfo:
    component: str
    stream: str
    path: str
    tuples: int


@dataclass
class BackfillResult:
    name: str
    spout: str
    stream: str
    input: br.InputSpec
    components: dict[str, dict[str, Any]]    # per component: tasks, executed, emitted, ...
    outputs: list[OutputInfo]
    seconds: float
    notes: list[str]

    @property
    def messages(self) -> int:
        """Messages read from the input and emitted as the spout's tuples."""
        return self.components.get(self.spout, {}).get("emitted", {}).get(self.stream, 0)

    @property
    def bad_input(self) -> int:
        return self.components.get(self.spout, {}).get("bad_input", 0)

    @property
    def errors(self) -> int:
        """Exceptions from prepare, execute or cleanup, and tuples sent to a bolt that could not
        prepare."""
        return sum(c.get("errors", 0) for c in self.components.values())

    @property
    def failed(self) -> int:
        return sum(c.get("failed", 0) for c in self.components.values())

    def samples(self) -> list[str]:
        return [text for c in self.components.values() for text in c.get("samples", [])]


class Backfill:
    """A backfill job: the topology file, the dataset, which spout it replaces and what to write.

    Everything that can be checked without Spark is checked here, so a bad argument fails
    before a session starts; ``run`` does the rest.
    """

    def __init__(self, topology_file: str | Path, input: InputOptions, *,
                 spout: str | None = None, spout_stream: str | None = None,
                 components: tuple[str, ...] | list[str] = (),
                 conf: dict[str, Any] | None = None, name: str | None = None):
        self.file = Path(topology_file)
        try:
            self.topology, file_conf = load_topology_file(self.file)
        except TopologyFileError as exc:
            raise BackfillError(str(exc)) from None
        self.name = name or self.file.stem
        self.overrides = dict(conf or {})
        self.conf = merged(file_conf, self.overrides)
        self.plan = plan_backfill(self.topology, spout, spout_stream, components)
        self.input = resolve_input(input, self.plan.stream)
        check_input_fields(self.topology.components[self.plan.spout], self.plan.stream,
                           self.input)
        try:
            self.package = package_topology(self.file)
        except CodeError as exc:
            raise BackfillError(f"{self.file}: cannot ship it to Spark's workers: {exc}") from None
        for note in self.plan.notes:
            log.warning("%s", note)

    def run(self, spark: Any, output: str, *, overwrite: bool = False,
            progress: Callable[[str], None] | None = None,
            progress_interval: float = 5.0) -> BackfillResult:
        """Run the job on ``spark`` and write to ``output``; raise ``BackfillError`` with one line
        when Spark cannot read the input, write the output or run a task."""
        output = self.check_output(output, overwrite)
        started = time.monotonic()
        sc = spark.sparkContext
        report = progress or (lambda text: log.info("%s", text))
        tally = sc.accumulator({}, br.Tally())
        prepare_output(spark, output, overwrite)
        try:
            with Progress(spark, tally, report, progress_interval) as shown:
                paths = self._execute(sc, output, tally, shown)
        except BaseException as exc:
            # What a failed job wrote is incomplete, and in the way of the next attempt. The
            # path did not exist (or was replaced), so all of it is this run's.
            _FileSystem(spark, spark_uri(output)).delete()
            if not _is_spark_failure(exc):
                raise
            raise BackfillError(spark_failure_message(exc, self.input.path)) from None
        counts = tally.value
        components = {cid: counts.get(cid, {"tasks": 0})
                      for cid in [self.plan.spout, *self.plan.order]}
        outputs = [OutputInfo(c, s, path, components[c].get("emitted", {}).get(s, 0))
                   for (c, s), path in zip(self.plan.outputs, paths)]
        return BackfillResult(self.name, self.plan.spout, self.plan.stream, self.input,
                              components, outputs, time.monotonic() - started, self.plan.notes)

    def check_output(self, output: str, overwrite: bool = False) -> str:
        """Refuse, before any Spark starts, an output that overlaps the input or (without
        ``overwrite``) a local one that exists. Returns the output as an absolute path."""
        output = _absolute(output)
        if _has_scheme(output):
            return output      # checked through Spark, in run
        if not _has_scheme(self.input.path):
            out, inp = Path(output).resolve(), Path(self.input.path).resolve()
            if out == inp or inp.is_relative_to(out) or out.is_relative_to(inp):
                raise BackfillError(f"output {output} and input {self.input.path} overlap: "
                                    f"write the output somewhere else")
        if Path(output).exists() and not overwrite:
            raise BackfillError(f"output {output} exists: choose another --output, or pass "
                                f"--overwrite to replace it")
        return output

    def _execute(self, sc: Any, output: str, tally: Any, shown: Progress) -> list[str]:
        topology, plan = self.topology, self.plan
        package = sc.broadcast(self.package)
        code = br.TopologyCode(
            name=self.name, digest=br.code_digest(self.package),
            package=package, origin=str(self.file.resolve().parent), overrides=self.overrides,
            n_ackers=acker_count(self.conf),
            topology_id=f"{self.name}-backfill-{uuid.uuid4().hex[:12]}")
        raw = _input_rdd(sc, self.input, plan, topology)
        stages, modes = stage_specs(plan, topology, raw.getNumPartitions())
        log.info("backfill %s: input %s (%s, %s) replaces spout %r; bolts: %s",
                 self.name, self.input.path, self.input.kind,
                 _plural(raw.getNumPartitions(), "partition"), plan.spout,
                 ", ".join(f"{c} ({_plural(topology.components[c].tasks, 'task')}, "
                           f"{MODE_WORDS[modes[c]]})" for c in plan.order))
        rdds: dict[str, Any] = {}
        try:
            self._build(sc, raw, rdds, stages, modes, tally, code)
            paths = output_paths(output, plan.outputs)
            for k, ((cid, stream), path) in enumerate(zip(plan.outputs, paths)):
                rdd = rdds[cid]
                if plan.uses(cid) > 1:
                    rdd = rdd.filter(partial(br.has_slot, ~k))
                fields = list(topology.components[cid].streams[stream].fields)
                shown.begin(f"writing {cid} stream {stream!r} to {path}")
                rdd.map(br.payload).mapPartitions(br.JsonLines(fields)).saveAsTextFile(
                    spark_uri(path))
            for cid in plan.order:
                if plan.uses(cid) == 0:
                    shown.begin(f"running {cid} (nothing of it is written)")
                    rdds[cid].count()
        finally:
            for rdd in rdds.values():
                rdd.unpersist()
            package.destroy()
        return paths

    def _build(self, sc: Any, raw: Any, rdds: dict[str, Any], stages: dict[str, br.StageSpec],
               modes: dict[str, str], tally: Any, code: br.TopologyCode) -> None:
        """Every stage's RDD into ``rdds``, upstream first."""
        from pyspark import StorageLevel

        plan = self.plan
        for cid in [plan.spout, *plan.order]:
            if cid == plan.spout:
                rdd = raw.mapPartitionsWithIndex(
                    br.InputRunner(code, stages[cid], self.input, tally))
            else:
                rdd = self._stage(sc, cid, rdds, stages, modes, tally, code)
            rdd.setName(f"backfill {self.name}: {cid}")
            if plan.uses(cid) > 1:
                # Read by several consumers: computed once, or its bolts would run twice. Marked
                # before anything derives from it: PySpark folds a child into an uncached
                # parent's Python function.
                rdd.persist(StorageLevel.MEMORY_AND_DISK)
            rdds[cid] = rdd

    def _stage(self, sc: Any, cid: str, rdds: dict[str, Any], stages: dict[str, br.StageSpec],
               modes: dict[str, str], tally: Any, code: br.TopologyCode) -> Any:
        plan = self.plan
        pieces = []
        for source in dict.fromkeys(e.source for e in plan.inputs(cid)):
            rdd = rdds[source]
            if plan.uses(source) > 1:
                rdd = rdd.filter(partial(br.has_slot, plan.consumers(source).index(cid)))
            pieces.append(rdd.map(br.payload))
        tasks = self.topology.components[cid].tasks
        mode = modes[cid]
        if mode == br.NARROW:
            rdd = pieces[0]
        elif mode == br.MERGE:
            rdd = pieces[0].coalesce(tasks)
        else:
            rdd = (pieces[0] if len(pieces) == 1 else sc.union(pieces)).partitionBy(
                tasks, br.identity)
        return rdd.mapPartitionsWithIndex(br.BoltRunner(code, stages[cid], tally))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# ----- Spark's failures, in one line


def _is_spark_failure(exc: BaseException) -> bool:
    kinds = []
    try:
        from py4j.protocol import Py4JError
        kinds.append(Py4JError)
        from pyspark.errors import PySparkException
        kinds.append(PySparkException)
    except ImportError:
        pass
    return isinstance(exc, tuple(kinds))


_PYTHON_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", re.M)
_JAVA_ERROR = re.compile(r"^(?:: )?(?:[\w$]+\.)+(\w+(?:Exception|Error)): (.+)$", re.M)


def spark_failure_message(exc: BaseException, input_path: str) -> str:
    """The line that says what went wrong in a failed Spark job: the worker's Python exception
    when there is one, else the Java exception's message."""
    text = str(exc)
    if "Input path does not exist" in text or "InvalidInputException" in text:
        return f"input {input_path}: no such file or directory"
    worker = [m for m in _PYTHON_ERROR.finditer(text) if m.group(1) != "PythonException"]
    if worker:
        kind, message = worker[-1].groups()
        prefix = "" if kind == "BackfillWorkerError" else f"a Spark task failed: {kind}: "
        return prefix + message.strip()
    java = _JAVA_ERROR.search(text)
    if java:
        message = java.group(2).split("; For more details see")[0].strip()
        return f"Spark failed: {java.group(1)}: {message}"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"Spark failed: {first}"
