"""How far each spout that reads a partitioned log has got: what ``stormlet log describe`` shows
below the log's offsets.

A spout commits, per partition, the next offset it will read (offset_store.py) and the log it
read, as ``topic``: the log's absolute path (``LogSource.name``). Its lag on a partition is the
log's end offset minus that commit. Spouts in local mode commit in the log's own directory
(``<log>/_offsets``); spouts on a cluster commit in ZooKeeper (``zookeeper.offsets_path``), where
only the spout ids with a commit naming this log are taken.

    log = PartitionedLog("data/events")
    ranges = log.describe()                           # {partition: (start, end)}
    for spout in spout_lags(log.path, ranges, zk_hosts="127.0.0.1:2181"):
        print(spout.spout_id, spout.where, spout.total_lag)
        for p in spout.partitions:
            print(p.partition, p.committed, p.end, p.lag, p.notes)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .offset_store import FileOffsetStore, ZooKeeperOffsetStore
from .partitioned_log import offsets_dir

# Where a spout's commits were found: SpoutLag.where.
LOCAL = "local"
ZOOKEEPER = "ZooKeeper"


class CommitsUnavailable(Exception):
    """The commits in ZooKeeper could not be read; the message names the hosts and why."""


@dataclass(frozen=True)
class PartitionLag:
    """One partition, as one spout id has read it."""
    partition: int
    committed: int | None   # the next offset the spout reads; None: no commit for this partition
    end: int | None         # the log's end offset; None: the log has no such partition
    committed_at: object    # the commit's "time" as recorded (a Unix time), or None
    notes: tuple[str, ...]  # what looks wrong: unread messages lost to retention, and so on

    @property
    def lag(self) -> int | None:
        """Messages not yet read (negative beyond the end); None without both offsets."""
        if self.committed is None or self.end is None:
            return None
        return self.end - self.committed


@dataclass(frozen=True)
class SpoutLag:
    """Every partition (of the log, and any other it committed for) as one spout id has read it."""
    spout_id: str
    where: str              # LOCAL or ZOOKEEPER
    partitions: list[PartitionLag]

    @property
    def total_lag(self) -> int:
        """The messages it has yet to read; a commit beyond the end counts as none."""
        return sum(max(p.lag, 0) for p in self.partitions if p.lag is not None)


def spout_lags(path: str | os.PathLike, ranges: dict[int, tuple[int, int]],
               zk_hosts: str | None = None, zk_root: str | None = None,
               security: Any = None) -> list[SpoutLag]:
    """Every spout id with commits for the log at ``path``, whose partitions span ``ranges``
    (``PartitionedLog.describe()``): those in the log's directory, then, with ``zk_hosts``, those
    in the ZooKeeper of the cluster under ``zk_root`` (read with ``security``, a
    ``cluster.security.Security``; by default the process's); each in spout id order. Raises
    ``CommitsUnavailable`` when ZooKeeper cannot be read."""
    name = str(Path(path).resolve())
    found = [(spout_id, LOCAL, records)
             for spout_id, records in FileOffsetStore(offsets_dir(path)).all().items()]
    if zk_hosts:
        found += [(spout_id, ZOOKEEPER, records)
                  for spout_id, records in _zookeeper_commits(zk_hosts, zk_root, name,
                                                              security).items()]
    return [SpoutLag(spout_id, where, _partitions(records, ranges, name))
            for spout_id, where, records in found]


def _partitions(records: dict[int, dict], ranges: dict[int, tuple[int, int]],
                name: str) -> list[PartitionLag]:
    partitions = []
    for p in sorted(set(records) | set(ranges)):
        record = records.get(p)
        committed = record["offset"] if record is not None else None
        at = record.get("time") if record is not None else None
        if p not in ranges:
            partitions.append(PartitionLag(p, committed, None, at, ()))
            continue
        start, end = ranges[p]
        notes = []
        if record is not None and committed is not None:
            if committed < start:
                notes.append(f"{start - committed} unread messages were deleted by retention")
            if committed > end:
                notes.append("beyond the end: was the log re-created?")
            if record.get("topic") not in (None, name):
                notes.append(f"committed for {record['topic']}")
        partitions.append(PartitionLag(p, committed, end, at, tuple(notes)))
    return partitions


def _zookeeper_commits(hosts: str, root: str | None, log_name: str,
                       security: Any) -> dict[str, dict[int, dict]]:
    """Every spout id's commits for this log (by its path) where the cluster under ``root``
    keeps them (``zookeeper.offsets_path``)."""
    from ..zookeeper import offsets_path

    store = ZooKeeperOffsetStore(hosts, offsets_path(root), security)
    try:
        found = store.all()
    except Exception as exc:  # kazoo raises its own timeout types
        raise CommitsUnavailable(f"cannot read commits from ZooKeeper at {hosts}: "
                                 f"{exc or type(exc).__name__}") from None
    finally:
        store.close()
    return {spout_id: records for spout_id, records in found.items()
            if any(r.get("topic") == log_name for r in records.values())}
