"""The replay job: the ``replay`` function, which ties the parts of the package together (finish
what earlier runs left, plan in Spark, write), and the ``ReplaySummary`` it returns.

Two replays never run on one failed-message directory at once (the manifest's lock), and the
unfinished runs of earlier calls are finished before anything new is planned: a replay that died
part-way is completed by the next one, without writing anything twice (how: ``writer``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...failed import final_files
from ...failed.files import is_legacy
from ...failed.reader import ByKeys
from ..progress import Progress
from ..session import spark_session
from .errors import ReplayError
from .manifest import Manifest, Run
from .plan import REPLAY, REPLAYED_BEFORE, UNREPLAYABLE, PlanTally, plan
from .targets import TargetSpec, open_target, parse_target
from .writer import PlanProgress, ReplayProgress, RunResult, write_run

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 20_000
PARTITION_BY = ("source", "key")
#: Seconds between the lines saying how the planning job is getting on.
PROGRESS_INTERVAL = 5.0


@dataclass
class ReplaySummary(ByKeys):
    """What a call of ``replay`` did (in a dry run: would do)."""

    target: str
    dry_run: bool
    #: Records of the failed-message log that match the filters.
    matched: int = 0
    #: Of those, older records of a message that has a later one.
    duplicates: int = 0
    #: Messages an earlier run replayed (skipped).
    replayed_before: int = 0
    #: Messages whose value is neither str nor bytes, or whose key is not str, bytes or None.
    unreplayable: int = 0
    #: Messages this call replays (or, in a dry run, would replay), not counting resumed runs.
    planned: int = 0
    #: Planned messages per (topology, component, reason kind).
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: Planned messages per target partition.
    by_partition: dict[int, int] = field(default_factory=dict)
    #: This call's new run (None in a dry run or when there was nothing to replay).
    run: RunResult | None = None
    #: Unfinished runs of earlier calls finished first (in a dry run: found, not finished).
    resumed: list[RunResult] = field(default_factory=list)
    #: Files of the log read to plan this call.
    files: int = 0
    #: Files not read again: an earlier run with the same filters planned from them (their
    #: messages were replayed then, or are older copies, or cannot be replayed).
    skipped_files: int = 0
    #: Seconds spent reading, filtering and de-duplicating the log, and writing the plan.
    plan_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def written(self) -> int:
        """Messages written by this call, resumed runs included."""
        return sum(r.written for r in ([self.run] if self.run else []) + self.resumed)


def replay(failed_dir: str | os.PathLike, target: str | TargetSpec, *,
           topology: str | None = None, component: str | None = None, reason: str | None = None,
           since: float | None = None, until: float | None = None, dry_run: bool = False,
           master: str | None = None, partition_by: str = "source",
           chunk_size: int = DEFAULT_CHUNK, timeout: float = 10.0,
           progress: Callable[[PlanProgress | ReplayProgress], None] | None = None
           ) -> ReplaySummary:
    """Replay the failed messages of ``failed_dir`` that match the filters into ``target``
    (``log:PATH`` or ``kafka://HOST:PORT/TOPIC``, or a ``TargetSpec``); see the module doc.

    Unfinished runs of earlier calls on this directory are finished first. With ``dry_run``
    nothing is written: the summary says what would be. ``master`` is the Spark master (default
    ``local[*]``; an already active session is used as it is). ``timeout`` bounds each wait for a
    Kafka broker. ``progress`` is called when planning starts and ends, and after each chunk is
    written.

    Files that an earlier run with the same filters planned from are not read again (a file of
    the log never changes once complete): so a replay with nothing new to do starts no Spark.

    Raises ``ReplayError`` (and ``SparkUnavailable``) with a message meant for the user.
    """
    started = time.monotonic()
    spec = parse_target(target) if isinstance(target, str) else target
    if partition_by not in PARTITION_BY:
        raise ValueError(f"partition_by must be one of {', '.join(PARTITION_BY)}, "
                         f"not {partition_by!r}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, not {chunk_size!r}")
    failed_dir = Path(failed_dir)
    files = _failed_files(failed_dir, topology, component)
    filters = {"topology": topology, "component": component, "reason": reason, "since": since,
               "until": until}
    summary = ReplaySummary(target=str(spec), dry_run=dry_run)
    manifest = Manifest(failed_dir)
    opened = open_target(spec, timeout)
    try:
        if not dry_run:
            manifest.lock()
            manifest.drop_unplanned()
        pending = [r for r in manifest.runs() if r.planned() and not r.finished()]
        for run in pending:
            if run.meta["target"] != str(spec):
                raise ReplayError(
                    f"replay run {run.id} to {run.meta['target']} did not finish; finish it first "
                    f"by running the replay again with --to {run.meta['target']} (it writes only "
                    f"what is missing)")
        for run in pending:
            if dry_run:
                summary.resumed.append(RunResult(run.id, run.meta["planned"]))
            else:
                log.info("replay: finishing run %s, which did not complete", run.id)
                summary.resumed.append(write_run(run, opened, progress))
        covered = manifest.covered(filters)
        new = [f for f in files if _relative(failed_dir, f) not in covered]
        summary.files, summary.skipped_files = len(new), len(files) - len(new)
        if not new:
            log.info("replay: no failed-message files in %s%s%s", failed_dir,
                     f" for topology {topology!r}" if topology else "",
                     f" that earlier runs have not planned from ({len(files)} they have)"
                     if files else "")
        else:
            with spark_session("stormlet-replay", master) as spark:
                planned = _plan(spark, manifest, failed_dir, new, filters, spec,
                                opened.partitions, partition_by, chunk_size, dry_run, summary,
                                progress)
            if planned is not None:
                summary.run = write_run(planned, opened, progress)
    finally:
        opened.close()
        manifest.unlock()
    summary.seconds = time.monotonic() - started
    return summary


def _failed_files(failed_dir: Path, topology: str | None, component: str | None) -> list[Path]:
    if not failed_dir.exists():
        raise ReplayError(f"failed-message directory {failed_dir} does not exist; pass the "
                          f"directory the spouts write failed messages to")
    if not failed_dir.is_dir():
        raise ReplayError(f"failed-message directory {failed_dir} is not a directory")
    if not os.access(failed_dir, os.R_OK | os.X_OK):
        raise ReplayError(f"failed-message directory {failed_dir} is not readable")
    try:
        files = final_files(failed_dir, topology, component)
    except OSError as exc:
        raise ReplayError(f"cannot list the failed-message log in {failed_dir}: {exc}") from None
    unreadable = [f for f in files if not os.access(f, os.R_OK)]
    if unreadable:
        raise ReplayError(f"{len(unreadable)} files of the failed-message log are not readable, "
                          f"for one {unreadable[0]}")
    legacy = [f for f in files if is_legacy(f.name)]
    if legacy:
        raise ReplayError(f"{len(legacy)} files of the failed-message log are in the JSON Lines "
                          f"format of earlier versions (for one {legacy[0]}); convert them first: "
                          f"stormlet failed convert --failed-dir {failed_dir}")
    return files


def _relative(failed_dir: Path, file: Path) -> str:
    return file.relative_to(failed_dir).as_posix()


def _plan(spark: Any, manifest: Manifest, failed_dir: Path, files: list[Path],
          filters: dict[str, Any], spec: TargetSpec, partitions: int, partition_by: str,
          chunk_size: int, dry_run: bool, summary: ReplaySummary,
          progress: Callable[[PlanProgress | ReplayProgress], None] | None) -> Run | None:
    """Fill in the summary's counts and, unless ``dry_run``, write the plan of a new run; returns
    the run (None if there is nothing to replay)."""
    began = time.monotonic()
    # Where this run sends messages (run.json records it). An earlier run that sent them alike
    # put each of this run's messages, if it planned it, in the same partition's file.
    alike = {"target": str(spec), "partition_by": partition_by, "partitions": partitions}

    def partitioned_alike(meta: dict[str, Any]) -> bool:
        return all(meta.get(key) == value for key, value in alike.items())

    earlier = [(r.plan, partitioned_alike(r.meta)) for r in manifest.runs() if r.planned()]
    size = sum(f.stat().st_size for f in files)
    log.info("replay: planning from %d files of %s (%d earlier runs)", len(files),
             manifest.path.parent, len(earlier))
    if progress is not None:
        progress(PlanProgress("planning", len(files), size, summary.skipped_files))
    run = None if dry_run else manifest.new_run()

    def report(text: str) -> None:
        if progress is not None:
            progress(PlanProgress("running", len(files), size, summary.skipped_files,
                                  detail=text))

    tally = PlanTally(spark)
    with Progress(spark, report, PROGRESS_INTERVAL, tally.so_far) as shown:
        shown.step = "counting what would be replayed" if run is None else f"planning run {run.id}"
        counts = plan(spark, files, filters, earlier, spec, partitions, partition_by,
                      None if run is None else run.plan, tally)
    status = counts.status
    summary.matched = counts.matched
    summary.duplicates = counts.matched - status[REPLAY] - status[REPLAYED_BEFORE] \
        - status[UNREPLAYABLE]
    summary.replayed_before = status[REPLAYED_BEFORE]
    summary.unreplayable = status[UNREPLAYABLE]
    summary.planned = status[REPLAY]
    _count_planned(summary, [row for row in counts.groups if row["status"] == REPLAY])
    if summary.unreplayable:
        log.warning("replay: %d messages have a payload the target cannot hold (a value that is "
                    "not str or bytes, or a key that is not str, bytes or None); they are not "
                    "replayed", summary.unreplayable)
    if run is not None and not summary.planned:
        shutil.rmtree(run.path)
        run = None
    if run is not None:
        run.commit({
            **alike, "filters": filters,
            "files": len(files), "covers": [_relative(failed_dir, f) for f in files],
            "chunk_size": chunk_size,
            "planned": summary.planned, "matched": summary.matched,
            "duplicates": summary.duplicates, "replayed_before": summary.replayed_before,
            "unreplayable": summary.unreplayable,
            "by_partition": {str(p): n for p, n in sorted(summary.by_partition.items())},
            "counts": [[t, c, r, n] for (t, c, r), n in sorted(summary.counts.items())],
        })
    summary.plan_seconds = time.monotonic() - began
    if progress is not None:
        progress(PlanProgress("planned", len(files), size, summary.skipped_files,
                              summary.matched, summary.planned, summary.plan_seconds))
    log.info("replay: %d messages to replay to %s%s, planned in %.1fs", summary.planned, spec,
             f" (run {run.id})" if run else "", summary.plan_seconds)
    return run


def _count_planned(summary: ReplaySummary, rows: list[Any]) -> None:
    for row in rows:
        summary.counts[row["topology"] or "?", row["component"] or "?", row["reason"]] += row["n"]
        summary.by_partition[row["partition"]] = (summary.by_partition.get(row["partition"], 0)
                                                  + row["n"])
