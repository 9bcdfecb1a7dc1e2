"""Where a node's log files are, what a file's name says, and how one is read safely.

Under a daemon's data directory, ``logs/`` holds (Storm's ``workers-artifacts`` layout)::

    logs/<role>.log (.1 ...)                        a daemon's own log: supervisor.log, nimbus.log
    logs/workers/<topology id>/<port>/worker.log    a worker's log, rotated: worker.log.1 ... .N
    logs/workers/<topology id>/<port>/worker.out    its process's raw stdout and stderr (.1)
    logs/workers/<topology id>/<port>/samples.jsonl its sampled tuples (.1)
    logs/workers/<topology id>/<port>/stacks.txt    its threads' stacks, the last dump asked for
    logs/workers/<topology id>/<port>/profile-<UTC time>.svg   its last CPU profiles, as flame
                                                    graphs (node_introspection.py keeps a few)

A file is named by its path relative to ``logs/`` ("workers/wc-1764493200-a1b2c3/6700/worker.log"),
the one thing readers send back. ``resolve`` refuses any name that is not a regular file under
that directory: an absolute path, ``..``, a symbolic link anywhere on the way (one that points
out, or in: a file is reached by one name only), or a missing file, each saying why. The
node service (node_service.py) serves nothing else.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from .names import check_topology_id, is_topology_id

LOGS_DIR = "logs"
WORKERS_DIR = "workers"
WORKER_LOG = "worker.log"
WORKER_OUT = "worker.out"
SAMPLES = "samples.jsonl"
STACKS = "stacks.txt"
# A profile's file: PROFILE_PREFIX, its UTC time (PROFILE_TIME_FORMAT), PROFILE_SUFFIX.
PROFILE_PREFIX, PROFILE_SUFFIX, PROFILE_TIME_FORMAT = "profile-", ".svg", "%Y%m%dT%H%M%SZ"
# A file's kind, by its base name: a worker's log, its raw output, its samples, its last stack
# dump, one of its profiles; a daemon's log.
LOG, OUT, SAMPLES_KIND, STACKS_KIND, PROFILE, DAEMON = (
    "log", "out", "samples", "stacks", "profile", "daemon")
_WORKER_KINDS = {WORKER_LOG: LOG, WORKER_OUT: OUT, SAMPLES: SAMPLES_KIND, STACKS: STACKS_KIND}
DAEMON_SUFFIX = ".log"
# The most one read returns.
MAX_READ_BYTES = 1024 * 1024
# A worker directory of a topology no longer here is removed once nothing in it changed for this
# long (Storm's logviewer cleans up the same way): long enough to read why a topology died.
RETENTION_SECS = 7 * 24 * 3600.0


def logs_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / LOGS_DIR


def worker_log_dir(data_dir: str | Path, topology_id: str, port: int) -> Path:
    """The directory of the worker of ``topology_id`` on ``port``, under a supervisor's data
    directory."""
    return logs_dir(data_dir) / WORKERS_DIR / check_topology_id(topology_id) / str(int(port))


def worker_log_file(log_dir: Path) -> Path:
    return log_dir / WORKER_LOG


def worker_out_file(log_dir: Path) -> Path:
    return log_dir / WORKER_OUT


def samples_file(log_dir: Path) -> Path:
    return log_dir / SAMPLES


def profile_file_name(when: float) -> str:
    """The base name of a profile taken at ``when`` (epoch seconds): names sort by time."""
    stamp = time.strftime(PROFILE_TIME_FORMAT, time.gmtime(when))
    return f"{PROFILE_PREFIX}{stamp}{PROFILE_SUFFIX}"


def is_profile_name(base: str) -> bool:
    return (base.startswith(PROFILE_PREFIX) and base.endswith(PROFILE_SUFFIX)
            and len(base) > len(PROFILE_PREFIX) + len(PROFILE_SUFFIX) and "/" not in base)


def daemon_log_file(data_dir: str | Path, role: str) -> Path:
    return logs_dir(data_dir) / f"{role}{DAEMON_SUFFIX}"


def worker_file_name(topology_id: str, port: int, base: str = WORKER_LOG) -> str:
    """The name (relative to ``logs/``) of a worker's file: what readers ask for."""
    return f"{WORKERS_DIR}/{check_topology_id(topology_id)}/{int(port)}/{base}"


# ----- what a name says


class LogFile(NamedTuple):
    """What a file's name says: its kind, whose it is (a worker's topology and port, or a
    daemon's role), and its generation (0: the current file; N: rotated, ``.N``)."""

    name: str
    kind: str
    topology_id: str | None
    port: int | None
    role: str | None
    generation: int

    @property
    def current(self) -> str:
        """The name of the current file of the same series (this one's, rotated or not)."""
        return self.name if not self.generation else self.name.rsplit(".", 1)[0]


def _generation(file_name: str) -> tuple[str, int]:
    """("worker.log", 3) for "worker.log.3"; (the name, 0) for a current file."""
    base, dot, number = file_name.rpartition(".")
    if dot and number.isdigit() and base:
        return base, int(number)
    return file_name, 0


def identify(name: str) -> LogFile | None:
    """What ``name`` (relative to ``logs/``) is, or None for a name of no known kind."""
    parts = name.split("/")
    if len(parts) == 4 and parts[0] == WORKERS_DIR and is_topology_id(parts[1]) \
            and parts[2].isdigit():
        if is_profile_name(parts[3]):   # never rotated: each is a file of its own
            return LogFile(name, PROFILE, parts[1], int(parts[2]), None, 0)
        base, generation = _generation(parts[3])
        kind = _WORKER_KINDS.get(base)
        if kind is not None:
            return LogFile(name, kind, parts[1], int(parts[2]), None, generation)
    elif len(parts) == 1:
        base, generation = _generation(parts[0])
        if base.endswith(DAEMON_SUFFIX) and len(base) > len(DAEMON_SUFFIX):
            return LogFile(name, DAEMON, None, None, base[:-len(DAEMON_SUFFIX)], generation)
    return None


def list_files(root: Path, topology_id: str | None = None) -> list[dict]:
    """Every file of a known kind under ``root`` (a ``logs/`` directory), or only the workers'
    files of ``topology_id``: its name, kind, topology_id, port, role, generation, size, mtime
    and inode (a reader following a file sees it rotated: its name then holds another inode).
    Symbolic links are not followed, nor listed. In name order, rotated files after their
    current one, oldest last."""
    found = []
    if topology_id is None:
        candidates = [p for p in _entries(root)]
        for tid_dir in _entries(root / WORKERS_DIR):
            for port_dir in _entries(tid_dir):
                candidates += _entries(port_dir)
    else:
        topology_dir = root / WORKERS_DIR / check_topology_id(topology_id)
        candidates = [f for port_dir in _entries(topology_dir) for f in _entries(port_dir)]
    for path in candidates:
        name = path.relative_to(root).as_posix()
        described = identify(name)
        if described is None:
            continue
        try:
            info = path.lstat()
        except OSError:
            continue   # rotated away meanwhile
        if not stat.S_ISREG(info.st_mode):
            continue
        found.append({**described._asdict(), "size": info.st_size, "mtime": info.st_mtime,
                      "inode": info.st_ino})
    return sorted(found, key=lambda f: (f["name"].rsplit(".", 1)[0] if f["generation"]
                                        else f["name"], f["generation"]))


def _entries(directory: Path) -> list[Path]:
    """The entries of ``directory`` that are not symbolic links; none if it is missing."""
    try:
        return [directory / entry.name for entry in os.scandir(directory)
                if not entry.is_symlink()]
    except OSError:
        return []


# ----- reading one safely


class RefusedName(ValueError):
    """A name that is not a regular file under the logs directory; the message says why."""


def resolve(root: Path, name: object) -> Path:
    """The file ``name`` names under ``root``, refusing (``RefusedName``) an absolute path,
    ``..``, a symbolic link anywhere on the way, and anything but an existing regular file."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise RefusedName(f"refused {name!r}: name a file by its path under the logs "
                          f"directory, as the listing shows it")
    if name.startswith("/") or "\\" in name or PurePosixPath(name).is_absolute():
        raise RefusedName(f"refused {name!r}: an absolute path; name a file by its path under "
                          f"the logs directory, as the listing shows it")
    parts = PurePosixPath(name).parts
    if ".." in parts:
        raise RefusedName(f"refused {name!r}: '..' leads out of the logs directory")
    path = root
    for part in parts:
        path = path / part
        try:
            mode = path.lstat().st_mode
        except OSError:
            raise RefusedName(f"refused {name!r}: no such file in the logs directory") from None
        if stat.S_ISLNK(mode):
            raise RefusedName(f"refused {name!r}: {path.relative_to(root).as_posix()} is a "
                              f"symbolic link, which the logs directory serves none of")
    if not stat.S_ISREG(mode):
        raise RefusedName(f"refused {name!r}: not a regular file")
    return path


class Chunk(NamedTuple):
    """Bytes ``start`` to ``end`` of a file that was ``size`` bytes long, with its inode and
    modification time; ``line_start``: whether ``start`` begins a line."""

    data: bytes
    start: int
    end: int
    size: int
    inode: int
    mtime: float
    line_start: bool


def read_range(path: Path, offset: int = 0, length: int = MAX_READ_BYTES,
               from_end: bool = False) -> Chunk:
    """At most ``length`` bytes of ``path`` (a name ``resolve`` returned) from ``offset``; with
    ``from_end``, those ending ``offset`` bytes before its end (0: its last bytes)."""
    if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
        raise ValueError(f"offset and length must be whole numbers of at least 0, not "
                         f"{offset!r} and {length!r}")
    # O_NOFOLLOW: a symbolic link put in place since resolve looked is refused, not followed.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedName(f"refused {path.name!r}: not a regular file")
        size = info.st_size
        if from_end:
            end = max(0, size - offset)
            start = max(0, end - length)
        else:
            start = min(offset, size)
            end = min(size, start + length)
        data = os.pread(fd, end - start, start) if end > start else b""
        line_start = start == 0 or os.pread(fd, 1, start - 1) == b"\n"
        return Chunk(data, start, start + len(data), size, info.st_ino, info.st_mtime,
                     line_start)
    finally:
        os.close(fd)


def find_by_inode(path: Path, inode: int, backups: int = 100) -> Path | None:
    """``path`` or one of its rotated files (``path.1`` ...) that is the file with ``inode``:
    where a reader who followed ``path`` finds it after a rotation. None if it was removed."""
    for generation in range(backups + 1):
        candidate = path if generation == 0 else path.with_name(f"{path.name}.{generation}")
        try:
            info = candidate.lstat()
        except OSError:
            if generation:
                return None
            continue
        if info.st_ino == inode and stat.S_ISREG(info.st_mode):
            return candidate
    return None


# ----- keeping them bounded


def bound_output(path: Path, max_bytes: int) -> bool:
    """Keep a file another process appends to (a worker's ``worker.out``) from growing without
    bound: once over ``max_bytes``, its last ``max_bytes`` go to ``path.1`` and it is emptied
    in place (its writer holds it open, appending: a rename would not stop it). What the
    writer adds between the copy and the truncation is lost. Whether it was cut."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size <= max_bytes:
        return False
    backup = path.with_name(f"{path.name}.1")
    partial = path.with_name(f".{path.name}.1.partial")
    with open(path, "rb") as source, open(partial, "wb") as target:
        source.seek(max(0, size - max_bytes))
        shutil.copyfileobj(source, target, 1024 * 1024)
    os.replace(partial, backup)
    os.truncate(path, 0)
    return True


def remove_old_workers(root: Path, keep: set[str], older_than: float = RETENTION_SECS) -> list[str]:
    """Remove the worker directories under ``root`` of the topologies not in ``keep`` in which
    nothing changed for ``older_than`` seconds; returns the topology ids removed."""
    removed = []
    cutoff = time.time() - older_than
    for tid_dir in _entries(root / WORKERS_DIR):
        if tid_dir.name in keep or not tid_dir.is_dir():
            continue
        try:
            newest = max((p.lstat().st_mtime for p in tid_dir.rglob("*")),
                         default=tid_dir.lstat().st_mtime)
        except OSError:
            continue   # changing under us: not old
        if newest < cutoff:
            shutil.rmtree(tid_dir, ignore_errors=True)
            removed.append(tid_dir.name)
    return removed
