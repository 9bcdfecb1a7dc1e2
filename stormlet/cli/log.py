"""``stormlet log``: create, append to and describe a local partitioned log.

    stormlet log create data/events --partitions 4
    seq 1000 | stormlet log append data/events                   # one message per line
    stormlet log append data/events --file users.jsonl --key-field user
    stormlet log describe data/events                            # offsets, and each spout's lag
    stormlet log check data/events                               # read it all, find any damage

``append`` checks its whole input before writing any of it (see ``sources/log_lines.py``), so a
bad line leaves the log as it was. ``describe`` shows what ``sources/log_lag.py`` works out, and
the damaged spans set aside so far (``partitioned_log/quarantine.py``); ``check`` reads every
segment to set aside any damage not found yet.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

import click

from ..sources.log_lag import CommitsUnavailable, spout_lags
from ..sources.log_lines import Appended, AppendFailed, BadLine, append_lines
from ..sources.partitioned_log import LogError, PartitionedLog, Quarantined, offsets_dir
from ..sources.partitioned_log.quarantine import offsets_text
from ..zookeeper import DEFAULT_ROOT
from .options import SECRET_OPTION, load_security


@click.group(name="log")
def log_group() -> None:
    """Create, append to and inspect a local partitioned log (what LogSpout reads)."""


def _open(path: Path) -> PartitionedLog:
    try:
        return PartitionedLog(path)
    except LogError as exc:
        raise click.ClickException(str(exc)) from None


@log_group.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--partitions", "-p", type=int, required=True, help="number of partitions")
def create(path: Path, partitions: int) -> None:
    """Create a log with N partitions in the directory PATH."""
    try:
        PartitionedLog.create(path, partitions).close()
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"created log {path} with {partitions} partitions")


@contextmanager
def _input(file: Path | None) -> Iterator[BinaryIO]:
    """The input as a file that can be read twice (stdin is copied to a temporary file)."""
    if file is not None:
        try:
            stream = open(file, "rb")
        except OSError as exc:
            raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None
        with stream:
            yield stream
        return
    with tempfile.TemporaryFile() as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        spool.seek(0)
        yield spool


def _summary(written: dict[int, Appended], sep: str = "\n  ") -> str:
    return sep.join(f"partition {p}: {a.count} (offsets {a.first}-{a.last})"
                    for p, a in sorted(written.items()))


@log_group.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="read messages from FILE (default: stdin)")
@click.option("--key-field", "-k", default=None, metavar="FIELD",
              help="each line is a JSON object; the message key is its FIELD")
@click.option("--partition", "-p", type=int, default=None,
              help="append every message to this partition (default: by key, or round-robin)")
def append(path: Path, file: Path | None, key_field: str | None, partition: int | None) -> None:
    """Append one message per line of input to the log at PATH; blank lines are skipped.

    Every line is checked before any is written: a bad line appends nothing."""
    target = _open(path)
    if partition is not None:
        try:
            target.check_partition(partition)
        except LogError as exc:
            raise click.ClickException(str(exc)) from None
    source = str(file) if file is not None else "stdin"
    started = time.monotonic()
    try:
        with _input(file) as stream:
            written = append_lines(target, stream, key_field, partition)
    except BadLine as exc:
        raise click.ClickException(f"{source}: {exc}; nothing was appended") from None
    except AppendFailed as exc:
        total = sum(a.count for a in exc.written.values())
        done = f": {_summary(exc.written, '; ')}" if exc.written else ""
        raise click.ClickException(f"appending to {path} failed: {exc}; {total} messages"
                                   f" of {source} were appended in all{done}") from None
    finally:
        target.close()
    total = sum(a.count for a in written.values())
    click.echo(f"appended {total} messages to {path} in {time.monotonic() - started:.2f}s")
    if written:
        click.echo("  " + _summary(written))


def _lost(spans: list[Quarantined], start: int, end: int) -> int:
    """Offsets from ``start`` to ``end`` that damaged spans held (retention may have passed
    some)."""
    return sum(max(0, min(q.stop, end) - max(q.first, start)) for q in spans)


def _damage_table(ranges: dict[int, tuple[int, int]], damage: dict[int, list[Quarantined]]) -> None:
    click.echo(f"{'partition':>9}  {'start':>12}  {'end':>12}  {'messages':>12}  {'lost':>8}")
    total = total_lost = 0
    for p, (start, end) in ranges.items():
        lost = _lost(damage[p], start, end)
        total += end - start - lost
        total_lost += lost
        click.echo(f"{p:>9}  {start:>12}  {end:>12}  {end - start - lost:>12}  {lost:>8}")
    click.echo(f"{'total':>9}  {'':>12}  {'':>12}  {total:>12}  {total_lost:>8}")


def _damage_lines(path: Path, damage: dict[int, list[Quarantined]],
                  ignored: dict[int, list[str]]) -> None:
    """One line per damaged span set aside and per file ignored, saying what to do."""
    for p, spans in damage.items():
        for q in spans:
            click.echo(f"partition {p}: {offsets_text(q.first, q.stop)} lost to damage in "
                       f"{q.segment} at byte {q.start} ({q.reason}); set aside in {q.path}")
    for p, names in ignored.items():
        for name in names:
            click.echo(f"partition {p}: ignored {name}: not a segment name; move it out of "
                       f"{path / f'partition-{p}'}")
    if any(damage.values()):
        click.echo("lost messages are skipped by readers; re-append them from their source "
                   "if they matter")


@log_group.command()
@click.argument("path", type=click.Path(path_type=Path))
def check(path: Path) -> None:
    """Read every record of the log at PATH, setting aside any damaged span found.

    Exits with status 1 if any damage is set aside (found now or before)."""
    target = _open(path)
    try:
        damage = {p: target.check(p) for p in range(target.partitions)}
        ranges = target.describe()
        ignored = {p: target.ignored_files(p) for p in ranges}
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        target.close()
    _damage_table(ranges, damage)
    _damage_lines(path, damage, ignored)
    if any(damage.values()):
        raise SystemExit(1)
    click.echo(f"log {path}: every segment read, no damage")


def _when(value: object) -> str:
    if isinstance(value, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    return str(value) if value is not None else "-"


@log_group.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--zk", envvar="STORMLET_ZK", default=None, metavar="HOST:PORT,...",
              help="also show the commits spouts on a cluster made to this ZooKeeper")
@click.option("--zk-root", default=DEFAULT_ROOT, show_default=True,
              help="the cluster's root node (commits are read from <root>/offsets)")
@SECRET_OPTION
def describe(path: Path, zk: str | None, zk_root: str, secret_file: str | None) -> None:
    """Show each partition's offsets, and how far each spout that reads the log has got."""
    target = _open(path)
    try:
        ranges = target.describe()
        damage = {p: target.quarantined(p) for p in ranges}
        ignored = {p: target.ignored_files(p) for p in ranges}
    except LogError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        target.close()
    click.echo(f"log {path.resolve()}: {target.partitions} partitions")
    _damage_table(ranges, damage)
    _damage_lines(path, damage, ignored)

    try:
        spouts = spout_lags(path, ranges, zk, zk_root,
                            load_security(secret_file) if zk else None)
    except CommitsUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    if not spouts:
        where = f"{offsets_dir(path)}" + (f" or in ZooKeeper at {zk}" if zk else "")
        click.echo(f"no committed offsets in {where} (no spout has read this log)")
        return
    for spout in spouts:
        click.echo(f"\nspout {spout.spout_id} (commits in {spout.where}):")
        click.echo(f"{'partition':>9}  {'committed':>12}  {'end':>12}  {'lag':>12}  committed at")
        for lag in spout.partitions:
            p = lag.partition
            if lag.end is None:
                click.echo(f"{p:>9}  {lag.committed:>12}  (the log has no partition {p})")
            elif lag.committed is None:
                click.echo(f"{p:>9}  {'none':>12}  {lag.end:>12}  {'-':>12}")
            else:
                note = f"  ({'; '.join(lag.notes)})" if lag.notes else ""
                click.echo(f"{p:>9}  {lag.committed:>12}  {lag.end:>12}  {lag.lag:>12}  "
                           f"{_when(lag.committed_at)}{note}")
        click.echo(f"{'total':>9}  {'':>12}  {'':>12}  {spout.total_lag:>12}")
