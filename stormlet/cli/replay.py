"""``stormlet replay``: push failed messages back into the log or topic a spout reads (a PySpark
job: ``stormlet.spark.replay``).

    stormlet replay --failed-dir data/events/_failed --to log:data/events --dry-run
    stormlet replay --failed-dir data/events/_failed --to log:data/events --reason error
    stormlet replay --failed-dir failed --topology orders --since 2h --to kafka://broker:9092/orders
"""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path
from typing import Any

import click

from .failed import table
from .options import COMPONENT_OPTION, FAILED_DIR_OPTION, REASON_OPTION, TOPOLOGY_OPTION

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str, now: float | None = None) -> float:
    """Epoch seconds from ``1732323300.5``, an ISO 8601 date or time (UTC unless it names an
    offset: ``2024-11-23``, ``2024-11-23T01:02:03+01:00``), or a duration ago (``90s``, ``30m``,
    ``2h``, ``7d``)."""
    text = text.strip()
    m = _AGO.fullmatch(text)
    if m:
        return (time.time() if now is None else now) - float(m[1]) * _UNIT_SECONDS[m[2]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use epoch seconds, an ISO 8601 date or time "
                         f"(UTC unless it says otherwise), or a duration ago like 2h") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _time_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _target_option(ctx: click.Context, param: click.Parameter, value: str) -> Any:
    from ..spark.replay import parse_target

    try:
        return parse_target(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@FAILED_DIR_OPTION
@TOPOLOGY_OPTION
@COMPONENT_OPTION
@REASON_OPTION
@click.option("--since", default=None, metavar="TIME", callback=_time_option,
              help="only messages that last failed at or after TIME")
@click.option("--until", default=None, metavar="TIME", callback=_time_option,
              help="only messages that last failed before TIME")
@click.option("--to", "target", required=True, metavar="TARGET", callback=_target_option,
              help="log:PATH or kafka://HOST:PORT[,HOST:PORT...]/TOPIC")
@click.option("--dry-run", is_flag=True, help="print what would be replayed; write nothing")
@click.option("--master", default=None,
              help="Spark master (local[N], spark://host:port, ...; default: spark-submit's "
                   "--master when run by spark-submit, else local[*])")
@click.option("--partition-by", type=click.Choice(["source", "key"]), default="source",
              show_default=True,
              help="source: back to the partition the message came from (when TARGET is its "
                   "source), else by key; key: always by CRC-32 of the key")
@click.option("--chunk-size", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="messages written (and journaled) at a time")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="seconds to wait for a Kafka broker")
def replay(failed_dir: Path, topology: str | None, component: str | None, reason: str | None,
           since: float | None, until: float | None, target: Any, dry_run: bool,
           master: str | None, partition_by: str, chunk_size: int, timeout: float) -> None:
    """Replay failed messages into the log or Kafka topic a spout reads.

    Reads the failed-message log, keeps the records matching the filters, one per message (by
    source partition and offset, else by topology, component and message id; the latest failure
    wins), skips messages an earlier replay wrote, and appends the rest to TARGET:

    \b
      log:PATH                          a stormlet partitioned log (stormlet log create)
      kafka://HOST:PORT[,...]/TOPIC     a Kafka topic

    \b
    TIME (--since, --until) is epoch seconds, an ISO 8601 date or time (UTC unless it says
    otherwise), or a duration ago: 90s, 30m, 2h, 7d.

    What was replayed is recorded under FAILED_DIR/.replays/, so the same replay run twice
    writes nothing the second time, and a replay that was interrupted finishes, without
    duplicates, the next time it runs.
    """
    from ..spark.replay import PlanProgress, ReplayError, ReplayProgress
    from ..spark.replay import replay as run_replay
    from ..spark.session import SparkUnavailable, quiet_py4j

    quiet_py4j()

    def show(p: PlanProgress | ReplayProgress) -> None:
        if isinstance(p, PlanProgress):
            click.echo(_plan_line(p), err=True)
            return
        rate = f", {p.written / p.seconds:,.0f}/s" if p.seconds > 0 else ""
        click.echo(f"replay {p.run_id}: chunk {p.chunk}/{p.chunks}, {p.written:,} of "
                   f"{p.planned:,} messages written{rate}", err=True)

    try:
        summary = run_replay(failed_dir, target, topology=topology, component=component,
                             reason=reason, since=since, until=until, dry_run=dry_run,
                             master=master, partition_by=partition_by, chunk_size=chunk_size,
                             timeout=timeout, progress=show)
    except (ReplayError, SparkUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    for run in summary.resumed:
        if dry_run:
            click.echo(f"unfinished run {run.run_id} ({run.planned:,} messages) would be "
                       f"finished first")
        else:
            click.echo(f"finished interrupted run {run.run_id}: {run.written:,} messages written, "
                       f"{run.already_landed:,} were already in {summary.target}")
    verb = "would replay" if dry_run else "replayed"
    click.echo(f"{'dry run: ' if dry_run else ''}{verb} {summary.planned:,} messages to "
               f"{summary.target}" + (f" (run {summary.run.run_id})" if summary.run else "")
               + f" in {summary.seconds:.1f}s")
    click.echo(f"  {summary.matched:,} records matched, {summary.duplicates:,} older duplicates, "
               f"{summary.replayed_before:,} replayed before, "
               f"{summary.unreplayable:,} unreplayable (value not str or bytes)")
    if summary.skipped_files:
        n = summary.skipped_files
        click.echo(f"  {n:,} {'file' if n == 1 else 'files'} not read again: earlier runs with "
                   f"the same filters planned from {'it' if n == 1 else 'them'}")
    if summary.counts:
        click.echo(table(summary.counts))


def _plan_line(p: Any) -> str:
    if p.stage == "running":
        return p.detail
    if p.stage == "planning":
        skipped = (f" ({p.skipped_files:,} more were planned from by earlier runs)"
                   if p.skipped_files else "")
        return (f"planning: reading {p.files:,} files ({p.bytes / 1e6:,.1f} MB) of the "
                f"failed-message log{skipped}")
    return (f"planned: {p.planned:,} messages to write, of {p.matched:,} matching records, in "
            f"{p.seconds:.1f}s")
