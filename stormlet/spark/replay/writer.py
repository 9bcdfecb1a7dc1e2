"""Writing a run's plan to its target, chunk by chunk with each chunk journaled, and finishing a
run that crashed part-way without writing anything twice; with what a run reports as it goes
(``ReplayProgress``) and when it is done (``RunResult``).

**Crash safety.** Chunks of the plan are written one after the other, from the driver. Before a
chunk the journal records the target's end offset of each partition the chunk writes to; after it
(and after the log's fsync, or Kafka's acknowledgements) it records "done". A run that died leaves
a run without a summary; the next ``replay`` on the same failed-message directory finishes it first,
before planning anything new: done chunks are skipped, and for the chunk that was being written it
reads the target from the recorded end offsets to find what already landed (how each target tells:
``targets``), and writes only the rest.

**Why the driver writes.** The local log is a directory on the driver's machine, appended to
under per-partition file locks, and the journal must record, in order, what was written. Spark
does the heavy part (parse, filter, de-duplicate, exclude earlier runs, partition, sort) on the
executors and writes the plan; the driver then streams the plan's files a batch of rows at a
time, so a million messages never sit in memory at once, and finishing a crashed run needs no
Spark at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import ReplayError
from .manifest import Run
from .plan import read_plan
from .targets import KafkaTarget, LogTarget, Messages

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What one run wrote in this call."""

    run_id: str
    planned: int
    written: int = 0
    #: Messages found already in the target when finishing a run that had crashed.
    already_landed: int = 0
    #: Seconds spent writing (reading the plan back included).
    seconds: float = 0.0


@dataclass(frozen=True)
class PlanProgress:
    """Reported when planning starts (``stage`` "planning"), every few seconds while Spark
    plans ("running", with ``detail``: the Spark stages and their partitions done), and when it
    ends ("planned")."""

    stage: str
    files: int            # files of the log read
    bytes: int            # their size
    skipped_files: int    # files earlier runs with the same filters planned from
    matched: int = 0      # records that match the filters (when planned)
    planned: int = 0      # messages to write
    seconds: float = 0.0  # planning took
    detail: str = ""


@dataclass(frozen=True)
class ReplayProgress:
    """Reported after each chunk is written."""

    run_id: str
    chunk: int            # 1-based
    chunks: int
    written: int          # messages of the run in the target so far
    planned: int
    seconds: float        # since the run's writing started


def _chunks(runs: Iterator[tuple[int, Messages]], size: int) -> Iterator[dict[int, Messages]]:
    """The plan cut into chunks of ``size`` messages (the last may be smaller), in order, each
    as its messages per target partition."""
    chunk: dict[int, Messages] = {}
    room = size
    for partition, messages in runs:
        while len(messages):
            if len(messages) <= room:
                part, messages = messages, Messages([], [], [])
            else:
                part, messages = messages[:room], messages[room:]
            held = chunk.get(partition)
            if held is None:
                chunk[partition] = part
            else:
                held.extend(part)
            room -= len(part)
            if not room:
                yield chunk
                chunk, room = {}, size
    if chunk:
        yield chunk


def _skip(runs: Iterator[tuple[int, Messages]], n: int) -> Iterator[tuple[int, Messages]]:
    """``runs`` without their first ``n`` messages."""
    for partition, messages in runs:
        if n >= len(messages):
            n -= len(messages)
            continue
        yield partition, messages[n:] if n else messages
        n = 0


def write_run(run: Run, target: LogTarget | KafkaTarget,
              progress: Callable[[ReplayProgress], None] | None) -> RunResult:
    """Write the run's plan to the target, chunk by chunk, journaling each; finish a run that
    crashed part-way without writing anything twice."""
    began = time.monotonic()
    meta = run.meta
    planned, size = meta["planned"], meta["chunk_size"]
    chunks = -(-planned // size)
    result = RunResult(run.id, planned)
    done, started = run.journal()
    # Chunks are written in order, so the done ones are the first ones.
    first = len(done)
    if done != set(range(first)):
        raise ReplayError(f"replay run {run.path}: its journal is inconsistent (done chunks "
                          f"{sorted(done)}); inspect {run.journal_path}")
    written = first * size
    for index, groups in enumerate(_chunks(_skip(read_plan(run.plan), written), size),
                                   start=first):
        in_chunk = sum(len(msgs) for msgs in groups.values())
        to_write = groups
        resumed: dict[str, Any] = {}
        if index in started:
            ends, skip = started[index]
            remaining = {p: target.unlanded(p, ends[p], msgs[skip.get(p, 0):], run.id)
                         for p, msgs in groups.items()}
            landed = {p: len(groups[p]) - len(remaining[p]) for p in groups}
            result.already_landed += sum(landed.values())
            log.info("replay %s: chunk %d was being written when the last run stopped: %d of "
                     "its %d messages are in %s, writing the rest", run.id, index + 1,
                     sum(landed.values()), in_chunk, target.spec)
            resumed["skip"] = {str(p): n for p, n in landed.items()}
            to_write = {p: msgs for p, msgs in remaining.items() if msgs}
        # A resumed chunk journals this attempt too: if it dies as well, the next one measures
        # from here (other writers may append in between, so the landed part need not adjoin it).
        run.record(state="start", chunk=index, messages=in_chunk, at=time.time(),
                   ends={str(p): o for p, o in target.end_offsets(sorted(groups)).items()},
                   **resumed)
        for p, msgs in sorted(to_write.items()):
            target.write(p, msgs, run.id)
        spans = target.flush()
        run.record(state="done", chunk=index, at=time.time(),
                   written={str(p): [s, e] for p, (s, e) in spans.items()})
        result.written += sum(len(msgs) for msgs in to_write.values())
        written += in_chunk
        if progress is not None:
            progress(ReplayProgress(run.id, index + 1, chunks, written, planned,
                                    time.monotonic() - began))
    if written != planned:
        raise ReplayError(f"replay run {run.path}: its plan holds {written} messages, its "
                          f"run.json says {planned}; the manifest is damaged")
    run.finish({"run_id": run.id, "finished_at": time.time(), "planned": planned,
                "target": meta["target"], "written_by_last_attempt": result.written,
                "already_landed": result.already_landed, "offsets": run.written()})
    result.seconds = time.monotonic() - began
    log.info("replay %s: done, %d messages in %s in %.1fs", run.id, planned, target.spec,
             result.seconds)
    return result
