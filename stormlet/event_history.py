"""A topology's event history, wherever it is kept: what is recorded (the kinds), one event's
record and its checks, and what a read answers, on a cluster and in local mode alike; local
mode's histories in memory (``MemoryEvents``, LocalCluster's). A cluster keeps them in
ZooKeeper: ``cluster/events.py``, which says who records what, and re-exports all of this.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import config as cfg
from .redaction import redact_text, redact_value

log = logging.getLogger(__name__)

# ----- what is recorded (each kind written once, here)

SUBMITTED, ACTIVATED, DEACTIVATED = "submitted", "activated", "deactivated"
REBALANCED, KILLED, REMOVED = "rebalanced", "killed", "removed"
# Where the executors run: placed at submit or rebalance; moved by nimbus itself, with a
# ``reason`` in the detail (below); cannot be placed yet (no free slot).
ASSIGNED, REASSIGNED, WAITING = "assigned", "reassigned", "waiting"
WORKER_STARTED, WORKER_EXITED, WORKER_STOPPED = "worker-started", "worker-exited", "worker-stopped"
ENVIRONMENT_FAILED = "environment-failed"
#: The kinds nimbus and supervisors record (other parts add their own).
KINDS = (SUBMITTED, ACTIVATED, DEACTIVATED, REBALANCED, ASSIGNED, REASSIGNED, WAITING, KILLED,
         REMOVED, WORKER_STARTED, WORKER_EXITED, WORKER_STOPPED, ENVIRONMENT_FAILED)

# Why nimbus moved executors (a REASSIGNED event's detail "reason").
LOST_SUPERVISOR, SPREAD_BACK, CORRUPT_ASSIGNMENT = (
    "lost-supervisor", "spread-back", "corrupt-assignment")
# Why a supervisor stopped a worker (a WORKER_STOPPED event's detail "cause").
HEARTBEAT, MEMORY, UNASSIGNED, MOVED, FENCED, SUPERVISOR_STOPPING, RESTART_ASKED = (
    "heartbeat", "memory", "unassigned", "moved", "fenced", "supervisor-stopping",
    "restart-asked")

#: The most events one read returns, and how many it returns unless asked.
MAX_READ, DEFAULT_READ = 1000, 50
# An event's text is one line of at most this many characters; its detail, as JSON, at most
# this many bytes (a larger one is replaced by a note saying so).
MAX_TEXT, MAX_DETAIL_BYTES = 2000, 8192
# How many killed topologies' histories local mode keeps.
LOCAL_KEPT_HISTORIES = 20
_KIND_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
MAX_KIND = 40


class Event(NamedTuple):
    """One event as readers get it. ``seq`` orders a topology's events (the number ZooKeeper
    gave its node: the order they were written in, whatever the writers' clocks say); ``time``
    is when its writer recorded it (Unix time); ``kind`` what happened (the constants above, or
    another part's); ``text`` one line for an operator; ``writer`` who recorded it
    (``nimbus:<id>``, ``supervisor:<id>@<host>``, ``local:<host>``); ``detail`` fields for a
    script (host, port, pid, exit code, reason...)."""
    seq: int
    time: float
    kind: str
    text: str
    writer: str
    detail: dict[str, Any]

    @classmethod
    def stored(cls, kind: str, text: str, writer: str, detail: dict[str, Any],
               now: float | None = None) -> dict[str, Any]:
        """An event's fields as its node holds them (its seq is the node's name): ``kind``
        checked (``ValueError``), ``text`` made one line of at most MAX_TEXT characters, and
        ``detail`` kept to MAX_DETAIL_BYTES of JSON."""
        check_kind(kind)
        line = " ".join(str(text).split())
        if len(line) > MAX_TEXT:
            line = line[:MAX_TEXT - 3] + "..."
        plain = json.loads(json.dumps(detail, default=repr))
        size = len(json.dumps(plain))
        if size > MAX_DETAIL_BYTES:
            plain = {"dropped": f"the detail was {size} bytes, over {MAX_DETAIL_BYTES}"}
        return {"time": time.time() if now is None else now, "kind": kind, "text": line,
                "writer": str(writer), "detail": plain}

    @classmethod
    def of(cls, seq: int, value: Any) -> Event | None:
        """The event a node holds, or None when it is not one."""
        if not isinstance(value, dict):
            return None
        when, kind, text = value.get("time"), value.get("kind"), value.get("text")
        detail = value.get("detail")
        if not (isinstance(when, (int, float)) and isinstance(kind, str)
                and isinstance(text, str) and isinstance(detail, dict)):
            return None
        return cls(seq, float(when), kind, text, str(value.get("writer", "")), detail)


def check_kind(kind: Any) -> str:
    """``kind`` if it is one: a lowercase word or words joined by ``-`` (``worker-exited``)."""
    if not (isinstance(kind, str) and 0 < len(kind) <= MAX_KIND and kind[0].isalpha()
            and set(kind) <= _KIND_CHARS):
        raise ValueError(f"invalid event kind {kind!r}: lowercase letters, digits and '-', "
                         f"starting with a letter, at most {MAX_KIND}")
    return kind


class NoHistory(ValueError):
    """No running topology and no kept history has that name or id. (A ValueError, so nimbus
    answers with its message; it begins as nimbus's other answers for an unknown name do.)"""


def check_query(limit: Any, since: Any, kind: Any) -> None:
    """``ValueError`` for what a read of a history may not ask: ``limit`` from 1 to MAX_READ,
    ``since`` a seq (events after it), ``kind`` an event kind; None for either of the last two:
    any."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_READ:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_READ}, got {limit!r}")
    if since is not None and (not isinstance(since, int) or isinstance(since, bool)
                              or since < 0):
        raise ValueError(f"since must be an event's seq (a whole number >= 0), got {since!r}")
    if kind is not None:
        check_kind(kind)


def history_answer(topology_id: str, name: Any, status: Any, removed: Any,
                   events: Iterable[Event]) -> dict[str, Any]:
    """What a read of a history answers, on a cluster and in local mode alike: the topology's
    ``id``, ``name``, ``status`` (its own while it runs; ``removed`` after), when it was
    ``removed`` (None while it runs), and its ``events`` oldest first, each as a map of
    ``Event``'s fields."""
    return {"id": topology_id, "name": name, "status": status, "removed": removed,
            "events": [e._asdict() for e in events]}


def redact_history(answer: dict[str, Any]) -> dict[str, Any]:
    """A ``history_answer`` for a reader without admin access: each event's text and detail
    with their credentials redacted (redaction.py)."""
    return {**answer, "events": redact_events(answer.get("events", []))}


def redact_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events (maps of ``Event``'s fields) with their text and detail redacted."""
    return [{**e, "text": redact_text(str(e.get("text", ""))),
             "detail": redact_value(e.get("detail") or {})} for e in events]


def history_limit(conf: dict[str, Any] | None) -> int:
    """How many events a topology with config ``conf`` keeps (``topology.events.max``)."""
    value = cfg.merged(conf)[cfg.TOPOLOGY_EVENTS_MAX]
    if cfg.problem(cfg.TOPOLOGY_EVENTS_MAX, value) is not None:   # checked at submit
        value = cfg.DEFAULTS[cfg.TOPOLOGY_EVENTS_MAX].default
    return int(value)


# ----- local mode

@dataclass
class _LocalHistory:
    name: str
    limit: int
    submitted: float
    events: list[Event] = field(default_factory=list)
    removed: float | None = None


class MemoryEvents:
    """Local mode's histories, in this process: the same events, answered in the same shape
    (``history_answer``). A killed topology's history is kept among the newest
    LOCAL_KEPT_HISTORIES. Thread-safe."""

    def __init__(self, writer: str, kept: int = LOCAL_KEPT_HISTORIES):
        self.writer = writer
        self.kept = kept
        self._lock = threading.Lock()
        self._histories: OrderedDict[str, _LocalHistory] = OrderedDict()
        self._seq = 0

    def open(self, topology_id: str, name: str, conf: dict[str, Any] | None) -> None:
        with self._lock:
            self._histories[topology_id] = _LocalHistory(name, history_limit(conf), time.time())

    def record(self, topology_id: str, kind: str, text: str, **detail: Any) -> int | None:
        """As ``EventRecorder.record``: never raises, None when the event was dropped."""
        try:
            stored = Event.stored(kind, text, self.writer, detail)
        except Exception:
            log.exception("dropped a %s event of %s", kind, topology_id)
            return None
        with self._lock:
            history = self._histories.get(topology_id)
            if history is None:
                return None
            self._seq += 1
            history.events.append(Event(self._seq, **stored))
            del history.events[:-history.limit]
            return self._seq

    def removed(self, topology_id: str, text: str, **detail: Any) -> None:
        self.record(topology_id, REMOVED, text, **detail)
        with self._lock:
            history = self._histories.get(topology_id)
            if history is not None:
                history.removed = time.time()
            gone = [tid for tid, h in self._histories.items() if h.removed is not None]
            for tid in gone[:max(0, len(gone) - self.kept)]:
                del self._histories[tid]

    def history(self, key: str, limit: int = DEFAULT_READ, since: int | None = None,
                kind: str | None = None,
                status: Callable[[str], str | None] = lambda tid: None) -> dict[str, Any]:
        """As ``EventService.history``, ``key`` a name or an id; ``status(topology_id)`` gives
        a running topology's status."""
        check_query(limit, since, kind)
        with self._lock:
            matches = [(h.removed is None, h.submitted, tid, h)
                       for tid, h in self._histories.items() if key in (tid, h.name)]
            if not matches:
                raise NoHistory(f"no topology named {key!r} is running or has an event "
                                f"history")
            _running, _submitted, tid, history = max(matches, key=lambda m: m[:3])
            events = [e for e in history.events
                      if (since is None or e.seq > since) and kind in (None, e.kind)]
            removed = history.removed
        shown = REMOVED if removed is not None else status(tid)
        return history_answer(tid, history.name, shown, removed, events[-limit:])
