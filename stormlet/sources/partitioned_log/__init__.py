"""An append-only log with N partitions in a local directory: stormlet's embedded source.

Like a small Kafka topic on disk. Each partition is an ordered sequence of records numbered by
offset. Any number of processes may append (the CLI while a replay job writes) and read, and a
reader sees what other processes append after it opened.

    log = PartitionedLog.create("data/events", partitions=3)
    log.append("hello", key="user-1")               # -> (partition, offset), by CRC-32 of the key
    log.append_many(["a", "b", "c"])                  # round-robin -> {partition: range(offsets)}
    log.flush()                                       # fsync
    for record in log.read(0, offset=0, max_records=100):
        print(record.offset, record.key, record.value)
    log.close()

Appends are thread-safe. Reads are not: read a given partition from one thread at a time.

The pieces, each stating its own invariants:

    layout.py   the directory: log.json, partition directories, segment files; creating a log
    frames.py   a segment's frames (batches of records, CRC-checked, whole or not there)
    recovery.py walking a segment past damage; a torn tail told from corruption
    quarantine.py  setting damaged spans aside, and listing them
    writer.py   appending to a partition: its lock, torn-tail recovery, segment rolls, fsync
    index.py    a reader's sparse index of a segment
    reader.py   reading a partition sequentially while others append and delete
    errors.py   LogError and PartialAppend

Damage never costs an intact record: a reader steps over a damaged span to the next valid frame,
its offsets are missing from what reads return, its bytes are set aside beside the segment and
counted by ``quarantined`` (and ``stormlet log describe``), and the next append goes after every
offset it may have held. Only a torn tail (a writer killed mid-append) is truncated.

This module is the log as callers see it: routing messages to partitions, and the
``PartitionedLog`` that owns a writer and a reader per partition.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import zlib
from pathlib import Path
from typing import Iterable, Mapping

from ...durable import fsync_dir
from ..source import Record
from .directory import (
    FAILED_DIR,
    FORMAT,
    LOCK_FILE,
    METADATA,
    OFFSETS_DIR,
    SEGMENT_SUFFIX,
    VERSION,
    create_log,
    failed_dir,
    offsets_dir,
    partition_dir,
    read_config,
    segment_bases,
    segment_path,
    stray_segments,
)
from .errors import LogError, PartialAppend
from .frames import MAX_BODY, READ_CHUNK
from .index import INDEX_EVERY
from .quarantine import Quarantined, quarantined
from .reader import PartitionReader
from .writer import FRAME_BYTES, FRAME_RECORDS, PartitionWriter, WriteFailed

# The names this module had before it became a package. The tuning constants among them are
# re-exported for reading only: the modules that use them read their own, so patch them there.
__all__ = ["DEFAULT_SEGMENT_BYTES", "FAILED_DIR", "FORMAT", "FRAME_BYTES", "FRAME_RECORDS",
           "INDEX_EVERY", "LOCK_FILE", "LogError", "MAX_BODY", "METADATA", "OFFSETS_DIR",
           "PartialAppend", "PartitionedLog", "Quarantined", "READ_CHUNK", "SEGMENT_SUFFIX",
           "VERSION", "failed_dir", "offsets_dir", "partition_for_key"]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 64 << 20


def partition_for_key(key: str | bytes, partitions: int) -> int:
    """The partition of a keyed message: CRC-32 of the key (UTF-8 for str) mod the partition
    count. Unlike ``hash()`` this is the same in every process and every Python."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return zlib.crc32(data) % partitions


class PartitionedLog:
    """A partitioned log in the directory ``path`` (see the module doc). ``partitions`` is the
    partition count; partitions are numbered 0 to ``partitions - 1``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        config = read_config(self.path)
        self.partitions: int = config.partitions
        self.segment_bytes: int = config.segment_bytes
        self.segment_records: int | None = config.segment_records
        self.version: int = config.version
        self._writers: dict[int, PartitionWriter] = {}
        self._readers: dict[int, PartitionReader] = {}
        self._setup = threading.Lock()
        self._round_robin = random.randrange(self.partitions)  # so short-lived writers spread out

    @classmethod
    def create(cls, path: str | os.PathLike, partitions: int, *,
               segment_bytes: int = DEFAULT_SEGMENT_BYTES,
               segment_records: int | None = None) -> PartitionedLog:
        """Create a log with ``partitions`` partitions at ``path`` (which must not exist, or be
        an empty directory). A segment is closed, and a new one started, once it holds
        ``segment_bytes`` bytes or ``segment_records`` records."""
        path = Path(path)
        create_log(path, partitions, segment_bytes, segment_records)
        return cls(path)

    # Opened files do not survive a copy: a copy (a spout deep-copied per task) opens its own.
    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __enter__(self) -> PartitionedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionedLog({str(self.path)!r}, partitions={self.partitions})"

    def check_partition(self, partition: int) -> None:
        """Raise ``LogError`` unless ``partition`` is one of this log's."""
        if not (isinstance(partition, int) and 0 <= partition < self.partitions):
            raise LogError(f"log {self.path} has no partition {partition!r} (it has "
                           f"{self.partitions}: 0 to {self.partitions - 1})")

    def _writer(self, partition: int) -> PartitionWriter:
        writer = self._writers.get(partition)
        if writer is None:
            with self._setup:
                writer = self._writers.get(partition)
                if writer is None:
                    writer = PartitionWriter(partition_dir(self.path, partition), partition,
                                             self.segment_bytes, self.segment_records,
                                             grouped=self.version >= 2)
                    self._writers[partition] = writer
        return writer

    def _reader(self, partition: int) -> PartitionReader:
        reader = self._readers.get(partition)
        if reader is None:
            self.check_partition(partition)
            reader = self._readers[partition] = PartitionReader(
                partition_dir(self.path, partition), partition)
        return reader

    # -- writing

    def append(self, value: str | bytes, key: str | bytes | None = None,
               partition: int | None = None) -> tuple[int, int]:
        """Append one message; returns its (partition, offset). It goes to ``partition`` if
        given, else to ``partition_for_key(key)``, else to the next partition round-robin."""
        written = self.append_many([value], None if key is None else [key], partition)
        ((p, offsets),) = written.items()
        return p, offsets.start

    def append_many(self, values: Iterable[str | bytes],
                    keys: Iterable[str | bytes | None] | None = None,
                    partition: int | None = None) -> dict[int, range]:
        """Append messages (with ``keys`` beside ``values``, if given), each routed as by
        ``append``. Returns, per partition written, the range of offsets its messages got:
        contiguous, since a partition's lock is held while its share is written."""
        values = values if isinstance(values, list) else list(values)
        _check_types(values, (str, bytes), "value")
        key_list: list | None = None
        if keys is not None:
            key_list = keys if isinstance(keys, list) else list(keys)
            if len(key_list) != len(values):
                raise ValueError(f"{len(key_list)} keys for {len(values)} values")
            _check_types(key_list, (str, bytes, type(None)), "key")
            if all(k is None for k in key_list):
                key_list = None
        if not values:
            return {}
        groups = self._route(values, key_list, partition)
        timestamp = time.time()
        written: dict[int, range] = {}
        for p in sorted(groups):
            group_keys, group_values = groups[p]
            try:
                with self._writer(p).locked() as writer:
                    written[p] = writer.append(group_keys, group_values, timestamp)
            except (WriteFailed, OSError) as exc:
                if isinstance(exc, WriteFailed):
                    if exc.written:
                        written[p] = exc.written
                    exc = exc.cause
                done = ", ".join(f"partition {q}: {len(r)} (offsets {r.start}-{r.stop - 1})"
                                 for q, r in written.items()) or "nothing"
                raise PartialAppend(f"appending to partition {p} of {self.path} failed: {exc}; "
                                    f"appended before the failure: {done}", written) from exc
        return written

    def _route(self, values: list, keys: list | None,
               partition: int | None) -> Mapping[int, tuple[list | None, list]]:
        n = self.partitions
        if partition is not None:
            self.check_partition(partition)
            return {partition: (keys, values)}
        if keys is None:
            start = self._round_robin
            self._round_robin = (start + len(values)) % n
            return {(start + k) % n: (None, values[k::n]) for k in range(min(n, len(values)))}
        groups: dict[int, tuple[list, list]] = {}
        for key, value in zip(keys, values):
            if key is None:
                p = self._round_robin
                self._round_robin = (p + 1) % n
            else:
                p = partition_for_key(key, n)
            group = groups.get(p)
            if group is None:
                group = groups[p] = ([], [])
            group[0].append(key)
            group[1].append(value)
        return groups

    def delete_before(self, partition: int, offset: int) -> int:
        """Retention: delete the partition's segments whose records all lie below ``offset``
        (never the records at or above it, so the new start may stay below ``offset``). Reading
        a deleted offset then raises ``OffsetOutOfRange``. Returns the partition's new start."""
        self.check_partition(partition)
        directory = partition_dir(self.path, partition)
        writer = self._writer(partition)
        with writer.locked():
            end = writer.next_offset
            if offset > end:
                raise LogError(f"cannot delete before offset {offset} in partition {partition} "
                               f"of {self.path}: it ends at {end}")
            bases = segment_bases(directory)
            doomed = [b for b, nxt in zip(bases, bases[1:] + [end]) if nxt <= offset]
            if doomed and doomed[-1] == bases[-1]:
                if bases[-1] == end:
                    doomed.pop()        # the last segment is empty: keep it, it marks the end
                else:
                    writer.roll()       # a partition always keeps a last segment
            for base in doomed:
                try:
                    os.unlink(segment_path(directory, base))
                except FileNotFoundError:
                    pass
            if doomed:
                fsync_dir(directory)
                log.info("%s partition %d: deleted %d segments below offset %d", self.path,
                         partition, len(doomed), offset)
        return self.start_offset(partition)

    def flush(self) -> None:
        """Make everything appended through this object durable (fsync)."""
        for writer in list(self._writers.values()):
            writer.flush()

    # -- reading

    def read(self, partition: int, offset: int, max_records: int = 1000) -> list[Record]:
        """Up to ``max_records`` records of ``partition`` from ``offset`` on; empty at the end.
        Raises ``OffsetOutOfRange`` for an offset below the start or beyond the end. Reading on
        from where the last read stopped is the fast path."""
        reader = self._reader(partition)
        if not isinstance(offset, int) or offset < 0:
            raise LogError(f"partition {partition} of {self.path}: bad offset {offset!r}")
        try:
            return reader.read(offset, max_records)
        except OSError as exc:
            reader.close()
            raise LogError(f"cannot read partition {partition} of {self.path}: {exc}") from None

    def start_offset(self, partition: int) -> int:
        """The lowest offset the partition holds (its end, if it is empty)."""
        return self._reader(partition).refresh()[0]

    def end_offset(self, partition: int) -> int:
        """The offset the next record appended to the partition will get."""
        return self._reader(partition).end()

    def describe(self) -> dict[int, tuple[int, int]]:
        """Per partition, (start offset, end offset)."""
        return {p: self._reader(p).bounds() for p in range(self.partitions)}

    def quarantined(self, partition: int) -> list[Quarantined]:
        """The damaged spans of ``partition`` set aside so far, by any process, in order: each
        names its quarantine file, its bytes and the offsets it held. Damage is found as it is
        read (or recovered by a writer); ``check`` reads everything to find all of it."""
        self.check_partition(partition)
        return quarantined(partition_dir(self.path, partition))

    def check(self, partition: int) -> list[Quarantined]:
        """Read the whole partition through, setting aside every damaged span not set aside
        yet (a torn tail is left for the next writer); returns ``quarantined(partition)``."""
        reader = self._reader(partition)
        try:
            reader.check()
        except OSError as exc:
            reader.close()
            raise LogError(f"cannot read partition {partition} of {self.path}: {exc}") from None
        return self.quarantined(partition)

    def ignored_files(self, partition: int) -> list[str]:
        """Names in the partition's directory that end in ``.seg`` but are no segment's (not 20
        digits, or past the 64-bit offsets): ignored by the log, which warns once about each."""
        self.check_partition(partition)
        return stray_segments(partition_dir(self.path, partition))

    def close(self) -> None:
        """Flush, then close every file (the object can be used again: it reopens them)."""
        with self._setup:
            writers, self._writers = self._writers, {}
            readers, self._readers = self._readers, {}
        for writer in writers.values():
            writer.close()
        for reader in readers.values():
            reader.close()


def _check_types(items: list, types: tuple[type, ...], what: str) -> None:
    # One pass over the distinct types (fast for a million messages); the index only on failure.
    if all(issubclass(t, types) for t in set(map(type, items))):
        return
    for i, item in enumerate(items):
        if not isinstance(item, types):
            allowed = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise TypeError(f"message {i}: a {what} must be {allowed}, not "
                            f"{type(item).__name__}")
