"""The failed-message log: where spouts put messages that finally failed, for a Spark job to replay.

Files are JSON Lines (one record per line), written append-only, and either complete or absent: a
writer appends to a hidden in-progress file and makes it visible only once it is complete, by
flushing, fsyncing, renaming it to its final name and fsyncing the directory. So a reader, and
``spark.read.json``, never sees half a record. Layout::

    <directory>/<topology>/<component>-<task>-<writer start>-<writer id>-<seq>.jsonl    complete
    <directory>/<topology>/.<same name>.inprogress                                  being written

Names are percent-encoded where they hold a character unsafe in a file name (``/``, ``%``, a
leading ``.``); readers go by the fields inside the records, never by parsing file names. Hadoop
and Spark skip files whose names start with ``.``, so ``spark.read.json("<directory>/*/*.jsonl")``
(or the directory itself) reads exactly the complete files.

One record (a single line in the file)::

    {"format": 1, "record_id": "5c0f...", "topology": "wc", "component": "sentences", "task": 3,
     "message_id": [0, 42],
     "source": {"kind": "kafka", "name": "words", "partition": 0, "offset": 42},
     "payload": {"key": {"base64": "a2V5"}, "value": {"base64": "aGVsbG8="}},
     "reason": {"kind": "error", "component": "split", "message": "ValueError: bad word"},
     "attempts": 3, "first_failed_at": 1732323300.25, "last_failed_at": 1732323391.5,
     "written_at": 1732323391.52}

Values (the payload's key and value, and the message id) are written as JSON, with these
reversible encodings for what JSON cannot hold (``decode_value`` undoes them):

- ``bytes`` become ``{"base64": "<standard base64>"}`` (Spark: ``unbase64(payload.value.base64)``);
- a float NaN or infinity becomes ``{"float": "nan" | "inf" | "-inf"}``;
- a dict with a key that is not a str becomes ``{"pairs": [[key, value], ...]}``;
- a dict whose only key is one of those tags is wrapped as ``{"dict": {...}}``, so that no value
  of the message is ever mistaken for an encoding;
- tuples become lists.

Usage::

    with FailedMessageWriter("failed", "wc", "sentences", task=3) as writer:
        writer.write(FailedRecord(message_id=[0, 42], reason=reason, attempts=3,
                                  first_failed_at=t0, last_failed_at=t1, key=b"key",
                                  value=b"hello", source=SourceRef(kind="kafka", name="words",
                                                                   partition=0, offset=42)))
        writer.flush()      # durable and visible: now the spout may commit offset 43
    for record in read_failed("failed", topology="wc", reason="error"):
        ...

A writer is not thread-safe: each spout task owns one and calls it from its own thread.
"""

from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import json
import logging
import math
import os
import re
import secrets
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, TypedDict
from urllib.parse import quote, unquote

from .fail_reason import FailReason

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MiB = 1024 * 1024
FINAL_SUFFIX = ".jsonl"
INPROGRESS_SUFFIX = ".inprogress"
RECOVERING_SUFFIX = ".recovering"
# What follows "<component>-<task>-" in a name: writer start time (UTC), writer id, file sequence.
_SESSION_SEQ = r"\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{6}-\d+"
_WRITE_BUFFER = 256 * 1024
# Compact, and strict JSON (no NaN literal: encode_value spells non-finite floats out).
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


# ----- records


class SourceRef(TypedDict):
    """Where a message came from: ``kind`` (``"kafka"``, ``"log"``, ...), ``name`` (the topic or
    log path), ``partition`` and ``offset``."""

    kind: str
    name: str
    partition: int
    offset: int


def new_record_id() -> str:
    return uuid.uuid4().hex


@dataclass(slots=True)
class FailedRecord:
    """What a spout knows about a message that finally failed. The writer adds the topology,
    component, task and ``written_at``.

    ``message_id``, ``key`` and ``value`` may be any value a tuple may hold (str, bytes, int,
    float, bool, None, lists and dicts of them). ``source`` is None for spouts that read no
    partitioned source. ``reason`` is the last ``FailReason`` (or a mapping with ``kind``,
    ``component``, ``message``). Times are epoch seconds.
    """

    message_id: Any
    reason: FailReason | Mapping[str, Any]
    attempts: int
    first_failed_at: float
    last_failed_at: float
    key: Any = None
    value: Any = None
    source: SourceRef | None = None
    record_id: str = field(default_factory=new_record_id)


# ----- values: JSON with reversible encodings for what JSON lacks

_TAGS = frozenset(("base64", "float", "pairs", "dict"))


def encode_value(value: Any) -> Any:
    """``value`` as JSON-able data; ``decode_value`` gives it back (tuples come back as lists).
    Raises ``TypeError`` for a value of another type (a set, an object)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": binascii.b2a_base64(value, newline=False).decode("ascii")}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return {"pairs": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
        items = {k: encode_value(v) for k, v in value.items()}
        if len(items) == 1 and next(iter(items)) in _TAGS:
            return {"dict": items}
        return items
    raise TypeError(f"a {type(value).__name__} cannot be written to the failed-message log; "
                    f"use str, bytes, int, float, bool, None, or lists and dicts of those")


def decode_value(value: Any) -> Any:
    """The inverse of ``encode_value``."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "base64" and isinstance(inner, str):
            return base64.b64decode(inner)
        if tag == "float" and isinstance(inner, str):
            return float(inner)
        if tag == "pairs" and isinstance(inner, list):
            return {_hashable(decode_value(k)): decode_value(v) for k, v in inner}
        if tag == "dict" and isinstance(inner, dict):
            return {k: decode_value(v) for k, v in inner.items()}
    return {k: decode_value(v) for k, v in value.items()}


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def _reason_dict(reason: FailReason | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(reason, FailReason):
        return {"kind": reason.kind, "component": reason.component, "message": reason.message}
    if not isinstance(reason, Mapping) or not isinstance(reason.get("kind"), str):
        raise TypeError(f"reason must be a FailReason or a mapping with a str 'kind', "
                        f"got {reason!r}")
    return {"kind": reason["kind"], "component": reason.get("component"),
            "message": reason.get("message")}


def _source_dict(source: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if source is None:
        return None
    missing = [k for k in ("kind", "name", "partition", "offset") if k not in source]
    if missing:
        raise ValueError(f"source {dict(source)!r} lacks {', '.join(missing)}")
    return {"kind": str(source["kind"]), "name": str(source["name"]),
            "partition": int(source["partition"]), "offset": int(source["offset"])}


def record_to_dict(record: FailedRecord, topology: str, component: str, task: int,
                   written_at: float) -> dict[str, Any]:
    """The record as written: a JSON-able dict holding every field."""
    encoded = []
    for name, label in (("message_id", "message id"), ("key", "payload key"),
                        ("value", "payload value")):
        try:
            encoded.append(encode_value(getattr(record, name)))
        except TypeError as exc:
            raise TypeError(f"failed message {record.message_id!r} of {component!r}, "
                            f"{label}: {exc}") from None
    message_id, key, value = encoded
    return {
        "format": FORMAT_VERSION,
        "record_id": record.record_id,
        "topology": topology,
        "component": component,
        "task": task,
        "message_id": message_id,
        "source": _source_dict(record.source),
        "payload": {"key": key, "value": value},
        "reason": _reason_dict(record.reason),
        "attempts": int(record.attempts),
        "first_failed_at": float(record.first_failed_at),
        "last_failed_at": float(record.last_failed_at),
        "written_at": written_at,
    }


def decode_record(data: dict[str, Any]) -> dict[str, Any]:
    """A record as read from a file, with its message id, key and value decoded."""
    out = dict(data)
    out["message_id"] = decode_value(data.get("message_id"))
    payload = data.get("payload") or {}
    out["payload"] = {"key": decode_value(payload.get("key")),
                      "value": decode_value(payload.get("value"))}
    return out


# ----- the layout: the one place that spells paths


def _file_safe(name: str) -> str:
    safe = quote(name, safe="")
    # A leading "." would hide the file from readers (and from Spark), so encode it too.
    return "%2E" + safe[1:] if safe.startswith(".") else safe


def topology_dir(directory: str | os.PathLike, topology: str) -> Path:
    return Path(directory) / _file_safe(topology)


def _own_inprogress(component: str, task: int) -> re.Pattern[str]:
    prefix = re.escape(f".{_file_safe(component)}-{task}-")
    return re.compile(prefix + _SESSION_SEQ + re.escape(FINAL_SUFFIX + INPROGRESS_SUFFIX))


def _is_final(name: str) -> bool:
    return name.endswith(FINAL_SUFFIX) and not name.startswith(".")


def _is_inprogress(name: str) -> bool:
    return name.startswith(".") and name.endswith(FINAL_SUFFIX + INPROGRESS_SUFFIX)


def _utc_stamp(t: float) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(path: Path) -> None:
    """``mkdir -p`` whose new entries survive a crash (each new directory's parent is fsynced)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:
            pass  # made by a writer of another task meanwhile
        _fsync_dir(new.parent)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


# ----- writing


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
        _make_dirs(self.path)
        # Start time and a random id make this writer's names unique, so a rename never replaces
        # another writer's file, even one of this task restarted within the same millisecond.
        self._name_prefix = (f"{_file_safe(component)}-{self.task}-{_utc_stamp(time.time())}-"
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
            if _same_file(fd, inprogress):
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
    pattern = _own_inprogress(component, task)
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
        if not _same_file(fd, path):
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
            temp = tdir / (name + RECOVERING_SUFFIX)
            with open(temp, "wb") as out:
                out.write(kept)
                out.flush()
                os.fsync(out.fileno())
            os.rename(temp, final)
        os.unlink(path)
        _fsync_dir(tdir)
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


# ----- reading


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
    prefix = f"{_file_safe(component)}-" if component is not None else ""
    return [tdir / name for tdir in _topology_dirs(Path(directory), topology)
            for name in sorted(os.listdir(tdir)) if _is_final(name) and name.startswith(prefix)]


def inprogress_files(directory: str | os.PathLike, topology: str | None = None) -> list[Path]:
    """Files being written now, or left by a crashed writer; readers do not read them."""
    return [tdir / name for tdir in _topology_dirs(Path(directory), topology)
            for name in sorted(os.listdir(tdir)) if _is_inprogress(name)]


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
