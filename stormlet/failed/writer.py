"""Writing the failed-message log: one writer per spout task, files complete or absent, and
recovery of what a crashed writer left behind.

A writer appends each record, as a JSON line, to its journal (a hidden in-progress file) and
gathers it column by column; completing the file writes the Parquet file (``columnar``) under its
final name, durably, then removes the journal. A writer that dies leaves its journal, whose
complete lines the next writer of the task turns into the final file.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..durable import fsync_dir, replace_atomically
from .columnar import ColumnBuilder
from .files import (
    FINAL_SUFFIX,
    JOURNAL_SUFFIX,
    LEGACY_SUFFIX,
    file_safe,
    final_name,
    is_legacy,
    make_dirs,
    own_inprogress,
    same_file,
    topology_dir,
    utc_stamp,
)
from .parse import parse_line
from .reader import final_files
from .record import FailedRecord, record_to_dict

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_WRITE_BUFFER = 256 * 1024
# Compact, and strict JSON (no NaN literal: encode_value spells non-finite floats out).
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class FailedMessageWriter:
    """Appends the failed messages of one spout task to its own files under
    ``<directory>/<topology>/``.

    ``write`` appends to the in-progress journal. A file becomes visible (written under its final
    name, durably) when its journal reaches ``max_bytes``, when a write finds it older than
    ``max_age_secs`` (``rotate_if_due`` checks age without writing), and on ``flush`` and
    ``close``. After
    ``flush`` returns, every record written so far survives a crash, so the spout may commit
    offsets past them. If ``write`` or ``flush`` raises, the records since the last flush are not
    durable and the spout must not commit past them; the writer leaves that file for the next
    writer of this task to recover and starts a new one.

    Each in-progress file is ``flock``ed by its writer, so a new writer recovers only files whose
    writer is dead (the kernel drops the lock of a killed process).
    """

    def __init__(self, directory: str | os.PathLike, topology: str, component: str, task: int,
                 max_bytes: int = 16 * MiB, max_age_secs: float = 60.0, registry: Any = None):
        """``registry``: the topology's types (``serializers.Registry``; None: the default
        types), which values of registered types are written with."""
        if max_bytes <= 0 or max_age_secs <= 0:
            raise ValueError("max_bytes and max_age_secs must be positive")
        self.topology, self.component, self.task = topology, component, int(task)
        self.registry = registry
        self.max_bytes, self.max_age_secs = max_bytes, max_age_secs
        self.path = topology_dir(directory, topology)
        make_dirs(self.path)
        # Start time and a random id make this writer's names unique, so a rename never replaces
        # another writer's file, even one of this task restarted within the same millisecond.
        self._name_prefix = (f"{file_safe(component)}-{self.task}-{utc_stamp(time.time())}-"
                             f"{secrets.token_hex(3)}-")
        self._seq = 0
        self._file: Any = None
        self._inprogress = self._final = self.path
        self._columns = ColumnBuilder()
        self._bytes = 0
        self._opened_at = 0.0
        self._closed = False
        #: Final files made from leftovers of this task's earlier, crashed writers.
        self.recovered: list[Path] = recover_leftovers(directory, topology, component, self.task)

    def write(self, record: FailedRecord) -> None:
        if self._closed:
            raise ValueError(f"the failed-message writer of {self.component}:{self.task} is closed")
        data = record_to_dict(record, self.topology, self.component, self.task, time.time(),
                              self.registry)
        line = (_ENCODER.encode(data) + "\n").encode()
        if self._file is not None and (self._bytes + len(line) > self.max_bytes
                                       or time.monotonic() - self._opened_at >= self.max_age_secs):
            self._complete()
        if self._file is None:
            self._open()
        try:
            self._file.write(line)
        except OSError:
            self._abandon()
            raise
        self._columns.add(data)
        self._bytes += len(line)

    def flush(self) -> Path | None:
        """Make every record written so far visible and durable; returns the file made visible
        (None if nothing was written since the last flush). The next write starts a new file."""
        return self._complete() if self._file is not None else None

    def rotate_if_due(self) -> Path | None:
        """Complete the current file if it is older than ``max_age_secs``; for an idle spout to
        call now and then, so its last records do not wait for the next write."""
        if self._file is not None and time.monotonic() - self._opened_at >= self.max_age_secs:
            return self._complete()
        return None

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True

    def __enter__(self) -> FailedMessageWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        while True:
            self._seq += 1
            inprogress = self.path / f".{self._name_prefix}{self._seq:06d}{JOURNAL_SUFFIX}"
            fd = os.open(inprogress, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Between create and lock, a recovering writer of this task in another process may
            # have taken the empty file for a dead writer's and removed it: then use another name.
            if same_file(fd, inprogress):
                break
            os.close(fd)
        self._file = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER)
        self._inprogress, self._final = inprogress, self.path / final_name(inprogress.name)
        self._columns = ColumnBuilder()
        self._bytes = 0
        self._opened_at = time.monotonic()

    def _complete(self) -> Path:
        # The final file is made durable (fsynced, renamed into place, directory fsynced) before
        # the journal goes: a crash in between leaves both, and recovery then drops the journal.
        try:
            self._file.flush()
            replace_atomically(self._final, self._columns.to_parquet())
            os.unlink(self._inprogress)
        except OSError:
            self._abandon()
            raise
        self._file.close()
        self._file = None
        self._columns = ColumnBuilder()
        log.debug("failed-message log: completed %s (%d bytes)", self._final, self._bytes)
        return self._final

    def _abandon(self) -> None:
        file, self._file = self._file, None
        self._columns = ColumnBuilder()
        try:
            file.close()
        except OSError:
            pass  # the data it could not write is what we are giving up on
        log.error("failed-message log: could not complete %s; its complete records will be "
                  "recovered when a writer of %s:%d starts again", self._inprogress,
                  self.component, self.task)


# ----- recovering what a crashed writer left


def recover_leftovers(directory: str | os.PathLike, topology: str, component: str,
                      task: int) -> list[Path]:
    """Turn the in-progress files of dead writers of ``component``:``task`` into final files
    holding their complete records; returns the final files made.

    Why making them visible is right: a leftover holds records written after its writer's last
    flush, so the spout never committed offsets past those messages. After a restart the spout
    reads them again, and each either succeeds or fails again, in which case it is written again
    under a new record id. Dropping the leftover would lose the failure if the message now
    succeeds by chance, or if the source has expired it meanwhile. Keeping it means one message
    may appear in several records (never one record twice: record ids are unique across final
    files, because a leftover becomes exactly one final file, under the name its writer would have
    given it). The replay job therefore de-duplicates by source (name, partition, offset), or by
    message id for spouts without a source, not by record id.
    """
    tdir = topology_dir(directory, topology)
    if not tdir.is_dir():
        return []
    pattern = own_inprogress(component, task)
    made = []
    for name in sorted(os.listdir(tdir)):
        if pattern.fullmatch(name):
            final = _recover_one(tdir, name)
            if final is not None:
                made.append(final)
    return made


def _recover_one(tdir: Path, name: str) -> Path | None:
    path = tdir / name
    final = tdir / final_name(name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None  # its writer is alive
            raise
        if not same_file(fd, path):
            return None  # recovered by someone else while we waited
        if final.exists():
            # A recovery made the final file, then died before removing the leftover.
            os.unlink(path)
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
        kept, dropped = _complete_records(data)
        if kept:
            # Written aside, then renamed: the final name appears only on a complete, durable file.
            replace_atomically(final, kept.to_parquet())
        os.unlink(path)
        fsync_dir(tdir)
    finally:
        os.close(fd)
    if kept or dropped:
        log.info("failed-message log: recovered %d records of a crashed writer from %s into %s%s",
                 len(kept), path.name, final.name if kept else "(no file)",
                 f"; dropped {dropped} incomplete or unreadable lines" if dropped else "")
    return final if kept else None


@dataclass(frozen=True)
class Converted:
    """A file of the first format (JSON Lines) turned into Parquet."""

    legacy: Path
    parquet: Path
    records: int
    dropped: int  # lines that were not records


def convert_legacy(directory: str | os.PathLike, topology: str | None = None) -> list[Converted]:
    """Turn the JSON Lines files of the first format under ``directory`` (of ``topology``, or
    all) into Parquet files of the same name and records, each durable before its JSON Lines
    file goes; running it again after a crash finishes the job without duplicating a record."""
    done = []
    for legacy in final_files(directory, topology):
        if not is_legacy(legacy.name) or not legacy.is_file():
            continue   # a directory or a dangling link named like a file: readers name it
        parquet = legacy.with_name(legacy.name[:-len(LEGACY_SUFFIX)] + FINAL_SUFFIX)
        records, dropped = _complete_records(legacy.read_bytes())
        if not parquet.exists():  # else made by a conversion that died before the unlink
            replace_atomically(parquet, records.to_parquet())
        os.unlink(legacy)
        fsync_dir(legacy.parent)
        done.append(Converted(legacy, parquet, len(records), dropped))
    return done


def _complete_records(data: bytes) -> tuple[ColumnBuilder, int]:
    """The lines of ``data`` that are whole records, and how many others were dropped. A kill
    tears at most the last line; a power cut can leave zeros in the unsynced part, so every line
    is parsed rather than trusting all but the last."""
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a line the writer never finished
    kept, dropped = ColumnBuilder(), int(bool(torn))
    for line in lines:
        try:
            kept.add(parse_line(line))
        except ValueError:   # RecordError, or a value Parquet cannot hold (a NaN literal)
            dropped += 1
    return kept, dropped
