"""A topology's event history: what happened to it and why, in order, whoever did it.

    stormlet events word_count --limit 20         # oldest first: time, kind, writer, text
    stormlet events word_count --kind worker-exited -f

Nimbus records what it decides: a submit, an activation or deactivation, a rebalance, where the
executors were assigned, a reassignment and its reason (a supervisor lost with its host, slots
free again to spread back, a corrupt assignment put back), a kill, the removal. Supervisors
record what they see of their workers: a start (and which restart of its slot), an exit with its
code or signal and its last words, a stop and its reason (no heartbeat, over its memory limit,
moved by a new assignment, its slot fenced by a new tenure), an environment that failed to
build. Other parts add kinds of their own through ``Nimbus.record_event`` (a kind is a lowercase
word, ``-`` between words).

Kept in ZooKeeper, so that a history survives a nimbus failover and a supervisor records
without nimbus (paths in zk_state.py's table):

    <root>/events/<tid>              the history's head: {"name", "limit", "submitted",
                                     "removed"}, made by nimbus at submit
    <root>/events/<tid>/e-<seq>      one event: {"time", "kind", "text", "writer", "detail"}

- **Concurrent writers.** Each event is a sequential node: ZooKeeper gives it the next number of
  its parent atomically, so no writer ever overwrites another's event, and the numbers order the
  events of every writer as ZooKeeper received them (``time`` is the writer's clock, which may
  disagree with the others').
- **Bounded.** A history keeps its ``limit`` newest events (``topology.events.max`` at submit). A
  writer that finds more than ``limit`` + ``limit // 10`` after its write deletes the oldest down
  to ``limit``: one trim per tenth of a history, not one per event. Two writers trimming at once
  delete the same oldest nodes, which is harmless.
- **Lifetime.** A history outlives its topology by KEEP_SECS, so that ``stormlet events`` still
  says what happened to a topology after it was killed: when nimbus removes the topology it marks
  the head ``removed``, and the leader deletes histories removed KEEP_SECS before (and marks any
  whose topology went without the mark). A supervisor's late event (a worker stopped because its
  topology is gone) still lands in the history; supervisors never create a head, so none
  writes into a history that was deleted.
- **Who reads.** The nodes have the daemons' ACL: nimbus and supervisors write, read-only
  credentials read, workers nothing. An event's text and detail can quote a credential (a dying
  worker's last error, pip's output): a reader without admin access gets them redacted
  (``redact_history``, redaction.py's rules), as nimbus's other reads do.
- **Never in the way.** Recording an event never fails what it records: a failure drops the event
  and is logged, once a minute while it lasts (``EventRecorder``, repeats.py).

Local mode keeps the same events in memory (``MemoryEvents``) and answers in the same shape.
What is recorded, one event's record and checks, and the answer's shape are
``event_history.py``'s, shared with local mode; this module re-exports them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from .. import config as cfg

# What is recorded, the record, its checks and the answer: shared with local mode, re-exported.
from ..event_history import (  # noqa: F401
    ACTIVATED,
    ASSIGNED,
    CORRUPT_ASSIGNMENT,
    DEACTIVATED,
    DEFAULT_READ,
    ENVIRONMENT_FAILED,
    FENCED,
    HEARTBEAT,
    KILLED,
    KINDS,
    LOST_SUPERVISOR,
    MAX_READ,
    MAX_TEXT,
    MEMORY,
    MOVED,
    REASSIGNED,
    REBALANCED,
    REMOVED,
    RESTART_ASKED,
    SPREAD_BACK,
    SUBMITTED,
    SUPERVISOR_STOPPING,
    UNASSIGNED,
    WAITING,
    WORKER_EXITED,
    WORKER_STARTED,
    WORKER_STOPPED,
    Event,
    MemoryEvents,
    NoHistory,
    check_query,
    history_answer,
    history_limit,
    redact_events,
    redact_history,
)
from ..repeats import Repeats
from .names import check_topology_id

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from .zk_state import ClusterState

log = logging.getLogger(__name__)

#: How long a history outlives its topology's removal.
KEEP_SECS = 3600.0
# How often the leader looks for histories to mark removed or to delete.
TIDY_SECS = 30.0
# A history is trimmed once it holds this fraction of its limit more than the limit.
TRIM_SLACK = 0.1
CHILD_PREFIX = "e-"


def trim_above(limit: int) -> int:
    """How many events a history of ``limit`` holds before a writer trims it."""
    return limit + int(limit * TRIM_SLACK)


# ----- texts a supervisor's events share with its log

def exit_text(code: int | None) -> str:
    """How a worker process ended, from its exit status as ``Popen`` gives it."""
    if code is None:
        return "is still running"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def slots_text(slots: Iterable[tuple[str, int]]) -> str:
    """Worker slots as an operator names them: ``host:port, host:port``."""
    return ", ".join(f"{host}:{port}" for host, port in sorted(set(slots))) or "none"


# ----- ZooKeeper

def _seq(name: str) -> int | None:
    digits = name[len(CHILD_PREFIX):]
    if not name.startswith(CHILD_PREFIX) or not digits.isdigit():
        return None
    return int(digits)


class EventStore:
    """The histories under ``<root>/events`` (the layout is in the module's docstring). Every
    call may raise kazoo's errors; ``EventRecorder`` is the writers' way in."""

    def __init__(self, client: KazooClient, root: str):
        # Not at import: local mode uses this module, and needs none of zk_state's imports.
        from .zk_state import events_path

        self.client = client
        self.base = events_path(root)

    def head_path(self, topology_id: str) -> str:
        return f"{self.base}/{check_topology_id(topology_id)}"

    def open(self, topology_id: str, name: str, limit: int,
             submitted: float | None = None) -> None:
        """Make the topology's head (nimbus: at submit, before anything can record). One that
        is there already is kept: a topology id is never given twice."""
        head = {"name": name, "limit": int(limit), "removed": None,
                "submitted": time.time() if submitted is None else submitted}
        try:
            self.client.create(self.head_path(topology_id), _encode(head), makepath=True)
        except NodeExistsError:
            pass

    def head(self, topology_id: str) -> dict[str, Any] | None:
        path = self.head_path(topology_id)
        try:
            data, _stat = self.client.get(path)
        except NoNodeError:
            return None
        return _decode(path, data) or {}

    def heads(self) -> dict[str, dict[str, Any]]:
        """Every history's head, by topology id (a head that does not parse: ``{}``)."""
        try:
            names = self.client.get_children(self.base)
        except NoNodeError:
            return {}
        pending = [(name, self.client.get_async(f"{self.base}/{name}")) for name in names]
        heads = {}
        for name, result in pending:
            try:
                data, _stat = result.get()
            except NoNodeError:
                continue
            heads[name] = _decode(f"{self.base}/{name}", data) or {}
        return heads

    def append(self, topology_id: str, event: dict[str, Any]) -> int:
        """Add ``event`` (``Event.stored``'s fields) to the topology's history, and trim it if
        it is due; its seq. ``NoHistory`` when the topology has no head."""
        head = self.head_path(topology_id)
        try:
            path = self.client.create(f"{head}/{CHILD_PREFIX}", _encode(event), sequence=True)
        except NoNodeError:
            raise NoHistory(f"topology {topology_id} has no event history") from None
        self._trim(head)
        seq = _seq(path.rsplit("/", 1)[-1])
        assert seq is not None, path
        return seq

    def _trim(self, head: str) -> None:
        try:
            data, stat = self.client.get(head)
        except NoNodeError:
            return
        limit = (_decode(head, data) or {}).get("limit")
        if not (isinstance(limit, int) and limit >= 1):
            limit = cfg.DEFAULTS[cfg.TOPOLOGY_EVENTS_MAX].default
        if stat.numChildren <= trim_above(limit):
            return
        names = sorted((s, n) for n in self.client.get_children(head)
                       if (s := _seq(n)) is not None)
        # Only the oldest of this listing go: whatever was written since is newer still.
        for _seq_number, name in names[:max(0, len(names) - limit)]:
            try:
                self.client.delete(f"{head}/{name}")
            except NoNodeError:   # another writer trimmed it
                pass

    def read(self, topology_id: str, limit: int, since: int | None = None,
             kind: str | None = None) -> list[Event]:
        """The topology's newest ``limit`` events after seq ``since`` (of ``kind``), oldest
        first; none when it has no history."""
        head = self.head_path(topology_id)
        try:
            names = self.client.get_children(head)
        except NoNodeError:
            return []
        newest_first = sorted(((s, n) for n in names if (s := _seq(n)) is not None
                               and (since is None or s > since)), reverse=True)
        found: list[Event] = []
        batch = max(limit, 32)
        for start in range(0, len(newest_first), batch):
            pending = [(s, n, self.client.get_async(f"{head}/{n}"))
                       for s, n in newest_first[start:start + batch]]
            for seq, name, result in pending:
                try:
                    data, _stat = result.get()
                except NoNodeError:   # trimmed since the listing
                    continue
                event = Event.of(seq, _decode(f"{head}/{name}", data))
                if event is not None and kind in (None, event.kind):
                    found.append(event)
                    if len(found) == limit:
                        return found[::-1]
        return found[::-1]

    def mark_removed(self, topology_id: str, when: float | None = None) -> None:
        """Say in the head when its topology was removed (from then on it is kept KEEP_SECS)."""
        path = self.head_path(topology_id)
        try:
            data, _stat = self.client.get(path)
        except NoNodeError:
            return
        head = _decode(path, data) or {}
        head["removed"] = time.time() if when is None else when
        self.client.set(path, _encode(head))

    def delete(self, topology_id: str) -> bool:
        """Delete the history; False when a writer added to it meanwhile (try again later)."""
        try:
            self.client.delete(self.head_path(topology_id), recursive=True)
        except NoNodeError:
            pass
        except NotEmptyError:
            return False
        return True


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True).encode("utf-8")


def _decode(path: str, data: bytes) -> dict[str, Any] | None:
    from .zk_state import decode_node  # see EventStore.__init__

    return decode_node(path, data)


def _describe(exc: BaseException) -> str:
    from .zk_state import describe  # see EventStore.__init__

    return describe(exc)


class EventRecorder:
    """Records one writer's events (a nimbus's, a supervisor's) in ZooKeeper, and never raises:
    an event that cannot be recorded is dropped and the failure logged, once a minute while it
    lasts. ``reopen(topology_id)``: make a missing head and say whether it did (nimbus, for a
    running topology submitted before it kept histories); without it, an event of a topology
    with no history is dropped (a supervisor's, after the history was deleted). Thread-safe."""

    def __init__(self, store: Callable[[], EventStore], writer: str,
                 reopen: Callable[[str], bool] | None = None):
        self._store = store
        self.writer = writer
        self._reopen = reopen
        self._lock = threading.Lock()
        self._repeats = Repeats(log)
        # Lasting conditions recorded once (``condition``): key -> the text recorded.
        self._conditions: dict[Hashable, str] = {}

    def record(self, topology_id: str, kind: str, text: str, **detail: Any) -> int | None:
        """Add an event to the topology's history; its seq, or None if it was dropped."""
        try:
            event = Event.stored(kind, text, self.writer, detail)
        except ValueError as exc:   # a caller's mistake: said at once, whatever it records
            log.error("dropped an event of %s: %s", topology_id, exc)
            return None
        try:
            store = self._store()
            if not store.client.connected:
                raise ConnectionError("ZooKeeper is out of reach")
            try:
                seq = store.append(topology_id, event)
            except NoHistory:
                if self._reopen is None or not self._reopen(topology_id):
                    log.debug("dropped a %s event of %s, which has no history: %s", kind,
                              topology_id, event["text"])
                    return None
                seq = store.append(topology_id, event)
        except Exception as exc:
            with self._lock:
                # The same line while the failure lasts, so that it is logged once a minute.
                self._repeats.warning("record", "could not record events in ZooKeeper (%s): "
                                      "they are dropped, and what they describe goes on",
                                      _describe(exc))
            log.debug("dropped a %s event of %s: %s", kind, topology_id, text)
            return None
        with self._lock:
            if self._repeats.clear("record"):
                log.info("recording events in ZooKeeper again")
        return seq

    def condition(self, key: Hashable, topology_id: str, kind: str, text: str,
                  **detail: Any) -> None:
        """Record a condition that lasts (a topology nimbus cannot place, found every second)
        when it begins or its text changes, not every time it is found; ``over(key)`` once it
        ends."""
        with self._lock:
            if self._conditions.get(key) == text:
                return
        if self.record(topology_id, kind, text, **detail) is not None:
            with self._lock:
                self._conditions[key] = text

    def over(self, key: Hashable) -> bool:
        """The condition ``key`` ended; whether it was recorded."""
        with self._lock:
            return self._conditions.pop(key, None) is not None

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Forget the conditions whose key ``keep`` refuses (of a topology that is gone)."""
        with self._lock:
            for key in [k for k in self._conditions if not keep(k)]:
                del self._conditions[key]


class EventService:
    """Nimbus's part: the history's head at submit, the events nimbus records (``record``,
    ``condition``), the read op (``history``) and, on the leader, removing histories KEEP_SECS
    after their topology (``tidy``). ``state()``: nimbus's ClusterState once it started."""

    def __init__(self, state: Callable[[], ClusterState], writer: str,
                 keep_secs: float = KEEP_SECS, tidy_secs: float = TIDY_SECS):
        self._state = state
        self.keep_secs = keep_secs
        self.tidy_secs = tidy_secs
        self._tidied: float | None = None
        self._store: EventStore | None = None
        self.recorder = EventRecorder(self.store, writer, reopen=self._reopen)
        self.record = self.recorder.record
        self.condition = self.recorder.condition
        self.over = self.recorder.over
        self._repeats = Repeats(log)   # the leader's monitor thread only

    def store(self) -> EventStore:
        state = self._state()
        if self._store is None or self._store.client is not state.client:
            self._store = EventStore(state.client, state.root)
        return self._store

    def open(self, topology_id: str, name: str, conf: dict[str, Any] | None) -> None:
        """Make the history of a topology being submitted, before anything records in it. A
        failure is logged, not raised: the submit goes on, and the first event nimbus records
        makes the head (``_reopen``)."""
        try:
            self.store().open(topology_id, name, history_limit(conf))
        except Exception as exc:
            log.warning("could not make the event history of %s (%s); nimbus tries again at "
                        "its first event", topology_id, _describe(exc))

    def _reopen(self, topology_id: str) -> bool:
        record = self._state().topology(topology_id)
        if not isinstance(record, dict):
            return False
        self.store().open(topology_id, str(record.get("name")), history_limit(record.get("conf")),
                          submitted=record.get("launched"))
        return True

    def removed(self, topology_id: str, text: str, **detail: Any) -> None:
        """The topology was removed: record it, and start the history's KEEP_SECS."""
        self.record(topology_id, REMOVED, text, **detail)
        try:
            self.store().mark_removed(topology_id)
        except Exception as exc:   # tidy marks it later
            log.debug("could not mark the history of %s removed: %s", topology_id, exc)
        self.recorder.forget(lambda key: not (isinstance(key, tuple) and topology_id in key))

    def tidy(self, running: Iterable[str]) -> None:
        """Every ``tidy_secs`` (called from the leader's monitor every pass): mark the
        histories of topologies that are gone as removed, and delete those removed
        ``keep_secs`` ago. A failure is logged; the next pass tries again."""
        now = time.monotonic()
        if self._tidied is not None and now - self._tidied < self.tidy_secs:
            return
        self._tidied = now
        running = set(running)
        try:
            store = self.store()
            for tid, head in store.heads().items():
                if tid in running:
                    continue
                removed = head.get("removed")
                if not isinstance(removed, (int, float)):
                    store.mark_removed(tid)
                elif time.time() - removed >= self.keep_secs and store.delete(tid):
                    log.info("deleted the event history of %s, removed %.0f s ago", tid,
                             time.time() - removed)
        except Exception as exc:
            self._repeats.warning("tidy", "could not tidy the event histories (%s); the next "
                                  "pass tries again", _describe(exc))
        else:
            self._repeats.clear("tidy")

    def history(self, topology: str, limit: int = DEFAULT_READ, since: int | None = None,
                kind: str | None = None) -> dict[str, Any]:
        """Nimbus's ``events`` op: the history of the running topology named (or with the id)
        ``topology``, else of the newest kept one (``history_answer``): its newest ``limit``
        events after seq ``since``, of ``kind`` if given, oldest first."""
        check_query(limit, since, kind)
        state = self._state()
        store = self.store()
        for tid, record in state.topologies().items():
            if topology in (tid, record.get("name")):
                return history_answer(tid, record.get("name"), record.get("status"), None,
                                      store.read(tid, limit, since, kind))
        kept = [(head.get("submitted") or 0, tid, head) for tid, head in store.heads().items()
                if topology in (tid, head.get("name"))]
        if not kept:
            raise NoHistory(f"no topology named {topology!r} is running or has an event "
                            f"history (one is kept {self.keep_secs:.0f} s after its removal)")
        _submitted, tid, head = max(kept, key=lambda k: (k[0], k[1]))
        return history_answer(tid, head.get("name"), REMOVED, head.get("removed"),
                              store.read(tid, limit, since, kind))


