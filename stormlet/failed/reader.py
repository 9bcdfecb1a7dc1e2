"""Reading the failed-message log without Spark: records filtered by topology, component, reason
and time, and counts of them (what ``stormlet failed ls|show`` print)."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote

from .layout import file_safe, is_final, is_inprogress, topology_dir
from .record import decode_record

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


def final_files(directory: str | os.PathLike, topology: str | None = None,
                component: str | None = None) -> list[Path]:
    """The complete files, sorted by topology then name (component, task, writer, sequence)."""
    # Pruning by name is safe: every file of a component starts with its name and a "-".
    prefix = f"{file_safe(component)}-" if component is not None else ""
    return [tdir / name for tdir in _topology_dirs(Path(directory), topology)
            for name in sorted(os.listdir(tdir)) if is_final(name) and name.startswith(prefix)]


def inprogress_files(directory: str | os.PathLike, topology: str | None = None) -> list[Path]:
    """Files being written now, or left by a crashed writer; readers do not read them."""
    return [tdir / name for tdir in _topology_dirs(Path(directory), topology)
            for name in sorted(os.listdir(tdir)) if is_inprogress(name)]


def read_failed(directory: str | os.PathLike, topology: str | None = None,
                component: str | None = None, reason: str | None = None,
                since: float | None = None, until: float | None = None,
                decode: bool = True) -> Iterator[dict[str, Any]]:
    """The records of the complete files, as dicts, filtered by topology, component, reason kind
    and ``since <= last_failed_at < until``. With ``decode`` (the default) the message id, key and
    value are decoded (bytes come back as bytes); without, they are as stored.

    Raises ``FileNotFoundError`` if ``directory`` does not exist. A line that is not a record (a
    file edited by hand) is logged and skipped.
    """
    for path in final_files(directory, topology, component):
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            continue  # archived or removed (by a replay job, say) since the listing
        with f:
            for lineno, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    log.warning("failed-message log: %s line %d is not a record; skipped", path,
                                lineno)
                    continue
                if not _matches(record, topology, component, reason, since, until):
                    continue
                yield decode_record(record) if decode else record


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


@dataclass
class FailedSummary:
    files: int = 0
    records: int = 0
    #: In-progress files: being written now, or left by a crashed writer until its task restarts.
    in_progress: int = 0
    #: Records per (topology, component, reason kind).
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def by_topology(self) -> Counter[str]:
        return self._by(0)

    def by_component(self) -> Counter[tuple[str, str]]:
        out: Counter[tuple[str, str]] = Counter()
        for (topology, component, _), n in self.counts.items():
            out[topology, component] += n
        return out

    def by_reason(self) -> Counter[str]:
        return self._by(2)

    def _by(self, index: int) -> Counter[str]:
        out: Counter[str] = Counter()
        for key, n in self.counts.items():
            out[key[index]] += n
        return out


def summarize(directory: str | os.PathLike, topology: str | None = None,
              component: str | None = None, reason: str | None = None,
              since: float | None = None, until: float | None = None) -> FailedSummary:
    """Counts of the records ``read_failed`` would return, by topology, component and reason."""
    summary = FailedSummary(files=len(final_files(directory, topology, component)),
                            in_progress=len(inprogress_files(directory, topology)))
    for record in read_failed(directory, topology, component, reason, since, until, decode=False):
        kind = (record.get("reason") or {}).get("kind") or "?"
        summary.counts[record.get("topology") or "?", record.get("component") or "?", kind] += 1
        summary.records += 1
    return summary
