"""The manifest of replays in ``<failed-dir>/.replays/``: each run's plan, its record, its
journal of chunks written and its summary, and the lock that lets one replay run at a time.

The directory's leading ``.`` makes readers of the failed log, and Spark, skip it, and no
topology's directory can be called that. Each run has a directory::

    .replays/<run id>/plan/part-*.parquet  the messages to write (written by the planning
                                         job's tasks): per row partition, dedup_key, topology,
                                         component, reason, and key_s/value_s (a str) or
                                         key_b/value_b (bytes); part-NNNNN.parquet holds all of
                                         target partition NNNNN's messages, in the order
                                         written (runs planned before the log was Parquet:
                                         part-*.json, as Spark named them)
    .replays/<run id>/run.json           written once the plan is complete and fsynced: run id,
                                         filters, target, its partition count and how messages
                                         were partitioned, chunk size, counts
    .replays/<run id>/journal.jsonl      one fsynced line per chunk: "start" (with the target's
                                         end offsets) before writing it, "done" (with the
                                         offsets written) after
    .replays/<run id>/summary.json       written when every chunk is done: the run is complete
    .replays/lock                        flock'ed by the replay running now

Every planned message (complete run or not) counts as replayed for later runs, so running the same
replay twice replays nothing the second time. A run directory without ``run.json`` is what a
replay that died while planning left; it wrote nothing, and the next replay removes it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

from ...durable import fsync_dir, replace_atomically
from .errors import ReplayError

log = logging.getLogger(__name__)

REPLAYS_DIR = ".replays"
LOCK_FILE = "lock"
PLAN_DIR = "plan"
RUN_FILE = "run.json"
JOURNAL_FILE = "journal.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FORMAT = "stormlet-replay-run"
RUN_VERSION = 1


def _write_json(path: Path, data: dict[str, Any]) -> None:
    replace_atomically(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def _fsync_tree(path: Path) -> None:
    """fsync the files Spark wrote (its local committer does not), then their directories: the
    plan must be durable before run.json makes it count."""
    for directory, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)
    fsync_dir(path.parent)


class Run:
    """One run's directory in the manifest (see the module doc)."""

    def __init__(self, path: Path):
        self.path = path
        self.id = path.name
        self.plan = path / PLAN_DIR
        self._journal: Any = None

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL_FILE

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.path / RUN_FILE).read_text())

    def planned(self) -> bool:
        return (self.path / RUN_FILE).exists()

    def finished(self) -> bool:
        return (self.path / SUMMARY_FILE).exists()

    def commit(self, meta: dict[str, Any]) -> None:
        """Make the complete plan durable, then write ``run.json`` (``meta`` with the format,
        version, run id and creation time): from here on the plan's messages count as replayed,
        and a crash leaves a run that the next replay finishes."""
        _fsync_tree(self.plan)
        _write_json(self.path / RUN_FILE, {"format": RUN_FORMAT, "version": RUN_VERSION,
                                           "run_id": self.id, "created_at": time.time(), **meta})

    def record(self, **entry: Any) -> None:
        """Append a journal line and make it durable before returning."""
        if self._journal is None:
            new = not self.journal_path.exists()
            self._journal = open(self.journal_path, "ab")
            if new:
                fsync_dir(self.path)
        self._journal.write((json.dumps(entry, sort_keys=True) + "\n").encode())
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def entries(self) -> Iterator[dict[str, Any]]:
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return
        for line in data.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash: what it would have said was never durable
            if isinstance(entry, dict):
                yield entry

    def journal(self) -> tuple[set[int], dict[int, tuple[dict[int, int], dict[int, int]]]]:
        """(chunks done, {chunk started but not done: (the target's end offset per partition
        when its latest attempt began, how many of its messages per partition had landed
        before that attempt)}). A resumed chunk is journaled again, so a second crash is
        measured from where the second attempt began."""
        done: set[int] = set()
        started: dict[int, tuple[dict[int, int], dict[int, int]]] = {}
        for entry in self.entries():
            if entry.get("state") == "start":
                started[entry["chunk"]] = ({int(p): o for p, o in entry["ends"].items()},
                                           {int(p): n for p, n in entry.get("skip", {}).items()})
            elif entry.get("state") == "done":
                done.add(entry["chunk"])
        return done, {c: ends for c, ends in started.items() if c not in done}

    def written(self) -> dict[str, list[list[int]]]:
        """Per target partition, the offset ranges [first, end) the run's chunks wrote."""
        spans: dict[str, list[list[int]]] = {}
        for entry in self.entries():
            if entry.get("state") == "done":
                for p, span in entry["written"].items():
                    spans.setdefault(p, []).append(span)
        return spans

    def finish(self, summary: dict[str, Any]) -> None:
        self.close()
        _write_json(self.path / SUMMARY_FILE, summary)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


class Manifest:
    """The ``.replays`` directory of a failed-message log: its runs, and the lock."""

    def __init__(self, failed_dir: Path):
        self.path = failed_dir / REPLAYS_DIR
        self._lock_fd = -1

    def runs(self) -> list[Run]:
        if not self.path.is_dir():
            return []
        return [Run(p) for p in sorted(self.path.iterdir()) if p.is_dir()]

    def covered(self, filters: dict[str, Any]) -> set[str]:
        """The files (relative to the failed-message directory) that planned runs with exactly
        these filters read: every message of theirs that matched is replayed, an older copy,
        or unreplayable, so reading them again can add nothing."""
        covered: set[str] = set()
        for run in self.runs():
            if run.planned():
                meta = run.meta
                if meta.get("filters") == filters:
                    covered.update(meta.get("covers", ()))
        return covered

    def lock(self) -> None:
        """Exclude other replays on this failed-message log until ``unlock``."""
        self.path.mkdir(exist_ok=True)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ReplayError(f"another replay is running on {self.path.parent} (it holds "
                                  f"{self.path / LOCK_FILE}); wait for it to finish") from None
            raise
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def new_run(self) -> Run:
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
        path = self.path / run_id
        path.mkdir()
        fsync_dir(self.path)
        return Run(path)

    def drop_unplanned(self) -> None:
        """Remove the directories of runs that died while planning: they wrote nothing."""
        for run in self.runs():
            if not run.planned():
                log.info("replay: removing %s, left by a run that died before its plan was "
                         "complete (it wrote nothing)", run.path)
                shutil.rmtree(run.path, ignore_errors=True)
