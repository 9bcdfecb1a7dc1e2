"""Writing the failed-message log: one writer per spout task, files complete or absent, and
recovery of what a crashed writer left behind."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

from ..durable import fsync_dir, replace_atomically
from .layout import (FINAL_SUFFIX, INPROGRESS_SUFFIX, file_safe, make_dirs, own_inprogress,
                     same_file, topology_dir, utc_stamp)
from .record import FailedRecord, record_to_dict

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_WRITE_BUFFER = 256 * 1024
# Compact, and strict JSON (no NaN literal: encode_value spells non-finite floats out).
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class FailedMessageWriter:
    """Appends the failed messages of one spout task to its own files under
    ``<directory>/<topology>/``.

    ``write`` appends to the in-progress file. A file becomes visible (renamed to its final name,
    durably) when it reaches ``max_bytes``, when a write finds it older than ``max_age_secs``
    (``rotate_if_due`` checks age without writing), and on ``flush`` and ``close``. After
    ``flush`` returns, every record written so far survives a crash, so the spout may commit
    offsets past them. If ``write`` or ``flush`` raises, the records since the last flush are not
    durable and the spout must not commit past them; the writer leaves that file for the next
    writer of this task to recover and starts a new one.

    Each in-progress file is ``flock``ed by its writer, so a new writer recovers only files whose
    writer is dead (the kernel drops the lock of a killed process).
    """

    def __init__(self, directory: str | os.PathLike, topology: str, component: str, task: int,
                 max_bytes: int = 64 * MiB, max_age_secs: float = 60.0):
        if max_bytes <= 0 or max_age_secs <= 0:
            raise ValueError("max_bytes and max_age_secs must be positive")
        self.topology, self.component, self.task = topology, component, int(task)
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
        self._bytes = 0
        self._opened_at = 0.0
        self._closed = False
        #: Final files made from leftovers of this task's earlier, crashed writers.
        self.recovered: list[Path] = recover_leftovers(directory, topology, component, self.task)
        self._dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)

    def write(self, record: FailedRecord) -> None:
        if self._closed:
            raise ValueError(f"the failed-message writer of {self.component}:{self.task} is closed")
        data = record_to_dict(record, self.topology, self.component, self.task, time.time())
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
            os.close(self._dir_fd)

    def __enter__(self) -> FailedMessageWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        while True:
            self._seq += 1
            name = f"{self._name_prefix}{self._seq:06d}{FINAL_SUFFIX}"
            inprogress = self.path / f".{name}{INPROGRESS_SUFFIX}"
            fd = os.open(inprogress, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Between create and lock, a recovering writer of this task in another process may
            # have taken the empty file for a dead writer's and removed it: then use another name.
            if same_file(fd, inprogress):
                break
            os.close(fd)
        self._file = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER)
        self._inprogress, self._final = inprogress, self.path / name
        self._bytes = 0
        self._opened_at = time.monotonic()

    def _complete(self) -> Path:
        # fsync before rename: otherwise a crash could leave the final name on an empty file.
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            os.rename(self._inprogress, self._final)
            os.fsync(self._dir_fd)  # makes the rename itself durable
        except OSError:
            self._abandon()
            raise
        self._file.close()
        self._file = None
        log.debug("failed-message log: completed %s (%d bytes)", self._final, self._bytes)
        return self._final

    def _abandon(self) -> None:
        file, self._file = self._file, None
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
    final = tdir / name[1:-len(INPROGRESS_SUFFIX)]
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
            # Copy, then rename: the final name appears only on a complete, durable file.
            replace_atomically(final, kept)
        os.unlink(path)
        fsync_dir(tdir)
    finally:
        os.close(fd)
    if kept or dropped:
        log.info("failed-message log: recovered %d records of a crashed writer from %s into %s%s",
                 kept.count(b"\n"), path.name, final.name if kept else "(no file)",
                 f"; dropped {dropped} incomplete or unreadable lines" if dropped else "")
    return final if kept else None


def _complete_records(data: bytes) -> tuple[bytes, int]:
    """The lines of ``data`` that are whole records, and how many others were dropped. A kill
    tears at most the last line; a power cut can leave zeros in the unsynced part, so every line
    is parsed rather than trusting all but the last."""
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a line the writer never finished
    kept, dropped = [], int(bool(torn))
    for line in lines:
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if ok:
            kept.append(line + b"\n")
        else:
            dropped += 1
    return b"".join(kept), dropped
