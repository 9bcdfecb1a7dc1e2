"""``stormlet failed``: what is in the failed-message log (the files ``stormlet.failed`` writes).

    stormlet failed ls --failed-dir failed                 # counts by topology, component, reason
    stormlet failed show --failed-dir failed --topology wc --reason error --limit 5
    stormlet failed convert --failed-dir failed            # earlier versions' JSON Lines -> Parquet
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import click

from ..fail_reason import ERROR, FAIL, TIMEOUT, FailReason
from ..failed import BadInput, read_failed, summarize, topologies
from .options import COMPONENT_OPTION, FAILED_DIR_OPTION, REASON_OPTION, TOPOLOGY_OPTION

# The reason kinds stormlet itself gives, in the order their columns are shown.
STANDARD_REASONS = (TIMEOUT, FAIL, ERROR)
# Damaged files and records named one a line; beyond this many they are only counted.
MAX_LISTED = 20


@click.group()
def failed() -> None:
    """Inspect the failed-message log: messages whose retries ran out."""


@failed.command(name="ls")
@FAILED_DIR_OPTION
@TOPOLOGY_OPTION
def ls_command(failed_dir: Path, topology: str | None) -> None:
    """Count failed messages by topology, component and reason."""
    skipped = Skipped()
    try:
        summary = summarize(failed_dir, topology=topology, on_bad=skipped)
    except OSError as exc:
        raise _directory_error(exc) from None
    if not summary.records:
        click.echo(_nothing_found(failed_dir, topology))
    else:
        click.echo(f"{failed_dir}: {_count(summary.records, 'failed message')} in "
                   f"{_count(summary.files, 'file')}, "
                   f"{_count(len(summary.by_topology()), 'topology', 'topologies')}")
        click.echo(table(summary.counts))
    if summary.in_progress:
        click.echo(f"not counted: {_count(summary.in_progress, 'in-progress file')} (being "
                   f"written, or left by a crashed writer until its task restarts)")
    skipped.summarize()


class Skipped:
    """What a command's reading skipped (``BadInput``): counted, and the first ``MAX_LISTED``
    named on stderr by ``summarize``, after the command's own output."""

    def __init__(self) -> None:
        self.files = self.records = 0
        self.listed: list[BadInput] = []

    def __call__(self, bad: BadInput) -> None:
        if bad.where is None:
            self.files += 1
        else:
            self.records += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(bad)

    def summarize(self) -> None:
        for bad in self.listed:
            click.echo(f"skipped {bad}", err=True)
        if not self.files + self.records:
            return
        what = " and ".join(_count(n, f"bad {kind}") for n, kind in
                            ((self.records, "record"), (self.files, "file")) if n)
        unlisted = self.files + self.records - len(self.listed)
        click.echo(f"skipped {what}" + (f" ({unlisted} not listed)" if unlisted else "")
                   + ": the other records are read; move damaged files out of the log to "
                     "silence this", err=True)


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def table(counts: dict[tuple[str, str, str], int]) -> str:
    """Counts by (topology, component, reason kind) as a table: a row per topology and
    component, a column per reason kind and a total, and a total row when there are
    several."""
    reasons = [*STANDARD_REASONS, *sorted({k[2] for k in counts} - set(STANDARD_REASONS))]
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for (topology, component, reason), n in counts.items():
        rows.setdefault((topology, component), {})[reason] = n
    t_width = max(len("topology"), *(len(t) for t, _ in rows)) + 2
    c_width = max(len("component"), *(len(c) for _, c in rows)) + 2
    n_width = max(9, *(len(r) + 2 for r in reasons))
    lines = [f"{'topology':<{t_width}}{'component':<{c_width}}"
             + "".join(f"{r:>{n_width}}" for r in reasons) + f"{'total':>{n_width}}"]
    for (topology, component), by_reason in sorted(rows.items()):
        lines.append(f"{topology:<{t_width}}{component:<{c_width}}"
                     + "".join(f"{by_reason.get(r, 0):>{n_width}}" for r in reasons)
                     + f"{sum(by_reason.values()):>{n_width}}")
    if len(rows) > 1:
        totals = [sum(n for k, n in counts.items() if k[2] == r) for r in reasons]
        lines.append(f"{'total':<{t_width + c_width}}" + "".join(f"{n:>{n_width}}" for n in totals)
                     + f"{sum(totals):>{n_width}}")
    return "\n".join(lines)


@failed.command()
@FAILED_DIR_OPTION
@TOPOLOGY_OPTION
@COMPONENT_OPTION
@REASON_OPTION
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True,
              help="records to show")
@click.option("--json", "as_json", is_flag=True, help="print records as stored, one JSON per line")
def show(failed_dir: Path, topology: str | None, component: str | None, reason: str | None,
         limit: int, as_json: bool) -> None:
    """Show failed messages, oldest files first."""
    skipped = Skipped()
    try:
        records = list(itertools.islice(
            read_failed(failed_dir, topology, component, reason, decode=not as_json,
                        on_bad=skipped), limit))
    except OSError as exc:
        raise _directory_error(exc) from None
    if not records:
        click.echo(_nothing_found(failed_dir, topology, component, reason))
    for i, record in enumerate(records):
        if as_json:
            click.echo(json.dumps(record, separators=(",", ":")))
        else:
            click.echo(("\n" if i else "") + _block(record))
    skipped.summarize()


@failed.command()
@FAILED_DIR_OPTION
@TOPOLOGY_OPTION
def convert(failed_dir: Path, topology: str | None) -> None:
    """Turn files of the first format (JSON Lines) into Parquet, record for record.

    Safe to run again after an interruption; replay needs it done first."""
    from ..failed import convert_legacy

    try:
        done = convert_legacy(failed_dir, topology)
    except OSError as exc:
        raise _directory_error(exc) from None
    for c in done:
        dropped = (f" ({_count(c.dropped, 'line')} that were not records dropped)"
                   if c.dropped else "")
        click.echo(f"{c.legacy.name} -> {c.parquet.name}: {_count(c.records, 'record')}{dropped}")
    click.echo(f"{_count(len(done), 'file')} converted in {failed_dir}")


def _block(record: dict[str, Any]) -> str:
    reason = record.get("reason") or {}
    source = record.get("source")
    payload = record.get("payload") or {}
    where = (f"{source['kind']} {source['name']} partition {source['partition']} "
             f"offset {source['offset']}" if source else "-")
    kind, component, message = (reason.get(k) for k in ("kind", "component", "message"))
    if kind in STANDARD_REASONS:
        why = str(FailReason(kind, component, message))
    else:  # a spout's own reason (say "poison"): FailReason's wording would hide the kind
        why = (f"{kind}" + (f" in {component!r}" if component else "")
               + (f": {message}" if message else ""))
    return "\n".join([
        f"{record.get('topology')} {record.get('component')}:{record.get('task')}  "
        f"record {record.get('record_id')}",
        f"  reason    {why}",
        f"  attempts  {record.get('attempts')}, failed first "
        f"{_when(record.get('first_failed_at'))}, last {_when(record.get('last_failed_at'))}",
        f"  message   {_short(record.get('message_id'))}",
        f"  source    {where}",
        f"  key       {_short(payload.get('key'))}",
        f"  value     {_short(payload.get('value'))}",
    ])


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    try:
        return (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
                + f".{int(t * 1000) % 1000:03d} UTC")
    except (OverflowError, OSError, ValueError):   # a year the calendar functions do not reach
        return f"{t!r} (out of range)"


def _short(value: Any, width: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width] + f"... ({len(text)} chars)"


def _nothing_found(failed_dir: Path, topology: str | None, component: str | None = None,
                   reason: str | None = None) -> str:
    filters = ", ".join(f"{name} {value!r}" for name, value in
                        (("topology", topology), ("component", component), ("reason", reason))
                        if value is not None)
    text = f"no failed messages in {failed_dir}" + (f" for {filters}" if filters else "")
    if topology is not None:
        known = topologies(failed_dir)
        text += f" (topologies with failed messages: {', '.join(known) or 'none'})"
    return text


def _directory_error(exc: OSError) -> click.ClickException:
    return click.ClickException(f"{exc}; pass the directory the spouts write failed messages to "
                                f"with --failed-dir")
