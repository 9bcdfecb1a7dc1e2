"""Reading the failed-message log without Spark: records filtered by topology, component, reason
and time, and counts of them (what ``stormlet failed ls|show`` print)."""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import unquote

from .columnar import read_table, table_records
from .files import file_safe, is_final, is_inprogress, is_legacy, topology_dir
from .parse import FIELDS, BadInput, OnBad, RecordError, check_record, parse_line

log = logging.getLogger(__name__)


def _require_dir(directory: Path) -> None:
    if not directory.exists():
        raise FileNotFoundError(f"failed-message directory {directory} does not exist")
    if not directory.is_dir():
        raise NotADirectoryError(f"failed-message directory {directory} is not a directory")


def _topology_dirs(directory: Path, topology: str | None) -> list[Path]:
    _require_dir(directory)
    if topology is not None:
        tdir = topology_dir(directory, topology)
        return [tdir] if tdir.is_dir() else []
    return sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))


def topologies(directory: str | os.PathLike) -> list[str]:
    """The topologies that have a directory in the log, sorted."""
    return sorted(unquote(p.name) for p in _topology_dirs(Path(directory), None))


def _listing(directory: str | os.PathLike, topology: str | None) -> list[tuple[Path, list[str]]]:
    """Each topology directory, with the names in it, sorted."""
    return [(tdir, sorted(os.listdir(tdir))) for tdir in _topology_dirs(Path(directory), topology)]


def _final(listing: list[tuple[Path, list[str]]], component: str | None) -> list[Path]:
    # Pruning by name is safe: every file of a component starts with its name and a "-".
    prefix = f"{file_safe(component)}-" if component is not None else ""
    return [tdir / name for tdir, names in listing for name in names
            if is_final(name) and name.startswith(prefix)]


def _inprogress(listing: list[tuple[Path, list[str]]]) -> list[Path]:
    return [tdir / name for tdir, names in listing for name in names if is_inprogress(name)]


def final_files(directory: str | os.PathLike, topology: str | None = None,
                component: str | None = None) -> list[Path]:
    """The complete files, sorted by topology then name (component, task, writer, sequence)."""
    return _final(_listing(directory, topology), component)


def inprogress_files(directory: str | os.PathLike, topology: str | None = None) -> list[Path]:
    """Files being written now, or left by a crashed writer; readers do not read them."""
    return _inprogress(_listing(directory, topology))


def read_failed(directory: str | os.PathLike, topology: str | None = None,
                component: str | None = None, reason: str | None = None,
                since: float | None = None, until: float | None = None,
                decode: bool = True, on_bad: OnBad | None = None,
                registry: Any = None) -> Iterator[dict[str, Any]]:
    """The records of the complete files, as dicts, filtered by topology, component, reason kind
    and ``since <= last_failed_at < until``. With ``decode`` (the default) the message id, key and
    value are decoded (bytes come back as bytes; a value of a registered type by
    ``registry``, the topology's ``serializers.registry_for(conf)``, or by the default types'
    when None, which leave another registered type's value as its ``{"ext": ...}``); without,
    they are as stored.

    Raises ``FileNotFoundError`` if ``directory`` does not exist. What is not a record (a file
    that is not Parquet or JSON Lines, a damaged line or row: see ``parse``) is skipped and
    passed to ``on_bad`` as a ``BadInput``, or logged as a warning without one; every other
    record is still read.
    """
    yield from _read(final_files(directory, topology, component), topology, component, reason,
                     since, until, decode, on_bad or _warn, registry=registry)


def _warn(bad: BadInput) -> None:
    log.warning("failed-message log: %s; skipped", bad)


def _read(files: list[Path], topology: str | None, component: str | None, reason: str | None,
          since: float | None, until: float | None, decode: bool, on_bad: OnBad,
          columns: list[str] | None = None, registry: Any = None) -> Iterator[dict[str, Any]]:
    """``read_failed`` over the complete files ``files`` (of Parquet files, only ``columns``)."""
    fields = columns or FIELDS
    for path in files:
        if is_legacy(path.name):
            records = _legacy_records(path, decode, on_bad, registry)
        else:
            records = _records(path, columns, fields, decode, on_bad, registry)
        for record in records:
            if _matches(record, topology, component, reason, since, until):
                yield record


def _records(path: Path, columns: list[str] | None, fields: Iterable[str], decode: bool,
             on_bad: OnBad, registry: Any = None) -> Iterator[dict[str, Any]]:
    from pyarrow.lib import ArrowException  # here: a spout's dead letters never read

    try:
        table = _whole_file(path, lambda: read_table(path, columns))
    except FileNotFoundError:
        return  # archived or removed (by a replay job, say) since the listing
    except (OSError, ValueError, ArrowException) as exc:
        # pyarrow's errors for a damaged file derive from these; RecordError for other columns
        problem = str(exc) if isinstance(exc, RecordError) else (
            f"not a readable Parquet file ({exc})")
        on_bad(BadInput(path, None, problem))
        return

    def bad_row(number: int, problem: str) -> None:
        on_bad(BadInput(path, f"row {number}", problem))

    for number, record in table_records(table, bad_row):
        try:
            yield check_record(record, fields, decode, registry)
        except RecordError as exc:
            bad_row(number, str(exc))


def _whole_file(path: Path, read: Callable[[], Any]) -> Any:
    # Not a regular file (a directory named like one, a dangling link): say so rather than let
    # pyarrow read a directory as a dataset.
    if not path.is_file():
        if not os.path.lexists(path):
            raise FileNotFoundError(path)
        raise RecordError("not a regular file")
    return read()


def _legacy_records(path: Path, decode: bool, on_bad: OnBad,
                    registry: Any = None) -> Iterator[dict[str, Any]]:
    """The records of a JSON Lines file of the first format."""
    try:
        f = _whole_file(path, lambda: open(path, "rb"))
    except FileNotFoundError:
        return
    except (OSError, RecordError) as exc:
        on_bad(BadInput(path, None, f"cannot be read ({exc})" if isinstance(exc, OSError)
                        else str(exc)))
        return
    lineno = 0
    with f:
        try:
            for lineno, line in enumerate(f, 1):
                try:
                    yield parse_line(line, decode, registry)
                except RecordError as exc:
                    on_bad(BadInput(path, f"line {lineno}", str(exc)))
        except OSError as exc:   # a read error part of the way through
            on_bad(BadInput(path, f"line {lineno + 1}", f"cannot be read ({exc})"))


def _matches(record: dict[str, Any], topology: str | None, component: str | None,
             reason: str | None, since: float | None, until: float | None) -> bool:
    if topology is not None and record.get("topology") != topology:
        return False
    if component is not None and record.get("component") != component:
        return False
    if reason is not None and (record.get("reason") or {}).get("kind") != reason:
        return False
    failed_at = record.get("last_failed_at") or 0.0
    return (since is None or failed_at >= since) and (until is None or failed_at < until)


class ByKeys:
    """Totals of ``self.counts`` (numbers per (topology, component, reason kind)) by topology, by
    (topology, component) and by reason kind."""

    counts: Counter[tuple[str, str, str]]

    def by_topology(self) -> Counter[str]:
        return self._by(0)

    def by_component(self) -> Counter[tuple[str, str]]:
        return self._by(0, 1)

    def by_reason(self) -> Counter[str]:
        return self._by(2)

    def _by(self, *index: int) -> Counter[Any]:
        key_of = itemgetter(*index)  # one index: the part itself; more: a tuple of them
        out: Counter[Any] = Counter()
        for key, n in self.counts.items():
            out[key_of(key)] += n
        return out


@dataclass
class FailedSummary(ByKeys):
    files: int = 0
    records: int = 0
    #: In-progress files: being written now, or left by a crashed writer until its task restarts.
    in_progress: int = 0
    #: Records per (topology, component, reason kind).
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: What was skipped: files that could not be read at all, and lines or rows of others.
    bad_files: int = 0
    bad_records: int = 0


def summarize(directory: str | os.PathLike, topology: str | None = None,
              component: str | None = None, reason: str | None = None,
              since: float | None = None, until: float | None = None,
              on_bad: OnBad | None = None) -> FailedSummary:
    """Counts of the records ``read_failed`` would return, by topology, component and reason,
    and of what was skipped (each also passed to ``on_bad``, or logged). Only the columns
    counted are read and checked: a record damaged elsewhere is counted here, and named by
    ``read_failed``."""
    listing = _listing(directory, topology)
    files = _final(listing, component)
    summary = FailedSummary(files=len(files), in_progress=len(_inprogress(listing)))
    report = on_bad or _warn

    def count_bad(bad: BadInput) -> None:
        if bad.where is None:
            summary.bad_files += 1
        else:
            summary.bad_records += 1
        report(bad)

    for record in _read(files, topology, component, reason, since, until, False, count_bad,
                        columns=["topology", "component", "reason", "last_failed_at"]):
        kind = (record.get("reason") or {}).get("kind") or "?"
        summary.counts[record.get("topology") or "?", record.get("component") or "?", kind] += 1
        summary.records += 1
    return summary
