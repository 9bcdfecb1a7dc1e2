"""The log's directory: what is where, and what ``log.json`` says.

    log.json                   {"format": "stormlet-partitioned-log", "version": 1,
                                "partitions": N, "segment_bytes": ..., "segment_records": ...}
    partition-<p>/writer.lock  flock'ed by whoever appends to partition p
    partition-<p>/<base>.seg   segments; <base> (20 digits) is the offset of the segment's first
                               record, so a segment's records end where the next segment begins
    partition-<p>/<base>-<pos>.quarantine
                               a damaged span of segment <base> from byte <pos>, set aside (see
                               quarantine.py); the segment itself keeps its bytes

Anything else in the directory (a spout's ``_offsets/``, ``_failed/``) is not the log's and is
ignored; so is a ``.seg`` file whose name is not a segment's (not 20 digits, or an offset past
the 64-bit offsets), with a warning naming it. A log is created whole or not at all (built aside,
then renamed into place), and a partition always has a segment: its last one, empty or not, marks
where the partition ends. No other module of the log spells a path in it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

from ...durable import fsync_dir
from .errors import LogError

log = logging.getLogger(__name__)

FORMAT = "stormlet-partitioned-log"
# The format new logs get: 2 checks a frame's records in groups too (frames.py). A log keeps
# the version it was created with, so a stormlet that reads only version 1 still reads it.
VERSION = 2
READABLE_VERSIONS = (1, 2)
METADATA = "log.json"
LOCK_FILE = "writer.lock"
SEGMENT_SUFFIX = ".seg"
QUARANTINE_SUFFIX = ".quarantine"
MAX_OFFSET = (1 << 63) - 1    # offsets are signed 64-bit in a frame, as in Kafka
_SEGMENT_NAME = re.compile(r"([0-9]{20})" + re.escape(SEGMENT_SUFFIX))
_QUARANTINE_NAME = re.compile(r"([0-9]{20})-([0-9]{20})" + re.escape(QUARANTINE_SUFFIX))
# Kept beside the partitions for the log's readers: a LogSpout's commits in local mode, and its
# dead letters (the failed-message log).
OFFSETS_DIR = "_offsets"
FAILED_DIR = "_failed"


class LogConfig(NamedTuple):
    """What ``log.json`` fixes for the life of a log."""

    partitions: int
    segment_bytes: int
    segment_records: int | None
    version: int = VERSION


def offsets_dir(root: str | os.PathLike) -> Path:
    """Where LogSpouts in local mode commit their offsets on the log at ``root``."""
    return Path(root) / OFFSETS_DIR


def failed_dir(root: str | os.PathLike) -> Path:
    """Where LogSpouts write the dead letters of the log at ``root`` by default."""
    return Path(root) / FAILED_DIR


def partition_dir(root: Path, partition: int) -> Path:
    return root / f"partition-{partition}"


def lock_path(directory: Path) -> Path:
    """The lock file of the partition in ``directory``."""
    return directory / LOCK_FILE


def segment_path(directory: Path, base: int) -> Path:
    """The segment of the partition in ``directory`` whose first record is offset ``base``."""
    return directory / f"{base:020d}{SEGMENT_SUFFIX}"


def quarantine_path(directory: Path, base: int, pos: int) -> Path:
    """Where the damaged span from byte ``pos`` of segment ``base`` is set aside."""
    return directory / f"{base:020d}-{pos:020d}{QUARANTINE_SUFFIX}"


def quarantine_files(directory: Path) -> list[Path]:
    """The partition's quarantine files, in segment and byte order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [directory / n for n in sorted(names) if _QUARANTINE_NAME.fullmatch(n)]


def _segment_base(name: str) -> int | None:
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None:
        return None
    base = int(match.group(1))
    return base if base <= MAX_OFFSET else None


def stray_segments(directory: Path) -> list[str]:
    """Names in the partition directory that end in ``.seg`` but are no segment's: ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(SEGMENT_SUFFIX) and _segment_base(n) is None)


_warned_strays: set[Path] = set()   # warn once per process, not at every listing


def segment_bases(directory: Path) -> list[int]:
    """The base offsets of the partition's segments, in order; LogError if there are none. A
    ``.seg`` name that is not a segment's is ignored, with a warning (once) naming it: taking it
    for one would make its number the partition's end."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise LogError(f"partition directory {directory} is missing: the log is damaged") from None
    bases = []
    for name in names:
        if not name.endswith(SEGMENT_SUFFIX):
            continue
        base = _segment_base(name)
        if base is not None:
            bases.append(base)
        elif directory / name not in _warned_strays:
            _warned_strays.add(directory / name)
            log.warning("%s: ignored: not a segment name (a segment is named by its first "
                        "offset, 20 digits, at most %d); move it out of %s", directory / name,
                        MAX_OFFSET, directory)
    if not bases:
        raise LogError(f"partition directory {directory} holds no segment: the log is damaged")
    bases.sort()
    return bases


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def read_config(path: Path) -> LogConfig:
    """The configuration of the log at ``path``, once its metadata and its partition directories
    are checked; raises LogError naming what is missing or wrong."""
    meta = path / METADATA
    try:
        text = meta.read_text()
    except FileNotFoundError:
        if not path.exists():
            raise LogError(f"no log at {path}: the directory does not exist (create one"
                           f" with `stormlet log create {path} --partitions N`)") from None
        if not path.is_dir():
            raise LogError(f"{path} is not a log: it is not a directory") from None
        raise LogError(f"{path} is not a stormlet log: it has no {METADATA}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"cannot read {meta}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LogError(f"{meta} is corrupt: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LogError(f"{meta} is not the metadata of a stormlet partitioned log")
    version = data.get("version")
    if version not in READABLE_VERSIONS:
        raise LogError(f"{path} is in log format version {version!r}; this stormlet reads "
                       f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    partitions = data.get("partitions")
    segment_bytes = data.get("segment_bytes")
    segment_records = data.get("segment_records")
    if not (_positive_int(partitions) and _positive_int(segment_bytes)
            and (segment_records is None or _positive_int(segment_records))):
        raise LogError(f"{meta} is corrupt: partitions, segment_bytes or segment_records "
                       f"is not a positive integer")
    for p in range(partitions):
        if not partition_dir(path, p).is_dir():
            raise LogError(f"log {path} is damaged: partition directory "
                           f"{partition_dir(path, p)} is missing")
    return LogConfig(partitions, segment_bytes, segment_records, version)


def create_log(path: Path, partitions: int, segment_bytes: int,
               segment_records: int | None) -> None:
    """Build the directory of a new log at ``path`` (which must not exist, or be an empty
    directory): ``log.json`` and an empty first segment per partition, all fsynced."""
    if not _positive_int(partitions):
        raise LogError(f"cannot create a log at {path}: the partition count must be a "
                       f"positive integer, not {partitions!r}")
    if not _positive_int(segment_bytes) or not (segment_records is None
                                                or _positive_int(segment_records)):
        raise LogError(f"cannot create a log at {path}: segment_bytes and segment_records "
                       f"must be positive integers")
    if (path / METADATA).exists():
        raise LogError(f"cannot create a log at {path}: there is one already")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise LogError(f"cannot create a log at {path}: it exists and is not an empty "
                       f"directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Built aside and renamed into place, so nobody ever opens half a log.
    staging = path.parent / f".{path.name}.creating-{uuid.uuid4().hex[:12]}"
    try:
        staging.mkdir()
        for p in range(partitions):
            directory = partition_dir(staging, p)
            directory.mkdir()
            segment_path(directory, 0).touch()
            fsync_dir(directory)
        meta = {"format": FORMAT, "version": VERSION, "partitions": partitions,
                "segment_bytes": segment_bytes, "segment_records": segment_records,
                "created": time.time()}
        with open(staging / METADATA, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(staging)
        os.rename(staging, path)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise LogError(f"cannot create a log at {path}: it was created meanwhile") from None
        raise LogError(f"cannot create a log at {path}: {exc}") from None
    fsync_dir(path.parent)
    log.debug("created log %s with %d partitions", path, partitions)
