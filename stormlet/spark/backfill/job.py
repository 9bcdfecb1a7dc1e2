"""The backfill job on the driver: ``Backfill`` checks everything it can before a Spark session
starts (the topology file, the plan, the input, the code package), then ``run`` builds one RDD
per stage, upstream first, and writes the outputs.

- A stage read by several consumers (bolts or outputs) is persisted, so its bolts run once.
- Output is never half-written in the way: an existing output is refused (or, with
  ``overwrite``, removed first), and what a failed run wrote is removed.
- A failure in Spark becomes one ``BackfillError`` line (``errors.spark_failure_message``).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ... import config as cfg
from ...loader import TopologyFileError, load_topology_file
from ...runtime.engine import acker_count
from ...sources.partitioned_log import PartitionedLog
from ...topology import Topology
from ..progress import Progress
from ..uri import has_scheme, spark_uri
from .counts import Tally, processed_so_far
from .emitter import has_slot, identity, payload
from .errors import BackfillError, is_spark_failure, spark_failure_message
from .formats import LOG, JsonLines
from .inputs import InputOptions, InputSpec, check_input_fields, resolve_input
from .paths import absolute, output_paths
from .plan import MERGE, MODE_WORDS, NARROW, Plan, StageSpec, plan_backfill, stage_specs
from .runner import BoltRunner, InputRunner
from .shipping import TopologyCode, code_digest, package_code
from .text_ranges import split_ranges

log = logging.getLogger(__name__)


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
    input: InputSpec
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
        self.conf = cfg.merged(file_conf, self.overrides)
        problems = cfg.problems(self.conf)
        if problems:   # found here, not as a traceback from every Spark task
            raise BackfillError(cfg.refusal(self.name, problems))
        self.plan = plan_backfill(self.topology, spout, spout_stream, components)
        self.input = resolve_input(input, self.plan.stream)
        check_input_fields(self.topology.components[self.plan.spout], self.plan.stream,
                           self.input)
        self.package = package_code(self.file)
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
        tally = sc.accumulator({}, Tally())
        prepare_output(spark, output, overwrite)
        try:
            with Progress(spark, report, progress_interval,
                          lambda: processed_so_far(tally)) as shown:
                paths = self._execute(sc, output, tally, shown)
        except BaseException as exc:
            # What a failed job wrote is incomplete, and in the way of the next attempt. The
            # path did not exist (or was replaced), so all of it is this run's.
            _FileSystem(spark, spark_uri(output)).delete()
            if not is_spark_failure(exc):
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
        output = absolute(output)
        if has_scheme(output):
            return output      # checked through Spark, in run
        if not has_scheme(self.input.path):
            out, inp = Path(output).resolve(), Path(self.input.path).resolve()
            if out == inp or inp.is_relative_to(out) or out.is_relative_to(inp):
                raise BackfillError(f"output {output} and input {self.input.path} overlap: "
                                    f"write the output somewhere else")
        if Path(output).exists() and not overwrite:
            raise _exists(output)
        return output

    def _execute(self, sc: Any, output: str, tally: Any, shown: Progress) -> list[str]:
        topology, plan = self.topology, self.plan
        package = sc.broadcast(self.package)
        code = TopologyCode(
            name=self.name, digest=code_digest(self.package),
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
                if plan.cached(cid):
                    rdd = rdd.filter(partial(has_slot, ~k))
                fields = list(topology.components[cid].streams[stream].fields)
                shown.begin(f"writing {cid} stream {stream!r} to {path}")
                rdd.map(payload).mapPartitions(JsonLines(fields, code)).saveAsTextFile(
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

    def _build(self, sc: Any, raw: Any, rdds: dict[str, Any], stages: dict[str, StageSpec],
               modes: dict[str, str], tally: Any, code: TopologyCode) -> None:
        """Every stage's RDD into ``rdds``, upstream first."""
        from pyspark import StorageLevel

        plan = self.plan
        for cid in [plan.spout, *plan.order]:
            if cid == plan.spout:
                rdd = raw.mapPartitionsWithIndex(
                    InputRunner(code, stages[cid], self.input, tally))
            else:
                rdd = self._stage(sc, cid, rdds, stages, modes, tally, code)
            rdd.setName(f"backfill {self.name}: {cid}")
            if plan.cached(cid):
                # Read by several consumers: computed once, or its bolts would run twice. Marked
                # before anything derives from it: PySpark folds a child into an uncached
                # parent's Python function.
                rdd.persist(StorageLevel.MEMORY_AND_DISK)
            rdds[cid] = rdd

    def _stage(self, sc: Any, cid: str, rdds: dict[str, Any], stages: dict[str, StageSpec],
               modes: dict[str, str], tally: Any, code: TopologyCode) -> Any:
        plan = self.plan
        pieces = []
        for source in dict.fromkeys(e.source for e in plan.inputs(cid)):
            rdd = rdds[source]
            if plan.cached(source):
                rdd = rdd.filter(partial(has_slot, plan.consumers(source).index(cid)))
            pieces.append(rdd.map(payload))
        tasks = self.topology.components[cid].tasks
        mode = modes[cid]
        if mode == NARROW:
            rdd = pieces[0]
        elif mode == MERGE:
            rdd = pieces[0].coalesce(tasks)
        else:
            rdd = (pieces[0] if len(pieces) == 1 else sc.union(pieces)).partitionBy(
                tasks, identity)
        return rdd.mapPartitionsWithIndex(BoltRunner(code, stages[cid], tally))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _input_rdd(sc: Any, source: InputSpec, plan: Plan, topology: Topology) -> Any:
    if source.kind == LOG:
        with PartitionedLog(source.path) as plog:
            # A snapshot: what is appended while the job runs is not part of it.
            items = [(p, start, end) for p, (start, end) in sorted(plog.describe().items())]
        return sc.parallelize(items, len(items))
    first = plan.consumers(plan.spout)
    # As many partitions as the first bolt has tasks, so the spout's tuples need not move.
    wanted = topology.components[first[0]].tasks if len(first) == 1 else sc.defaultParallelism
    if source.files:
        ranges = split_ranges(list(source.files), max(1, wanted))
        return sc.parallelize(ranges, max(1, len(ranges)))
    return sc.textFile(spark_uri(source.path), minPartitions=max(1, wanted))


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
            raise _exists(output)
        log.info("removing the previous output at %s", output)
        fs.delete()


def _exists(output: str) -> BackfillError:
    return BackfillError(f"output {output} exists: choose another --output, or pass "
                         f"--overwrite to replace it")
