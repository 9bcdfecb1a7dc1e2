"""Nimbus's worker introspection: a worker's every thread's stack now, a CPU profile of some
seconds as a flame graph, and a restart, asked by the admin (``stormlet stack``, ``stormlet
profile``, ``stormlet restart-worker``, the UI's worker rows), carried out by the worker's
supervisor (node_introspection.py) and recorded in the topology's event history.

Every operation is the admin's (``rpc.ADMIN``): a stack dump shows the worker's code and what
it holds in its variables' names, a profile perturbs it for its seconds, a restart stops it.
Nimbus calls the supervisor with its daemon credentials, as it does for logs (log_service.py).

A worker is named by ``worker`` ("HOST:PORT" as `stormlet logs` and the UI show it, or
"SUPERVISOR:PORT"), or by ``supervisor`` and ``port``, or by a ``component`` (and ``task``) it
runs; ``name`` is a running topology's name or id (``locate``). ``asked_by`` says who asked, as
the caller tells it (the CLI: user@host; the UI: "the UI"), for the log and the event.

- ``worker_stacks(name, ..., asked_by=None)``: ``{"topology_id", "supervisor", "host", "port",
  "pid", "text"}``. Slow (nimbus's pool): the worker writes them in milliseconds, and one
  that does not answer its signal is dumped by py-spy, which takes seconds at most.
- ``worker_profile(name, ..., seconds, rate=100, idle=False, native=False, asked_by=None)``:
  starts the profile and answers at once ``{"profile": its id, "topology_id", "supervisor",
  "host", "port", "seconds"}``; ``worker_profile_result(profile, svg=True)`` then answers
  ``{"profile", "state": "running" | "done" | "failed", "elapsed", ...}``, once done with
  "svg" (its bytes, unless ``svg`` is false, or None when too large to send: see
  node_introspection.MAX_PROFILE_BYTES), "size", "file" (its name under the node's logs
  directory, where ``logs_read`` reads it) and "pid", once failed with "error".
- ``worker_restart(name, ..., reason, asked_by=None)``: once the supervisor has stopped the
  worker (it starts a new one at once): ``{"topology_id", "supervisor", "host", "port",
  "pid": the stopped worker's}``. Slow.

Why a profile is started and polled rather than answered: nimbus's slow pool has
``rpc.SLOW_WORKERS`` threads shared with submit and log reads, and a profile lasts up to
``MAX_PROFILE_SECS`` (plus py-spy's grace): two of them would stop every log read for minutes.
Each runs on a thread of its own (``ProfileJobs``), at most ``MAX_RUNNING`` at once and one per
node: profiling perturbs a node's workers, and the node service's own pool of two then keeps a
thread for log reads. A finished profile's graph is kept ``KEEP_SECS`` for its poller, within
``KEPT_BYTES`` in all; a failover forgets those being taken (the graph is still kept on the node).

Each is recorded once it is done, with its outcome: kinds ``STACK_DUMP``, ``PROFILE``,
``RESTART_ASKED`` (the supervisor also records the stop, cause restart-asked, and the start).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import rpc
from .events import RESTART_ASKED as _RESTART_CAUSE
from .node_introspection import PROFILE_OP, RESTART_OP, STACKS_OP, one_line
from .node_service import call_node
from .security import Security
from .worker_introspection import (
    DEFAULT_PROFILE_RATE,
    DEFAULT_RESTART_TIMEOUT_SECS,
    DEFAULT_STACKS_TIMEOUT_SECS,
    PY_SPY_GRACE_SECS,
    check_profile_rate,
    check_profile_seconds,
)
from .zk_state import ClusterState, Executor, FoundTopology, assigned_executors

log = logging.getLogger(__name__)

# The kinds of events recorded (events.py: a kind is a lowercase word, "-" between words).
STACK_DUMP, PROFILE, RESTART_ASKED = "stack-dump", "profile", _RESTART_CAUSE
KINDS = (STACK_DUMP, PROFILE, RESTART_ASKED)

# How long a call waits beyond what the node may take: the network, the node's queue.
CALL_SLACK_SECS = 5.0
# A stack dump waits for the worker's answer, then for py-spy's (worker_introspection.py).
STACKS_CALL_SECS = 2 * DEFAULT_STACKS_TIMEOUT_SECS + CALL_SLACK_SECS
# A restart waits for the supervisor's loop to take it, then to stop the worker (Restarts.ask).
RESTART_CALL_SECS = 2 * DEFAULT_RESTART_TIMEOUT_SECS + CALL_SLACK_SECS
MAX_RUNNING = 8
KEEP_SECS = 900.0
KEPT_BYTES = 64 * 1024 * 1024


def profile_call_secs(seconds: float) -> float:
    """How long a profile of ``seconds`` may take, py-spy's attaching and writing included."""
    return seconds + PY_SPY_GRACE_SECS + CALL_SLACK_SECS


@dataclass(frozen=True)
class WorkerSlot:
    """Where a topology's worker runs, and what it runs."""
    topology_id: str
    supervisor: str
    host: str
    port: int
    executors: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def locate(topology_id: str, executors: list[Executor], worker: str | None = None,
           supervisor: str | None = None, port: int | None = None,
           component: str | None = None, task: int | None = None) -> WorkerSlot:
    """The worker of ``topology_id`` (placed by ``executors``, its assignment) that the caller
    names; RpcError saying what it may name instead."""
    slots: dict[tuple[str, int], list[Executor]] = {}
    for executor in executors:
        slots.setdefault((executor.supervisor, executor.port), []).append(executor)
    if not slots:
        raise rpc.RpcError(f"{topology_id} has no workers assigned now")

    def slot(key: tuple[str, int]) -> WorkerSlot:
        placed = slots[key]
        return WorkerSlot(topology_id, key[0], placed[0].host, key[1],
                          tuple((e.component, tuple(e.tasks)) for e in placed))

    everyone = sorted((slot(key) for key in slots), key=lambda s: (s.host, s.port))
    listing = ", ".join(f"{s.where} ({s.supervisor})" for s in everyone)
    if worker is not None:
        if not isinstance(worker, str) or ":" not in worker:
            raise rpc.RpcError(f"name a worker as HOST:PORT (or SUPERVISOR:PORT), not "
                               f"{worker!r}; {topology_id}'s: {listing}")
        where, _, number = worker.rpartition(":")
        where = where.strip("[]")   # [::1]:6700
        if not number.isdigit():
            raise rpc.RpcError(f"{worker!r}: a worker's port is a number")
        found = [s for s in everyone if s.port == int(number) and where in (s.host, s.supervisor)]
        if len(found) > 1:
            named = ", ".join(f"{s.supervisor}:{s.port}" for s in found)
            raise rpc.RpcError(f"several workers of {topology_id} are {worker}: name one by "
                               f"SUPERVISOR:PORT ({named})")
        if not found:
            raise rpc.RpcError(f"no worker of {topology_id} is {worker}; its workers: {listing}")
        return found[0]
    if supervisor is not None or port is not None:
        if supervisor is None or port is None:
            raise rpc.RpcError("name a worker by its supervisor and its port, both")
        if (supervisor, port) not in slots:
            raise rpc.RpcError(f"no worker of {topology_id} runs on port {port} of supervisor "
                               f"{supervisor}; its workers: {listing}")
        return slot((supervisor, port))
    if component is not None:
        found = [s for s in everyone
                 if any(c == component and (task is None or task in tasks)
                        for c, tasks in s.executors)]
        what = component if task is None else f"task {task} of {component}"
        if not found:
            known = sorted({c for s in everyone for c, _ in s.executors if not c.startswith("__")})
            raise rpc.RpcError(f"no worker of {topology_id} runs {what} (its components: "
                               f"{', '.join(known)})")
        if len(found) > 1:
            where = "; ".join(f"{s.where} (tasks {_tasks_of(s, component)})" for s in found)
            raise rpc.RpcError(f"{component} runs on {len(found)} workers of {topology_id}: "
                               f"{where}; name one by HOST:PORT, or a task")
        return found[0]
    raise rpc.RpcError(f"name a worker of {topology_id} (HOST:PORT) or a component it runs; "
                       f"its workers: {listing}")


@dataclass
class ProfileJob:
    id: str
    slot: WorkerSlot
    seconds: int
    asked_by: str
    options: dict[str, Any] = field(default_factory=dict)   # py-spy's: rate, idle, native
    started: float = field(default_factory=time.time)
    finished: float | None = None
    answer: dict | None = None   # the node's
    error: str | None = None

    def state(self, with_svg: bool) -> dict[str, Any]:
        slot = self.slot
        shown: dict[str, Any] = {
            "profile": self.id, "topology_id": slot.topology_id, "supervisor": slot.supervisor,
            "host": slot.host, "port": slot.port, "seconds": self.seconds,
            "elapsed": (self.finished or time.time()) - self.started}
        if self.finished is None:
            return {**shown, "state": "running"}
        if self.error is not None:
            return {**shown, "state": "failed", "error": self.error}
        assert self.answer is not None
        return {**shown, "state": "done", "pid": self.answer.get("pid"),
                "file": self.answer.get("file"), "size": self.answer.get("size"),
                **({"svg": self.answer.get("svg")} if with_svg else {})}

    @property
    def kept_bytes(self) -> int:
        svg = (self.answer or {}).get("svg")
        return len(svg) if isinstance(svg, bytes) else 0


class ProfileJobs:
    """Profiles under way and recently done, each taken on a thread of its own (see the module
    doc): ``start`` refuses one beyond ``MAX_RUNNING``, or on a node already profiling."""

    def __init__(self, take: Callable[[ProfileJob], dict], done: Callable[[ProfileJob], None]):
        """``take(job)``: the node's answer (raises RpcError); ``done(job)``: called once the
        job has its outcome."""
        self._take = take
        self._done = done
        self._lock = threading.Lock()
        self._jobs: dict[str, ProfileJob] = {}

    def start(self, slot: WorkerSlot, seconds: int, asked_by: str,
              options: dict[str, Any]) -> ProfileJob:
        with self._lock:
            self._forget_old()
            running = [job for job in self._jobs.values() if job.finished is None]
            busy = next((job for job in running if job.slot.supervisor == slot.supervisor), None)
            if busy is not None:
                left = busy.started + busy.seconds - time.time()
                raise rpc.RpcError(
                    f"{slot.host} (supervisor {slot.supervisor}) is profiling worker "
                    f"{busy.slot.where} for {busy.seconds} s ({max(left, 0):.0f} s left): one "
                    f"profile at a time on a node; ask again once it is done")
            if len(running) >= MAX_RUNNING:
                raise rpc.RpcError(f"{MAX_RUNNING} profiles are being taken; ask again once "
                                   f"one is done")
            job = ProfileJob(f"p-{secrets.token_hex(8)}", slot, seconds, asked_by, options)
            self._jobs[job.id] = job
        threading.Thread(target=self._run, args=(job,), name=f"profile-{slot.where}",
                         daemon=True).start()
        return job

    def _run(self, job: ProfileJob) -> None:
        error: str | None
        try:
            answer = self._take(job)
        except rpc.RpcError as exc:
            answer, error = None, str(exc)
        except Exception as exc:   # a bug of ours: the poller hears of it all the same
            log.exception("profile %s of %s failed", job.id, job.slot.where)
            answer, error = None, f"internal error: {type(exc).__name__}: {exc}"
        else:
            error = None
        with self._lock:
            job.answer, job.error, job.finished = answer, error, time.time()
        self._done(job)

    def result(self, profile: str, with_svg: bool = True) -> dict[str, Any]:
        with self._lock:
            self._forget_old()
            job = self._jobs.get(profile) if isinstance(profile, str) else None
            if job is None:
                raise rpc.RpcError(f"no profile {profile!r} here: it ended over "
                                   f"{KEEP_SECS:.0f} s ago, or another nimbus took it (its flame "
                                   f"graph stays in the worker's log directory: stormlet logs "
                                   f"TOPOLOGY --list)")
            return job.state(with_svg)

    def _forget_old(self) -> None:
        """Drop finished jobs over KEEP_SECS old, then the oldest beyond KEPT_BYTES."""
        now = time.time()
        finished = sorted((job for job in self._jobs.values() if job.finished is not None),
                          key=lambda job: job.finished or 0.0)
        kept = sum(job.kept_bytes for job in finished)
        for job in finished:
            if now - (job.finished or now) > KEEP_SECS or kept > KEPT_BYTES:
                kept -= job.kept_bytes
                del self._jobs[job.id]


class IntrospectionService:
    def __init__(self, state: Callable[[], ClusterState],
                 find: Callable[[str], FoundTopology], security: Security,
                 record_event: Callable[..., None]):
        """``find``: a running topology's id and record from its name or id (RpcError if
        none); ``record_event``: ``Nimbus.record_event``."""
        self._state = state
        self._find = find
        self.security = security
        self._record_event = record_event
        self.profiles = ProfileJobs(self._take_profile, self._profiled)

    def _locate(self, name: str, worker: str | None, supervisor: str | None, port: int | None,
                component: str | None, task: int | None) -> WorkerSlot:
        topology_id = self._find(name).topology_id
        executors = assigned_executors(self._state().checked_assignment(topology_id) or {})
        return locate(topology_id, executors, worker, supervisor, port, component, task)

    def stacks(self, name: str, worker: str | None = None, supervisor: str | None = None,
               port: int | None = None, component: str | None = None,
               task: int | None = None, asked_by: str | None = None) -> dict[str, Any]:
        slot = self._locate(name, worker, supervisor, port, component, task)
        who = _who(asked_by)
        try:
            answer = self._call(slot, STACKS_OP, STACKS_CALL_SECS, topology_id=slot.topology_id,
                                port=slot.port, asked_by=who)
        except rpc.RpcError as exc:
            self._event(slot, STACK_DUMP, f"stack dump of worker {slot.where} asked by {who} "
                        f"failed: {exc}", who, ok=False)
            raise
        text = answer.get("text", "")
        threads = sum(line.startswith("Thread ") for line in text.splitlines())
        self._event(slot, STACK_DUMP, f"stacks of worker {slot.where} (pid {answer.get('pid')}, "
                    f"{threads} threads) dumped, asked by {who}", who, pid=answer.get("pid"),
                    threads=threads)
        return {**_place(slot), "pid": answer.get("pid"), "text": text}

    def profile(self, name: str, seconds: int, worker: str | None = None,
                supervisor: str | None = None, port: int | None = None,
                component: str | None = None, task: int | None = None,
                rate: int = DEFAULT_PROFILE_RATE, idle: bool = False, native: bool = False,
                asked_by: str | None = None) -> dict[str, Any]:
        seconds = check_profile_seconds(seconds)
        options = {"rate": check_profile_rate(rate), "idle": bool(idle), "native": bool(native)}
        slot = self._locate(name, worker, supervisor, port, component, task)
        job = self.profiles.start(slot, seconds, _who(asked_by), options)
        return {**_place(slot), "profile": job.id, "seconds": seconds}

    def profile_result(self, profile: str, svg: bool = True) -> dict[str, Any]:
        return self.profiles.result(profile, bool(svg))

    def restart(self, name: str, worker: str | None = None, supervisor: str | None = None,
                port: int | None = None, component: str | None = None,
                task: int | None = None, reason: str | None = None,
                asked_by: str | None = None) -> dict[str, Any]:
        slot = self._locate(name, worker, supervisor, port, component, task)
        who = _who(asked_by)
        reason = one_line(reason, "reason") or "no reason given"
        try:
            answer = self._call(slot, RESTART_OP, RESTART_CALL_SECS,
                                topology_id=slot.topology_id, port=slot.port, reason=reason,
                                asked_by=who)
        except rpc.RpcError as exc:
            self._event(slot, RESTART_ASKED, f"restart of worker {slot.where} asked by {who} "
                        f"({reason}) failed: {exc}", who, reason=reason, ok=False)
            raise
        self._event(slot, RESTART_ASKED, f"worker {slot.where} (pid {answer.get('pid')}) "
                    f"restarted, asked by {who}: {reason}", who, reason=reason,
                    pid=answer.get("pid"))
        return {**_place(slot), "pid": answer.get("pid")}

    # ----- profiles, on their own threads

    def _take_profile(self, job: ProfileJob) -> dict:
        return self._call(job.slot, PROFILE_OP, profile_call_secs(job.seconds),
                          topology_id=job.slot.topology_id, port=job.slot.port,
                          seconds=job.seconds, asked_by=job.asked_by, **job.options)

    def _profiled(self, job: ProfileJob) -> None:
        slot, who = job.slot, job.asked_by
        if job.error is not None:
            self._event(slot, PROFILE, f"profile of worker {slot.where} for {job.seconds} s "
                        f"asked by {who} failed: {job.error}", who, seconds=job.seconds,
                        ok=False)
            return
        answer = job.answer or {}
        self._event(slot, PROFILE, f"worker {slot.where} (pid {answer.get('pid')}) profiled for "
                    f"{job.seconds} s, asked by {who}: flame graph {answer.get('file')} "
                    f"({(answer.get('size') or 0) / 1024:.0f} kB)", who, seconds=job.seconds,
                    pid=answer.get("pid"), file=answer.get("file"), size=answer.get("size"))

    # ----- the node and the history

    def _call(self, slot: WorkerSlot, op: str, timeout: float, **args: Any) -> Any:
        """``op`` on the node service of ``slot``'s supervisor; RpcError saying which node and
        why."""
        info = self._state().supervisors().get(slot.supervisor)
        if info is None:
            raise rpc.RpcError(f"{slot.host} (supervisor {slot.supervisor}), which runs worker "
                               f"{slot.where}, is not running")
        return call_node(self.security, slot.supervisor, {**info, "host": slot.host}, op,
                         timeout, "look into its workers", **args)

    def _event(self, slot: WorkerSlot, kind: str, text: str, who: str,
               **detail: Any) -> None:
        self._record_event(slot.topology_id, kind, text, host=slot.host, port=slot.port,
                           supervisor=slot.supervisor, asked_by=who, **detail)


def _tasks_of(slot: WorkerSlot, component: str) -> str:
    return ", ".join(str(t) for c, tasks in slot.executors if c == component for t in tasks)


def _who(asked_by: str | None) -> str:
    return one_line(asked_by, "asked_by") or "someone unnamed"


def _place(slot: WorkerSlot) -> dict[str, Any]:
    return {"topology_id": slot.topology_id, "supervisor": slot.supervisor, "host": slot.host,
            "port": slot.port}
