"""The offset-tracking spout: reads a partitioned log (Kafka, or stormlet's local log), tracks
every message to its ack, retries failures with backoff, dead-letters what keeps failing, and
commits, per partition, the offset below which everything is done.

    from stormlet.sources import LogSpout, RetryPolicy

    spout = LogSpout("data/events", spout_id="events-reader",
                     retry=RetryPolicy(initial_delay=1, max_attempts=5))
    builder.set_spout("events", spout, parallelism=2)

Partitions are dealt to the spout's tasks by task index (partition i of the sorted list goes to
task index i mod tasks). Commits go to ZooKeeper at ``<zk_root>/<spout_id>/<partition>`` on a
cluster, and to a directory (the local log's ``_offsets``) or memory in local mode.

Where a task starts reading a partition:

- the commit, if this same topology instance wrote it (a restarted or rebalanced worker);
- otherwise ``first_offset``: ``committed_or_earliest`` (the default) and ``committed_or_latest``
  resume from an earlier topology's commit and fall back to the earliest or latest offset;
  ``earliest`` and ``latest`` ignore earlier topologies' commits. ``start_over=True`` (or the
  topology config ``offsets.start.over``) means ``earliest``.

Guarantees: ``at_least_once`` (the default: tracked emits, commit what is done),
``at_most_once`` (commit past a batch before emitting it, untracked), ``none`` (untracked, commit
what was emitted).

Under the topology's ``topology.guarantee: effectively-once`` (with stateful bolts), the spout
follows the checkpoints instead (``checkpointed.CheckpointFollower``): it is held while one is
prepared, saves its positions with it, rewinds to them at each recovery, and never retries a
tuple alone; its commits then hold the last checkpoint's positions.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import Any, Callable, cast

from .. import config as cfg
from ..components import Spout
from ..fail_reason import ERROR, FAIL, FailReason
from ..failed import DeadLetterBox, FailedRecord, SourceRef
from ..failed.dead_letters import DEFAULT_DIR
from ..state.checkpoint import CHECKPOINT_COMPONENT
from ..state.exactly import effectively_once
from .offset_store import MemoryOffsetStore, OffsetStore, StaleCommit, ZooKeeperOffsetStore
from .partition_offsets import DeadLetter, PartitionOffsets
from .retry import RetryPolicy
from .source import OffsetOutOfRange, Record, Source, SourceError

log = logging.getLogger(__name__)

FIRST_OFFSETS = ("committed_or_earliest", "committed_or_latest", "earliest", "latest")
OUT_OF_RANGE_POLICIES = ("earliest", "latest", "error")
GUARANTEES = ("at_least_once", "at_most_once", "none")
DEFAULT_FIELDS = ("partition", "offset", "key", "value")
# A commit (or other housekeeping) that held next_tuple this long ends the call without an emit:
# the worker may have been fenced off from ZooKeeper meanwhile (that is why a commit blocks), and
# the next call comes only if its spouts are still active.
SLOW_HOUSEKEEPING_SECS = 0.5


def default_translate(record: Record) -> list:
    """A record's values in ``DEFAULT_FIELDS`` order."""
    return [record.partition, record.offset, record.key, record.value]


class OffsetOutOfRangeError(SourceError):
    """A partition's position left the log under ``out_of_range="error"``; the partition stops."""


class OffsetSpout(Spout):
    """A reliable spout over any ``Source``; ``LogSpout`` and ``KafkaSpout`` fill in the source.

    Options (all keyword)::

      spout_id: names the commits; the same id resumes where the last topology left off.
      fields / translate: output fields, and the function turning a ``Record`` into values.
      first_offset: see the module doc; start_over: ``first_offset="earliest"``.
      retry: a ``RetryPolicy`` (exponential backoff, then dead-letter).
      max_uncommitted: per partition, stop fetching new messages while this many offsets lie
        between the commit point and the emit point; due retries are still emitted.
      out_of_range: ``earliest``, ``latest`` or ``error``, when the position leaves the log.
      guarantee: ``at_least_once``, ``at_most_once`` or ``none``.
      commit_interval: seconds between commits (also on deactivate and close).
      offsets: an ``OffsetStore``; default ZooKeeper on a cluster, else the source's choice.
      zk_root: where commits go in ZooKeeper (default: the cluster's, ``zookeeper.offsets_path``).
      failed_dir: the failed-message log (default: topology config ``stormlet.failed.dir``,
        else the source's choice).
    """

    def __init__(self, source: Source | None, *, spout_id: str,
                 fields: list[str] | tuple[str, ...] = DEFAULT_FIELDS,
                 translate: Callable[[Record], list] = default_translate,
                 first_offset: str = "committed_or_earliest", start_over: bool = False,
                 retry: RetryPolicy | None = None, max_uncommitted: int = 100_000,
                 out_of_range: str = "earliest", guarantee: str = "at_least_once",
                 commit_interval: float = 2.0, fetch_max: int = 500,
                 partition_refresh_interval: float = 30.0, offsets: OffsetStore | None = None,
                 zk_root: str | None = None, failed_dir: str | None = None):
        _check_choice("first_offset", first_offset, FIRST_OFFSETS)
        _check_choice("out_of_range", out_of_range, OUT_OF_RANGE_POLICIES)
        _check_choice("guarantee", guarantee, GUARANTEES)
        if not isinstance(spout_id, str) or not spout_id or "/" in spout_id:
            raise ValueError(f"spout_id must be a non-empty string without '/', got {spout_id!r}")
        for name, value in (("max_uncommitted", max_uncommitted), ("fetch_max", fetch_max)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if commit_interval <= 0:
            raise ValueError(f"commit_interval must be > 0 seconds, got {commit_interval!r}")
        # None only until open, for a LogSpout whose path is in the topology config.
        self.source = cast(Source, source)
        self.spout_id = spout_id
        self.outputs = list(fields)
        self.translate = translate
        self.first_offset = "earliest" if start_over else first_offset
        self.retry = retry or RetryPolicy()
        self.max_uncommitted = max_uncommitted
        self.out_of_range = out_of_range
        self.guarantee = guarantee
        self.commit_interval = commit_interval
        self.fetch_max = fetch_max
        self.partition_refresh_interval = partition_refresh_interval
        self.offsets = offsets
        self.zk_root = zk_root
        self.failed_dir = failed_dir

    def zookeeper_commits(self) -> dict | None:
        """Where its commits go on a cluster, for nimbus to make that node its topology's at
        submit: ``{"spout_id", "zk_root"}`` (``zk_root`` None: the cluster's offsets root);
        None when it was given a store of its own."""
        if self.offsets is not None:
            return None
        return {"spout_id": self.spout_id, "zk_root": self.zk_root}

    # ----- what a source-specific subclass may choose

    def local_offset_store(self) -> OffsetStore:
        """Where commits go in local mode (no ZooKeeper in the config)."""
        return MemoryOffsetStore(self.source.name)

    def default_failed_dir(self) -> str:
        return os.path.abspath(DEFAULT_DIR)

    def source_kind(self) -> str:
        return "log"

    # ----- lifecycle

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.component_id = context.component_id
        self.task_id = context.task_id
        self.task_index = context.this_task_index
        self.task_count = len(context.get_this_component_tasks())
        self.topology_name = context.topology_name
        self.topology_id = conf.get(cfg.STORMLET_TOPOLOGY_ID) or context.topology_name
        if conf.get(cfg.OFFSETS_START_OVER):
            self.first_offset = "earliest"
        self.store = self.offsets or self._default_store(conf)
        self.failed_dir = (self.failed_dir or conf.get(cfg.STORMLET_FAILED_DIR)
                           or self.default_failed_dir())
        self.dead_letters = DeadLetterBox(self.failed_dir, self.topology_name,
                                          self.component_id, self.task_id, attempts=None)
        self.tracked = self.guarantee == "at_least_once"
        self.partitions: dict[int, PartitionOffsets] = {}
        self.saved: dict[int, int] = {}       # partition -> offset last written to the store
        self.halted: set[int] = set()         # partitions stopped by out_of_range="error"
        self.paused: set[int] = set()         # partitions at the uncommitted cap
        self.buffer: deque[Record] = deque()  # fetched, not yet emitted
        self.late_acks = 0
        # Retries are scheduled on the monotonic clock; dead letters record wall-clock times.
        self.wall_clock_offset = time.time() - time.monotonic()
        self.next_due = float("inf")
        now = time.monotonic()
        self.next_commit = now + self.commit_interval
        self.next_refresh = now + self.partition_refresh_interval
        self._source_trouble_logged = 0.0
        self._store_trouble_logged = 0.0
        self.stale_logged: set[int] = set()   # partitions whose commit another task moved on
        self._reassign(self._my_partitions(self.source.partitions()))
        self.follower = None
        if effectively_once(conf) and context.get_component_tasks(CHECKPOINT_COMPONENT):
            from .checkpointed import CheckpointFollower  # imported here: only in that mode

            self.follower = CheckpointFollower(self, conf, context)

    def _default_store(self, conf: dict[str, Any]) -> OffsetStore:
        hosts = conf.get(cfg.STORMLET_ZOOKEEPER_CONNECT)
        if hosts:
            from ..zookeeper import offsets_path

            root = self.zk_root or offsets_path(conf.get(cfg.STORMLET_ZOOKEEPER_ROOT))
            return ZooKeeperOffsetStore(hosts, root)
        return self.local_offset_store()

    def deactivate(self) -> None:
        self.commit()

    # ----- effectively-once (see checkpointed.py)

    def outstanding(self) -> int:
        """Tuples emitted and not yet acked, over all partitions."""
        return sum(state.outstanding() for state in self.partitions.values())

    def positions(self) -> dict[int, int]:
        """Per partition, the next offset to emit."""
        return {p: state.emitted_to for p, state in self.partitions.items()}

    def rewind_to_checkpoint(self, positions: dict[int, int]) -> None:
        """Forget what is in flight and read each partition again from ``positions`` (a
        partition it does not name starts where a new one would)."""
        starts = {p: positions[p] if p in positions else self._start_offset(p)[0]
                  for p in self.partitions}
        self.source.assign(starts)
        self.partitions = {p: PartitionOffsets(p, start, self.retry)
                           for p, start in starts.items()}
        self.buffer.clear()
        self.paused.clear()
        self.halted.clear()
        self.next_due = float("inf")

    def close(self) -> None:
        try:
            self.commit()
            for p, m in self.partition_metrics().items():
                log.info("%s:%d %s partition %d: committed %d, lag %d, dead-lettered %d",
                         self.component_id, self.task_id, self.source.name, p, m["committed"],
                         m["lag"], m["dead_lettered"])
        finally:
            if self.follower is not None:
                self.follower.close()
            self.dead_letters.close()
            self.source.close()
            self.store.close()

    # ----- partitions

    def _my_partitions(self, partitions: list[int]) -> list[int]:
        return [p for i, p in enumerate(sorted(partitions))
                if i % self.task_count == self.task_index]

    def _reassign(self, mine: list[int]) -> None:
        """Take up new partitions and let go of lost ones. A lost partition is committed first;
        acks that arrive for it later are ignored (its new owner resumes from the commit).
        Each new partition's start is read, and the source re-pointed, before the spout's own
        state changes: if either fails, the spout goes on reading what it read (at a refresh,
        the next one tries again; at open, the open fails)."""
        starts = {p: self._start_offset(p) for p in mine if p not in self.partitions}
        lost = [p for p in self.partitions if p not in mine]
        if lost:
            self.commit()
        # Every partition is read again from its emit point; the source keeps a partition that
        # stays here paused, as self.paused still says.
        positions = {p: state.emitted_to for p, state in self.partitions.items() if p in mine}
        positions.update((p, start) for p, (start, _why) in starts.items())
        self.source.assign(positions)
        if lost:
            for p in lost:
                del self.partitions[p]
                self.saved.pop(p, None)
                self.halted.discard(p)
                self.paused.discard(p)
            log.info("%s:%d gave up partitions %s of %s", self.component_id, self.task_id, lost,
                     self.source.name)
        for p, (start, why) in starts.items():
            self.partitions[p] = PartitionOffsets(p, start, self.retry)
            log.info("%s:%d reads %s partition %d from offset %d (%s)", self.component_id,
                     self.task_id, self.source.name, p, start, why)
        # What was buffered comes again from those positions.
        self.buffer.clear()

    def _start_offset(self, partition: int) -> tuple[int, str]:
        record = self.store.load(self.spout_id, partition)
        if record is not None:
            writer = record.get("topology")
            if isinstance(writer, dict) and writer.get("id") == self.topology_id:
                return record["offset"], "this topology's commit"
            if self.first_offset.startswith("committed_or_"):
                return record["offset"], f"committed by {record.get('topology')}"
        if self.first_offset.endswith("earliest"):
            return self.source.earliest(partition), f"first_offset {self.first_offset}"
        return self.source.latest(partition), f"first_offset {self.first_offset}"

    # ----- emitting

    def next_tuple(self) -> None:
        now = time.monotonic()
        if now >= self.next_commit:
            self._housekeeping(now)
            if time.monotonic() - now > SLOW_HOUSEKEEPING_SECS:
                return
        if self.follower is not None and not self.follower.may_emit():
            return
        if now >= self.next_due:
            retry = self._due_retry(now)
            if retry is not None:
                self._emit(retry, self.partitions[retry.partition])
                return
        buffer = self.buffer
        if not buffer and not self._fill():
            return
        record = buffer.popleft()
        state = self.partitions[record.partition]
        if self.tracked:
            state.emitted(record)
        else:
            state.emitted_to = record.offset + 1
        self._emit(record, state)

    def _emit(self, record: Record, state: PartitionOffsets) -> None:
        try:
            values = self.translate(record)
            if self.follower is not None:
                self.collector.emit(values, msg_id=(record.partition, record.offset,
                                                    self.follower.epoch))
            elif self.tracked:
                self.collector.emit(values, msg_id=(record.partition, record.offset))
            else:
                self.collector.emit(values)
        except Exception as exc:
            # A record that cannot be turned into a tuple (translate raised, or a value that
            # cannot be serialized) is dead-lettered, never silently passed by the commit.
            reason = FailReason(ERROR, self.component_id,
                                f"cannot emit it: {type(exc).__name__}: {exc}")
            now = time.monotonic()
            letter = state.give_up(record.offset, now, reason) if self.tracked else None
            self._dead_letter(letter or DeadLetter(record, 1, now, now, reason))
            raise  # and the executor reports the error

    def _due_retry(self, now: float) -> Record | None:
        found = None
        for state in self.partitions.values():
            ready = state.due_retries(now, limit=1)
            if ready:
                found = ready[0]
                break
        dues = [d for d in (s.next_due() for s in self.partitions.values()) if d is not None]
        self.next_due = min(dues, default=float("inf"))
        return found

    def _fill(self) -> bool:
        """Fetch the next batch into the buffer; False when nothing came."""
        self._apply_cap()
        try:
            records = self.source.fetch(self.fetch_max, 0.0)
        except OffsetOutOfRange as exc:
            self._jump(exc)
            return False
        except SourceError as exc:
            # The source may come back (a broker restarting): keep going, say so now and then.
            now = time.monotonic()
            if now - self._source_trouble_logged > 10:
                self._source_trouble_logged = now
                log.warning("%s:%d cannot read %s: %s", self.component_id, self.task_id,
                            self.source.name, exc)
            return False
        if not records:
            return False
        if self.guarantee == "at_most_once":
            # Commit past the batch before any of it is emitted: a crash loses, never repeats.
            ends: dict[int, int] = {}
            for record in records:
                ends[record.partition] = record.offset + 1
            if not all([self._save(p, end) for p, end in ends.items()]):
                # Not committed, so not emitted: read the batch again once the store is back.
                for p in ends:
                    self.source.seek(p, self.partitions[p].emitted_to)
                return False
        self.buffer.extend(records)
        return True

    def _apply_cap(self) -> None:
        cap = self.max_uncommitted
        full = {p for p, s in self.partitions.items() if s.uncommitted() >= cap} | self.halted
        if full != self.paused:
            pause, resume = full - self.paused, self.paused - full
            if pause:
                self.source.pause(sorted(pause))
            if resume:
                self.source.resume(sorted(resume))
            self.paused = full

    def _jump(self, exc: OffsetOutOfRange) -> None:
        p = exc.partition
        state = self.partitions.get(p)
        if state is None:
            return
        where = (f"{self.component_id}:{self.task_id}: {self.source.name} partition {p}: offset "
                 f"{exc.requested} is out of range (the log holds {exc.earliest} to "
                 f"{exc.latest - 1})")
        if self.out_of_range == "error":
            self.halted.add(p)
            self.source.pause([p])
            raise OffsetOutOfRangeError(f"{where}; out_of_range='error': this partition stops "
                                        f"until the topology is restarted with another policy")
        target = exc.earliest if self.out_of_range == "earliest" else exc.latest
        skipped = max(0, target - exc.requested)
        dropped = state.restart_at(target)
        self.buffer = deque(r for r in self.buffer if r.partition != p)
        self.source.seek(p, target)
        log.warning("%s; policy %r: reading on from %d, %d messages skipped%s", where,
                    self.out_of_range, target, skipped,
                    f", {len(dropped)} unfinished ones dead-lettered" if dropped else "")
        reason = FailReason(FAIL, self.component_id, f"out of range: {where}")
        now = time.monotonic()
        for record in dropped:
            self._dead_letter(DeadLetter(record, 0, now, now, reason))

    # ----- acks and fails

    def ack(self, msg_id: Any) -> None:
        if self.follower is not None and not self.follower.owns(msg_id):
            self.late_acks += 1   # of an epoch before the last rewind
            return
        state = self.partitions.get(msg_id[0])
        if state is None or not state.acked(msg_id[1]):
            self.late_acks += 1

    def fail(self, msg_id: Any, reason: Any) -> None:
        # ``closed``: the runtime's collector says whether the topology is stopping; another
        # SpoutOutputCollector (the testing kit's) need not have it.
        if getattr(self.collector, "closed", False):
            # The topology is stopping, the message did not fail: leave it uncommitted, and the
            # next run reads it again. Counting it as an attempt would dead-letter good messages.
            return
        if self.follower is not None:
            # Never retried alone: the whole topology rolls back and rewinds.
            if self.follower.owns(msg_id):
                self.follower.failed()
            return
        state = self.partitions.get(msg_id[0])
        if state is None:
            self.late_acks += 1
            return
        now = time.monotonic()
        letter = state.failed(msg_id[1], now, reason)
        if letter is not None:
            self._dead_letter(letter)
        else:
            due = state.next_due()
            if due is not None and due < self.next_due:
                self.next_due = due

    def _dead_letter(self, letter: DeadLetter) -> None:
        record = letter.record
        wall = self.wall_clock_offset
        self.dead_letters.put(FailedRecord(
            message_id=[record.partition, record.offset], reason=letter.reason,
            attempts=letter.attempts, first_failed_at=letter.first_failed_at + wall,
            last_failed_at=letter.last_failed_at + wall, key=record.key, value=record.value,
            source=SourceRef(kind=self.source_kind(), name=self.source.name,
                             partition=record.partition, offset=record.offset)))

    # ----- commits

    def _housekeeping(self, now: float) -> None:
        self.next_commit = now + self.commit_interval
        self.commit()
        if now >= self.next_refresh:
            self.next_refresh = now + self.partition_refresh_interval
            try:
                mine = self._my_partitions(self.source.partitions())
            except SourceError as exc:
                log.warning("%s:%d cannot list partitions of %s: %s", self.component_id,
                            self.task_id, self.source.name, exc)
                return
            if sorted(mine) != sorted(self.partitions):
                try:
                    self._reassign(mine)
                except (SourceError, OSError) as exc:
                    log.warning("%s:%d cannot move to partitions %s of %s yet (tried again in "
                                "%.0f s): %s", self.component_id, self.task_id, sorted(mine),
                                self.source.name, self.partition_refresh_interval, exc)

    def commit(self) -> None:
        """Write each partition's committable offset where it changed. Dead letters are made
        durable first: a commit must never pass a message that is in no log at all."""
        if self.guarantee == "at_most_once":
            return  # committed before emitting
        changes = {}
        for p, state in self.partitions.items():
            if self.follower is not None:   # the last checkpoint's positions, if any yet
                offset = self.follower.checkpointed.get(p)
                if offset is None:
                    continue
            else:
                offset = state.committable()
            if self.saved.get(p) != offset:
                changes[p] = offset
        if not changes:
            return
        if self.dead_letters.unflushed:
            self.dead_letters.flush()
        for p, offset in changes.items():
            if not self._save(p, offset):
                return

    def _save(self, partition: int, offset: int) -> bool:
        """Write one commit; False (logged) when the store cannot be reached. The store coming
        back (ZooKeeper restarting) is no reason to stop reading: the next commit catches up."""
        try:
            self.store.save(self.spout_id, partition, {
                "offset": offset, "partition": partition, "topic": self.source.name,
                "task": self.task_id, "time": time.time(),
                "topology": {"id": self.topology_id, "name": self.topology_name},
            })
        except StaleCommit as exc:
            # Another task of this topology has committed the partition past ours (our tasks
            # moved while this worker was out of touch, or before it started): that commit is
            # the one that counts, and ours resume once past it. Said once a partition.
            if partition not in self.stale_logged:
                self.stale_logged.add(partition)
                log.warning("%s:%d does not commit %s partition %d back: %s", self.component_id,
                            self.task_id, self.source.name, partition, exc)
            self.saved[partition] = offset
            return True
        except Exception as exc:  # kazoo's connection errors, OSError: all mean "not now"
            now = time.monotonic()
            if now - self._store_trouble_logged > 10:
                self._store_trouble_logged = now
                log.warning("%s:%d cannot commit %s partition %d offset %d: %s: %s",
                            self.component_id, self.task_id, self.source.name, partition,
                            offset, type(exc).__name__, exc)
            return False
        self.saved[partition] = offset
        return True

    # ----- observing

    def partition_metrics(self) -> dict[int, dict[str, int]]:
        """Per partition: lag (messages after the commit point), in flight, retrying,
        committed offset, dead-lettered, acked, and lost (offsets a damaged file lost: -1 when
        the source cannot say now)."""
        found = {}
        for p, state in sorted(self.partitions.items()):
            committed = state.committable()
            try:
                lag = max(0, self.source.lag_end(p) - committed)
            except SourceError:
                lag = -1
            try:
                lost = self.source.lost(p)
            except (SourceError, OSError):
                lost = -1
            found[p] = {"lag": lag, "in_flight": len(state.in_flight),
                        "retrying": len(state.retrying), "committed": committed,
                        "dead_lettered": state.dead_lettered, "acked": state.acked_count,
                        "lost": lost}
        return found


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
