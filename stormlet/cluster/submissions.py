"""Submissions nimbus takes without waiting (``stormlet submit --no-wait``): it checks at once
what it can (the name, free and valid; the code package, there, within the size limit and
unpackable; the config's shape), answers with the topology's id, and prepares the topology in
the background (builds its environment, inspects it in it) before recording it as a submit
that waited would have.

    accepted   <root>/submissions/<tid>: {"status": "preparing", ...}; the code package in
               nimbus's code directory, as a topology's is, and copied by the standbys
    prepared   the topology's record under topologies/<tid> (same id, same code); the
               submission's node removed
    refused    {"status": "refused", "refusal": why, "refused": when, ...}: shown by ``list``
               (status "refused") and ``errors`` until REFUSAL_KEEP_SECS have passed, the name
               is submitted again, or ``stormlet kill NAME`` clears it

The name is taken from acceptance: another submit of it is refused while it is prepared, as
while it runs. Only small state lives in the node (never the code).

**Failover and restarts.** An accepted submission is the cluster's, like a running topology:
its node is in ZooKeeper and its code on the leader and (within a replication pass, about two
seconds) on every standby. A leader that finds a submission in preparation that it is not
preparing itself (it took over, or it restarted) prepares it again from the start; the
environment build that was under way on the old leader's node is not reused. If no live nimbus
holds its code (the leader that accepted it died before a standby copied it), the submission is
refused saying so: ``stormlet list`` never loses it silently. A nimbus that lost the lead drops
what it was preparing once done, without recording it: the new leader does that. (Why not let a
failover lose it, which would be simpler: a Storm user takes a topology that ``storm jar``
accepted to be the cluster's, and Storm's nimbus keeps its code, replicated to
``topology.min.replication.count`` nimbuses, before it schedules it.)
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ..redaction import redact_text
from ..runtime.task_errors import clip, clip_tail
from .error_reports import SUBMIT_COMPONENT
from .names import is_topology_id

if TYPE_CHECKING:
    from .zk_state import ClusterState

log = logging.getLogger(__name__)

PREPARING, REFUSED = "preparing", "refused"
# How long a refusal stays in `stormlet list` and `stormlet errors`: a day, so that whoever
# submitted with --no-wait at the end of one day still finds why the next morning. A refusal is
# one small ZooKeeper node; submitting the name again, or `stormlet kill NAME`, clears it sooner.
REFUSAL_KEEP_SECS = 24 * 3600.0
# The longest one-line reason a `list` row carries (the whole refusal is in `errors`), and the
# longest refusal kept: pip's last lines fit many times over, and ZooKeeper holds every node in
# memory.
HEADLINE_CHARS = 200
REFUSAL_CHARS = 16 * 1024
# The text fields of a `list` row that may quote a credential (a refusal quotes the topology's
# own error, or pip's).
TEXT_FIELDS = ("refusal", "building")


class Submission(NamedTuple):
    """A submission's node: the topology's id and name, its status (PREPARING or REFUSED), the
    submit's config overrides, its code's digest, when it was accepted; once refused, when, why
    (the whole message) and by which nimbus (its host and port)."""
    id: str
    name: str
    status: str
    conf: dict
    code_sha256: str
    submitted: float
    refused: float | None = None
    refusal: str | None = None
    host: str | None = None
    port: int | None = None

    @classmethod
    def of(cls, path: str, value: dict | None) -> Submission | None:
        """The submission in a node's JSON, or None (logged with ``path``) if it is not one."""
        if value is None:
            return None
        try:
            submission = cls(**{f: value[f] for f in cls._fields if f in value})
        except TypeError as exc:
            log.warning("ignoring ZooKeeper node %s: not a submission (%s)", path, exc)
            return None
        # Its id names its code's file on every nimbus: checked before anything uses it.
        if not (is_topology_id(submission.id) and isinstance(submission.name, str)
                and submission.status in (PREPARING, REFUSED)
                and isinstance(submission.conf, dict)
                and isinstance(submission.submitted, (int, float))):
            log.warning("ignoring ZooKeeper node %s: not a valid submission", path)
            return None
        return submission

    def record(self) -> dict:
        return self._asdict()


def accepted(topology_id: str, name: str, conf: dict, code_sha256: str,
             now: float) -> Submission:
    return Submission(topology_id, name, PREPARING, conf, code_sha256, now)


def refused(submission: Submission, why: str, host: str, port: int, now: float) -> Submission:
    """The submission refused by the nimbus at ``host``:``port`` for ``why`` (clipped to
    REFUSAL_CHARS, keeping its end, where pip says why)."""
    return submission._replace(status=REFUSED, refused=now, refusal=clip_tail(why, REFUSAL_CHARS),
                               host=host, port=port)


def headline(refusal: str) -> str:
    """The one line ``list`` shows of a refusal: its last line when it has several (pip says
    why last: "ERROR: No matching distribution found for ..."), else the whole of it."""
    lines = [line.strip() for line in refusal.strip().splitlines() if line.strip()]
    return clip(lines[-1] if lines else "", HEADLINE_CHARS)


def list_row(submission: Submission, now: float, building: str | None = None) -> dict:
    """The submission's row in nimbus's ``list``, shaped as a topology's (no workers, no
    executors). A preparing one's uptime is how long it has been prepared, and ``building``
    pip's last line while this nimbus builds its environment; a refused one counts one error,
    its refusal, at the time it was refused, and carries its headline as "refusal"."""
    row: dict[str, Any] = {"name": submission.name, "id": submission.id,
                           "status": submission.status, "workers": 0, "workers_asked": None,
                           "executors": 0, "errors": 0, "last_error": None}
    if submission.status == PREPARING:
        row.update(uptime=max(0.0, now - submission.submitted), building=building)
    else:
        row.update(uptime=0.0, errors=1, last_error=submission.refused,
                   refusal=headline(submission.refusal or ""))
    return row


def error_rows(submission: Submission) -> list[dict]:
    """What ``errors`` answers for a submission: none while it is prepared; once refused, the
    refusal whole (pip's last lines, or the inspection's message), against SUBMIT_COMPONENT and
    the nimbus that refused it."""
    if submission.status != REFUSED:
        return []
    return [{"component": SUBMIT_COMPONENT, "task": -1, "time": submission.refused,
             "error": submission.refusal or "", "detail": "",
             "host": submission.host, "port": submission.port}]


def redact_rows(rows: list[Any]) -> list[Any]:
    """``list`` rows as a caller other than the admin sees them: their text redacted."""
    return [{**row, **{f: redact_text(row[f]) for f in TEXT_FIELDS
                       if isinstance(row.get(f), str)}} if isinstance(row, dict) else row
            for row in rows]


@dataclass
class Preparation:
    """What the leader knows of a submission it prepares: the key of the environment it builds
    for it, once known (its progress is that build's)."""
    environment: str | None = None


class Preparer:
    """The leader's submissions in preparation, each on a thread of its own, with what nimbus
    does to prepare and record one given as functions:

    - ``inspect(code, conf, preparation)``: the topology's summary, from the environment its
      package declares (its key set on ``preparation`` once known), or ``rpc.RpcError``;
    - ``record(name, topology_id, code, conf, summary)``: under ``lock``, the topology recorded
      and scheduled, or ``rpc.RpcError``;
    - ``code(submission)``: its code package, or ``rpc.RpcError`` (none on any live nimbus);
    - ``drop_code(topology_id)``: forget the code of a refused submission;
    - ``building()``: the environment builds under way on this node (``Environments.building``).

    ``state()`` is the cluster's state, ``lock`` nimbus's lock for state changes (``accept``
    and ``tend`` are called holding it), ``leads`` set while this nimbus leads, ``host`` and
    ``port`` where it serves (named in a refusal)."""

    def __init__(self, state: Callable[[], ClusterState], lock: threading.Lock,
                 leads: threading.Event, host: str, port: int,
                 inspect: Callable[[bytes, dict, Preparation], dict],
                 record: Callable[[str, str, bytes, dict, dict], Any],
                 code: Callable[[Submission], bytes], drop_code: Callable[[str], None],
                 building: Callable[[], list[dict]]):
        self._state, self._lock, self._leads = state, lock, leads
        self._host, self._port = host, port
        self._inspect, self._record, self._code, self._drop_code = inspect, record, code, drop_code
        self._building = building
        self._preparing: dict[str, Preparation] = {}   # topology id -> its progress, under lock

    def accept(self, submission: Submission) -> None:
        """Under the lock: hold the submission's name in ZooKeeper and start preparing it."""
        self._state().set_submission(submission)
        self._start(submission)

    def tend(self, topologies: dict[str, dict]) -> None:
        """Under the lock, each monitor pass: prepare a submission that nobody here prepares
        (accepted before this nimbus led, or before it restarted), drop the node of one
        recorded already, and forget refusals older than REFUSAL_KEEP_SECS."""
        state, now = self._state(), time.time()
        for tid, submission in state.submissions().items():
            if submission.status == PREPARING:
                if tid in topologies:
                    state.remove_submission(tid)
                elif tid not in self._preparing:
                    log.info("preparing %s (%s) again: it was accepted before this nimbus led "
                             "or restarted", submission.name, tid)
                    self._start(submission)
            elif now - float(submission.refused or 0) > REFUSAL_KEEP_SECS:
                state.remove_submission(tid)
                log.info("forgot the refusal of %s (%s): older than %.0f s", submission.name,
                         tid, REFUSAL_KEEP_SECS)

    def progress(self, topology_id: str) -> str | None:
        """Pip's last line while this nimbus builds the environment of a submission it
        prepares; None otherwise."""
        preparation = self._preparing.get(topology_id)
        key = preparation.environment if preparation else None
        if key is None:
            return None
        for build in self._building():
            if build["key"] == key:
                return build["last"] or "starting pip"
        return None

    def _start(self, submission: Submission) -> None:
        preparation = Preparation()
        self._preparing[submission.id] = preparation
        threading.Thread(target=self._prepare, args=(submission, preparation),
                         name=f"prepare-{submission.id}", daemon=True).start()

    def _prepare(self, submission: Submission, preparation: Preparation) -> None:
        """What a submit that waits does, then the topology recorded or the submission
        refused; dropped if it was killed, or this nimbus stopped leading, meanwhile (the new
        leader prepares it itself)."""
        from .rpc import RpcError
        from .zk_state import CONNECTION_ERRORS, describe

        tid, name = submission.id, submission.name
        try:
            code = self._code(submission)
            summary = self._inspect(code, submission.conf, preparation)
            with self._lock:
                if not self._still_preparing(submission):
                    log.info("dropped the preparation of %s (%s): killed, or prepared by "
                             "another leader, meanwhile", name, tid)
                    return
                state = self._state()
                if state.topology(tid) is None:   # else recorded, and its node left behind
                    self._record(name, tid, code, submission.conf, summary)
                state.remove_submission(tid)
        except RpcError as exc:
            self._refuse(submission, str(exc))
        except CONNECTION_ERRORS as exc:
            # The monitor prepares it again once ZooKeeper is back.
            log.warning("lost ZooKeeper while preparing %s (%s): %s; preparing it again when "
                        "ZooKeeper is back", name, tid, describe(exc))
        except Exception as exc:
            log.exception("preparing %s (%s) failed", name, tid)
            self._refuse(submission, f"nimbus could not prepare it: {describe(exc)}")
        finally:
            with self._lock:
                self._preparing.pop(tid, None)

    def _still_preparing(self, submission: Submission) -> bool:
        """Under the lock: whether this nimbus leads and the submission waits to be prepared."""
        if not self._leads.is_set():
            return False
        current = self._state().submission(submission.id)
        return current is not None and current.status == PREPARING

    def _refuse(self, submission: Submission, why: str) -> None:
        """Mark the submission refused for ``why`` (list and errors show it); its code goes."""
        from .zk_state import CONNECTION_ERRORS, describe

        try:
            with self._lock:
                if not self._still_preparing(submission):
                    return
                self._state().set_submission(refused(submission, why, self._host, self._port,
                                                     time.time()))
                self._drop_code(submission.id)
        except CONNECTION_ERRORS as exc:
            log.warning("lost ZooKeeper refusing %s (%s): %s; preparing it again when "
                        "ZooKeeper is back", submission.name, submission.id, describe(exc))
            return
        log.warning("refused %s (%s), submitted without waiting: %s", submission.name,
                    submission.id, headline(why))
