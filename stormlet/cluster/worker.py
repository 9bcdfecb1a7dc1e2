"""A worker: runs the executors assigned to one slot of one topology.

A library object, like Nimbus and Supervisor; the hidden ``stormlet worker`` command (which a
supervisor starts, see supervisor.py) runs one per process:

    worker = Worker(zk_hosts, zk_root, topology_id, supervisor_id, port, host, entry, beat_file)
    worker.start()      # returns; runs from threads
    worker.wait()       # until the worker ends itself, or end() is called (a signal, say)
    worker.stop()       # drain briefly, report the last metrics, close

``end`` may come before or during ``start`` (a supervisor's SIGTERM just after launch): start still
completes, ``wait`` returns at once, and ``stop`` drains and closes as ever, so the spouts close
and commit. A ``start`` that raises has closed what it opened, and ``stop`` then does nothing.

``start`` loads the topology code, binds the slot's port, connects to the other workers, and runs
its executors with the same engine as local mode. The worker follows the topology's status
(active/inactive) and its assignment: executors moved to it (a repair after a host was lost) start
beside those running, executors moved away (spreading back) stop, and the rest run on with their
in-flight trees; it only ends when its slot is no longer its own (tenure.py), its executors are
split differently (a rebalance of executor counts), or the topology is removed, and its
supervisor starts a new one if needed.
It writes a heartbeat file every second (see heartbeat.py), which its supervisor watches and
reports on: its metrics and its tasks' recent errors. If an executor thread dies, the worker
writes one more heartbeat (so the cause reaches ``stormlet errors``) and ends as ``failed``; its
supervisor starts it afresh. Every ``topology.metrics.report.secs`` it sends its metrics
snapshot to the nimbus leader (see metrics_reporter).
Moving tuples never needs ZooKeeper: a ZooKeeper outage only pauses status and placement updates.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable

import zmq
from kazoo.protocol.states import KazooState

from .. import config as cfg
from ..loader import load_topology_file
from ..runtime import build_mode
from ..runtime.engine import TopologyRuntime
from ..runtime.live_settings import LiveSettings
from ..runtime.task_errors import TaskErrors
from .backpressure import OverloadWatch
from .error_reports import heartbeat_errors
from .heartbeat import HEARTBEAT_SECS, write_heartbeat
from .log_files import samples_file
from .metrics_reporter import MetricsReporter
from .security import Security, release
from .tenure import Fence, assignment_version, slot_key, slot_tenure
from .transport import LinkTimes, Receiver, RemoteRoute, Sender, TransportRounds, make_deliver
from .wire import Fenced, FrameDecoder
from .zk_state import (
    CONNECTION_ERRORS,
    DEFAULT_SESSION_TIMEOUT,
    ClusterState,
    assigned_executors,
    connect,
    decode_node,
    slot_executors,
    valid_assignment,
)

log = logging.getLogger(__name__)

# How often the worker looks for executor threads that died.
EXECUTOR_CHECK_SECS = 0.5
# While its spouts wait for peers to accept connections: how often it looks, and how often it
# says which peers it is waiting for.
PEER_CHECK_SECS = 0.05
PEER_WAIT_NOTE_SECS = 10.0
# The part of its ZooKeeper session a worker may spend out of touch before it stops its spouts:
# the session (and its supervisor's) has expired by then at the earliest, once kazoo took the
# first two thirds of it to call the link down; nimbus then still needs a pass and the new
# worker a start.
FENCE_FRACTION = 1 / 3
# How often the placement thread looks whether the worker ended, while no assignment comes.
PLACEMENT_POLL_SECS = 0.5
# The component a worker's link events are reported under, beside its tasks' errors.
LINKS_COMPONENT = "__links"


class NotAssigned(Exception):
    """Nothing of the topology is (or is any longer) assigned to this worker's slot: it was
    killed or rebalanced before the worker started. The message says which."""


class Worker:
    def __init__(self, zk_hosts: str, zk_root: str, topology_id: str, supervisor_id: str,
                 port: int, host: str, code_entry: Path, heartbeat_file: Path,
                 security: Security | None = None, bind: str | None = None,
                 state_dir: Path | None = None,
                 zk_session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                 log_dir: Path | None = None):
        """``security``: the topology's credentials its supervisor handed over, if any. The
        worker listens on ``bind`` (default: ``host``, the address peers reach it at).
        ``state_dir``: where the embedded state store is, unless the topology says.
        ``log_dir``: this worker's directory of files (log_files.py), if it has one."""
        self.log_dir = log_dir
        self.state_dir = state_dir
        self.zk_session_timeout = zk_session_timeout
        self.security = security or Security()
        self.bind = bind or host
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.topology_id = topology_id
        self.supervisor_id = supervisor_id
        self.port = port
        self.host = host
        self.code_entry = code_entry
        self.heartbeat_file = heartbeat_file
        self.done = threading.Event()
        # Its links to the other workers, lost and back: shown with its tasks' errors.
        self.link_events = TaskErrors(LINKS_COMPONENT, -1)
        self.exit_reason = ""
        self.failed = False   # ended because an executor died: its process should say so
        self._beat_lock = threading.Lock()   # the heartbeat thread and a last beat at exit
        self.context: zmq.Context | None = None   # made by _build
        self._running = False   # the executors and transport run: stop() has them to stop
        # The spouts start once every peer has been reached (see transport.py), and only while
        # the topology is active; the lock orders that with status changes.
        self._peers_reached = False
        self._activation = threading.Lock()
        # Out of touch with ZooKeeper for FENCE_FRACTION of its session: its spouts stop (see
        # _on_zookeeper). The timer that fences it, and when the silence began.
        self._fenced = False
        self._active = False
        self._fence_timer: threading.Timer | None = None
        self._silent_since = 0.0
        # Assignments the watch saw, for the placement thread to apply.
        self._placements: queue.SimpleQueue[dict] = queue.SimpleQueue()

    # ----- lifecycle

    def start(self) -> None:
        """Connect to ZooKeeper, load the topology code, bind the slot's port, and start the
        executors and the worker's threads; returns. Raises ``NotAssigned`` when the slot has
        nothing to run. See the module doc for ``end`` during start, and a start that raises."""
        self.client = connect(self.zk_hosts, session_timeout=self.zk_session_timeout,
                              security=self.security)
        try:
            self.state = ClusterState(self.client, self.zk_root)
            self._build()
        except BaseException:
            if self.context is not None:
                # Nothing runs yet, but the receiver may hold a bound socket, which term()
                # would wait on forever.
                release(self.context)
                self.context.destroy(linger=0)
            self.client.stop()
            raise
        self.receiver.start()
        self.sender.start()
        self.runtime.start(active=False)
        self._running = True
        self.live_settings.start()
        try:
            for target, name in ((self._activate_when_peers_reached, "peer-wait"),
                                 (self._heartbeat, "heartbeat"),
                                 (self._follow_placements, "placement"),
                                 (self._watch_executors, "executor-watch"),
                                 (functools.partial(self.reporter.run, self.done),
                                  "metrics-reporter")):
                threading.Thread(target=target, name=name, daemon=True).start()
            self.client.add_listener(self._on_zookeeper)
            self._watch(self.state.topology_path(self.topology_id), "topology",
                        self._on_topology)
            self._watch(self.state.assignment_path(self.topology_id), "assignment",
                        self._on_assignment)
        except BaseException as exc:
            # The executors run (ZooKeeper failed us setting the watches, say): stop them the
            # usual way, so the spouts close and commit, before the error goes up.
            if not self.done.is_set():
                self.end(f"start failed: {exc!r}")
            self.stop()
            raise
        log.info("worker %s:%d of %s running %d executors; %s", self.host, self.port,
                 self.topology_id, len(self.executors), build_mode.describe())

    def _build(self) -> None:
        """The runtime, sockets and reporter for this slot's executors, from the topology's
        record and assignment in ZooKeeper; nothing runs yet."""
        record = self.state.topology(self.topology_id)
        assignment = self.state.assignment(self.topology_id)
        if record is None or assignment is None:
            raise NotAssigned(f"topology {self.topology_id} is not (or no longer) assigned")
        if not valid_assignment(assignment):
            raise NotAssigned(f"the assignment of {self.topology_id} is not valid")
        self.executors = slot_executors(assignment, self.supervisor_id, self.port)
        if not self.executors:
            raise NotAssigned(f"nothing of {self.topology_id} is assigned to "
                              f"{self.supervisor_id}:{self.port}")
        # This worker's standing in the assignment: frames carry it, and receivers refuse those
        # of a worker whose slot was given again (tenure.py).
        self.tenure = slot_tenure(assignment, self.supervisor_id, self.port) or 0
        self.fence = Fence()
        self.fence.update(assignment)
        topology, _conf = load_topology_file(self.code_entry)
        self.context = zmq.Context()
        self.stopping = threading.Event()
        self.link_times = LinkTimes.of(record["conf"])
        shared_memory = bool(cfg.merged(record["conf"])[cfg.STORMLET_TRANSPORT_SHARED_MEMORY])
        self.sender = Sender(self.context, self.stopping, self.topology_id, self.security,
                             on_link=self._on_link, slot=slot_key(self.supervisor_id, self.port),
                             tenure=self.tenure, link_times=self.link_times,
                             shared_memory=shared_memory)
        plan = [(e.component, list(e.tasks)) for e in self.executors]
        # What components may need of the cluster: offset spouts commit to its ZooKeeper, and
        # know a restarted worker of this topology instance from a new submission.
        conf = {**record["conf"], cfg.STORMLET_ZOOKEEPER_CONNECT: self.zk_hosts,
                cfg.STORMLET_ZOOKEEPER_ROOT: self.state.root,
                cfg.STORMLET_TOPOLOGY_ID: self.topology_id,
                cfg.STORMLET_STATE_EPOCH: assignment_version(assignment)}
        if self.state_dir is not None and not conf.get(cfg.STORMLET_STATE_DIR):
            conf[cfg.STORMLET_STATE_DIR] = str(self.state_dir)
        rounds = TransportRounds(self.sender)
        self.runtime = TopologyRuntime(record["name"], topology, conf, plan=plan,
                                       remote_routes=self._remote_routes(assignment),
                                       host=self.host, rounds=rounds)
        self.sender.registry = self.runtime.registry
        overload = OverloadWatch(self.runtime.routes, self._peers, self.sender.send)
        self.receiver = Receiver(self.context, f"tcp://{self.bind}:{self.port}",
                                 FrameDecoder(self.runtime.layout, self.topology_id, self.fence,
                                              self.runtime.registry),
                                 make_deliver(self.runtime.routes, self.sender.paused, overload),
                                 self.stopping, overload, self.security, self.topology_id,
                                 on_fenced=self._on_fenced, link_times=self.link_times,
                                 address=(f"tcp://{self.host}:{self.port}" if shared_memory
                                          else None))
        rounds.receiver = self.receiver
        self.status = record.get("status")
        self.started = time.time()
        # Log levels and tuple sampling, as the record says while it runs (live_settings.py).
        self.live_settings = LiveSettings(
            self.runtime, None if self.log_dir is None else samples_file(self.log_dir))
        self.reporter = MetricsReporter(
            self.metrics_snapshot,
            self.state.leader, self.topology_id, self.host, self.port,
            float(self.runtime.conf[cfg.TOPOLOGY_METRICS_REPORT_SECS]),
            credentials=self.security.rpc_client_keys())

    def end(self, reason: str) -> None:
        """Ask the worker to end: ``wait`` returns, and whoever started it calls ``stop``. Safe
        from any thread and from a signal handler; the last reason given is the one logged."""
        self.exit_reason = reason
        self.done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until the worker has ended (True), or ``timeout`` seconds have passed (False)."""
        return self.done.wait(timeout)

    def stop(self) -> None:
        """Shut down after ``end`` (or end now): drain briefly, send the last metrics, close the
        sockets and the ZooKeeper session. Nothing to do after a start that raised, or a second
        time."""
        if not self.done.is_set():
            self.end("stopped")
        if not self._running:
            return
        self._running = False
        log.info("worker %s:%d stopping: %s", self.host, self.port, self.exit_reason)
        # Drain briefly: the topology is going away or this worker is being replaced; what is
        # still in flight fails now or times out at its spout and is replayed.
        self.runtime.stop(wait_secs=min(5.0, self.runtime.timeout_secs))
        # The final counts, while this slot may still be assigned (its supervisor stopping, say).
        self.reporter.report(lookup=False)
        self.live_settings.close()
        self.stopping.set()
        self.sender.join(timeout=2)
        self.receiver.join(timeout=2)
        assert self.context is not None   # made by _build, before the worker runs
        release(self.context)
        self.context.term()
        self.client.stop()

    def metrics_snapshot(self) -> dict:
        """The runtime's snapshot, with this worker's transport counts in its "worker" part,
        and the peers it cannot reach now (host:port, sorted)."""
        snapshot = self.runtime.metrics_snapshot(self.host, self.port)
        snapshot["worker"]["frames_rejected"] = self.receiver.frames_rejected
        snapshot["worker"]["frames_fenced"] = self.receiver.frames_fenced
        snapshot["worker"]["tuples_sent"] = self.sender.tuples_sent
        snapshot["worker"]["batches_sent"] = self.sender.batches_sent
        snapshot["worker"]["frames_sent"] = self.sender.frames_sent
        overload = self.receiver.overload
        # Times an inbox here filled with other workers' data and they were asked to hold it.
        snapshot["worker"]["overloads"] = overload.pauses if overload is not None else 0
        snapshot["worker"]["peers_unreachable"] = sorted(
            address.removeprefix("tcp://") for address in self.sender.unreachable())
        samples = self.live_settings.reported_samples()   # nimbus's `samples` reads them
        if samples:
            snapshot["samples"] = samples
        return snapshot

    def _on_link(self, address: str, down_secs: float | None) -> None:
        """One line, and a record for ``stormlet errors`` naming both ends, when the link to a
        peer is lost and when it is back (the sender's thread calls it, once each)."""
        me, peer = f"{self.host}:{self.port}", address.removeprefix("tcp://")
        if down_secs is None:
            self.link_events.note(
                f"worker {me} lost its link to worker {peer} (nothing heard for "
                f"{self.link_times.timeout_secs:g} s, or that worker stopped): what it sends "
                f"there is dropped and replayed after its timeout; reconnecting",
                level=logging.WARNING)
        else:
            self.link_events.note(f"worker {me}: the link to worker {peer} is back after "
                                  f"{down_secs:.1f} s", level=logging.INFO, counted=False)
            # A checkpoint action sent while it was down was dropped: sent again now.
            self.runtime.links_back()

    def _on_fenced(self, refused: Fenced) -> None:
        """One line, and a record for ``stormlet errors``, when frames from a worker that lost
        its slot are first refused here (the receiver's thread calls it)."""
        self.link_events.note(
            f"worker {self.host}:{self.port} refuses frames from worker slot {refused.sender} "
            f"(tenure {refused.tenure}): {refused.why}; that worker lost its assignment (cut off "
            f"from ZooKeeper, say) and runs on: what it sends is dropped here until it stops",
            level=logging.WARNING)

    # ----- placement and status

    def _remote_routes(self, assignment: dict) -> dict:
        routes = {}
        for executor in assigned_executors(assignment):
            if (executor.supervisor, executor.port) != (self.supervisor_id, self.port):
                route = self.sender.route(f"tcp://{executor.host}:{executor.port}",
                                          slot_key(executor.supervisor, executor.port))
                for task in executor.tasks:
                    routes[task] = route
        return routes

    def _peers(self) -> set[str]:
        """The other workers of this topology, as this worker reaches them now."""
        return {r.address for r in self.runtime.routes if isinstance(r, RemoteRoute)}

    def _watch(self, path: str, what: str, handle: Callable[[dict], None]) -> None:
        """Follow a node: ``handle`` gets each valid version; removal ends the worker."""

        def on_change(data: bytes | None, stat: Any, *args: Any) -> bool | None:
            if self.done.is_set():
                return False
            if data is None:
                self.end(f"the {what} was removed")
                return False
            record = decode_node(path, data)
            if record is not None:
                handle(record)
            return None

        self.client.DataWatch(path, on_change)

    def _peers_not_heard(self) -> set[str]:
        """The other workers of this topology none of whose frames reached this one yet."""
        heard = self.receiver.decoder.heard_from()
        return {r.address for r in self.runtime.routes
                if isinstance(r, RemoteRoute) and r.slot not in heard}

    def _activate_when_peers_reached(self) -> None:
        """Start the spouts once every other worker of the topology has accepted a connection,
        as Storm's workers do, and has reached this one (its greeting came: transport.py);
        until then what they emitted would pile up for a peer that is not listening yet, and
        the peer's acks and requests to hold data could not come back. Peers that move
        meanwhile (a new assignment) are waited for instead."""
        asked: set[str] = set()
        started = time.monotonic()
        next_note = started + PEER_WAIT_NOTE_SECS
        while True:
            peers = self._peers()
            self.sender.connect_to(peers - asked)
            asked |= peers
            missing = (peers - self.sender.reached()) | self._peers_not_heard()
            if not missing:
                break
            if time.monotonic() >= next_note:
                next_note += PEER_WAIT_NOTE_SECS
                log.warning("spouts wait for workers %s to accept connections and reach this "
                            "one (%.0f s so far): see their logs, or the link between them",
                            ", ".join(sorted(missing)), time.monotonic() - started)
            if self.done.wait(PEER_CHECK_SECS):
                return
        with self._activation:
            self._peers_reached = True
            self._apply_activation()

    def _on_topology(self, record: dict) -> None:
        self.live_settings.follow(record)
        status = record.get("status")
        with self._activation:
            if status == self.status:
                return
            self.status = status
            self._apply_activation()

    def _apply_activation(self) -> None:
        """With ``_activation`` held: the spouts emit while the topology is active, every peer
        was reached, and the worker is not fenced; activate or deactivate them on a change."""
        active = self.status == "active" and self._peers_reached and not self._fenced
        if active != self._active:
            self._active = active
            if active:
                self.runtime.activate()
            else:
                self.runtime.deactivate()

    # ----- fencing

    def _on_zookeeper(self, state: str) -> None:
        """kazoo's listener (its thread must not block). A worker out of touch with ZooKeeper
        cannot know whether its session, and its supervisor's, has expired and nimbus moved its
        tasks elsewhere: after FENCE_FRACTION of the session's silence it stops its spouts, so a
        task of it never runs in two places for long. It starts them again once back in touch
        (if its tasks did move, the assignment's watch ends it)."""
        if state == KazooState.CONNECTED:
            if self._fence_timer is not None:
                self._fence_timer.cancel()
                self._fence_timer = None
            if self._fenced:
                threading.Thread(target=self._unfence, name="unfence", daemon=True).start()
        elif self._fence_timer is None and not self._fenced:
            self._silent_since = time.monotonic()
            self._fence_timer = threading.Timer(self.zk_session_timeout * FENCE_FRACTION,
                                                self._fence)
            self._fence_timer.daemon = True
            self._fence_timer.start()

    def _fence(self) -> None:
        with self._activation:
            self._fence_timer = None
            if self.client.connected or self.done.is_set():
                return
            self._fenced = True
            self._apply_activation()
        self.link_events.note(
            f"worker {self.host}:{self.port} has been out of touch with ZooKeeper for "
            f"{time.monotonic() - self._silent_since:.0f} s: its session may have expired and "
            f"its tasks been given to another worker, so its spouts stop emitting until it is "
            f"back in touch", level=logging.WARNING)

    def _unfence(self) -> None:
        # Its tasks may have moved while it was out of touch (its session expired, say): read
        # its standing afresh before a spout emits again, not after the watch fires.
        try:
            assignment = self.state.checked_assignment(self.topology_id)
        except CONNECTION_ERRORS:
            return   # out of touch again: the next reconnection tries again
        if assignment is None:
            self.end("the assignment was removed while it was out of touch with ZooKeeper")
            return
        if slot_tenure(assignment, self.supervisor_id, self.port) is None:
            self.end("its slot left the assignment while it was out of touch with ZooKeeper")
            return
        self._on_assignment(assignment)
        if self.done.is_set():
            return
        with self._activation:
            if not self._fenced or not self.client.connected:
                return
            self._fenced = False
            self._apply_activation()
        self.link_events.note(
            f"worker {self.host}:{self.port} is back in touch with ZooKeeper after "
            f"{time.monotonic() - self._silent_since:.0f} s: its spouts emit again",
            level=logging.INFO, counted=False)

    def _on_assignment(self, assignment: dict) -> None:
        """The assignment's watch (its thread must not wait long): a change of this worker's
        standing ends it at once; a change of what it or its peers run is handed to the
        placement thread (``_follow_placements``)."""
        if not valid_assignment(assignment):
            # Nimbus puts the last good version back; until then, change nothing.
            log.warning("ignoring malformed assignment for %s", self.topology_id)
            return
        self.fence.update(assignment)
        tenure = slot_tenure(assignment, self.supervisor_id, self.port)
        if tenure is not None and tenure != self.tenure:
            self.end(f"its slot was given again (tenure {tenure}, this worker's {self.tenure}): "
                     f"it left the assignment meanwhile, so this worker is stale")
            return
        self._placements.put(assignment)

    def _follow_placements(self) -> None:
        """Apply each new assignment in turn (the newest of those waiting), so that a spout's
        open or a bolt's drain never holds up ZooKeeper's watches."""
        while not self.done.is_set():
            try:
                assignment = self._placements.get(timeout=PLACEMENT_POLL_SECS)
            except queue.Empty:
                continue
            while True:
                try:
                    assignment = self._placements.get_nowait()
                except queue.Empty:
                    break
            try:
                self._place(assignment)
            except Exception as exc:
                log.exception("worker %s:%d could not take on its new executors", self.host,
                              self.port)
                self.end(f"could not take on its new executors ({exc!r}): its supervisor starts "
                         f"it afresh")

    def _place(self, assignment: dict) -> None:
        """Run what ``assignment`` gives this slot, keeping the executors that stay (and their
        in-flight trees): those that left stop (their trees fail and are replayed where they
        run now), new ones start; tasks of other workers are routed to where they run now."""
        executors = slot_executors(assignment, self.supervisor_id, self.port)
        if not executors:
            self.end("nothing of the topology is assigned to its slot any longer")
            return
        have = {(e.component, tuple(e.tasks)) for e in self.executors}
        want = {(e.component, tuple(e.tasks)) for e in executors}
        remote = self._remote_routes(assignment)
        leaving = {task for _component, tasks in have - want for task in tasks}
        if leaving - remote.keys():
            # Split differently here (a rebalance of executor counts): a fresh worker is simpler.
            self.end("its executors were split differently")
            return
        if leaving:
            self.runtime.remove_executors(leaving, {t: remote[t] for t in leaving})
        if want - have:
            # Their state stores refuse the writes of whoever ran them before (cut off, say).
            self.runtime.add_executors([(c, list(tasks)) for c, tasks in sorted(want - have)],
                                       {cfg.STORMLET_STATE_EPOCH: assignment_version(assignment)})
        if have != want:
            log.info("worker %s:%d of %s now runs %d executors: %d left for other workers, %d "
                     "taken on; the rest ran on", self.host, self.port, self.topology_id,
                     len(want), len(have - want), len(want - have))
        self.executors = executors
        # Others moved: point their tasks at their new workers, and let go of the old ones.
        old = self._peers()
        for task, route in remote.items():
            current = self.runtime.routes[task]
            if getattr(current, "address", None) != route.address:
                self.runtime.routes[task] = route
        peers = self._peers()
        for address in old - peers:
            self.sender.retire(address)
        # Reach the new ones at once, as Storm's workers refresh their connections: a new
        # worker's spouts wait until every peer has reached it, and this one may have nothing
        # to send it until they start.
        self.sender.connect_to(peers - old)

    # ----- health

    def _watch_executors(self) -> None:
        while not self.done.wait(EXECUTOR_CHECK_SECS):
            reason = self._broken()
            if reason is not None:
                # Half a worker is worse than none: end, and the supervisor starts a whole one.
                # The executor or thread logged why; one last heartbeat carries that to the
                # supervisor, which keeps it after this process is gone.
                self.failed = True
                try:
                    self._write_heartbeat(stopping=reason)
                except Exception:
                    log.exception("could not write the last heartbeat")
                self.end(reason)

    def _broken(self) -> str | None:
        """Why this worker can no longer do its work (an executor or a transport thread
        ended), or None."""
        dead = [e for e in self.runtime.all_executors() if e.finished.is_set()]
        if dead:
            return dead[0].death or f"executor {dead[0].name} ended"
        for thread in (self.sender, self.receiver):
            if not thread.is_alive() and not self.stopping.is_set():
                return f"the transport's {thread.name} thread ended"
        return None

    def _heartbeat(self) -> None:
        while not self.done.is_set():
            try:
                self._write_heartbeat()
            except Exception:  # a full disk, say: the supervisor will notice the silence
                log.exception("could not write the heartbeat file %s", self.heartbeat_file)
            self.done.wait(HEARTBEAT_SECS)

    def _write_heartbeat(self, stopping: str | None = None) -> None:
        with self._beat_lock:
            write_heartbeat(self.heartbeat_file, topology_id=self.topology_id, port=self.port,
                            started=self.started, metrics=self.runtime.summary(),
                            tasks=sorted(self.runtime.local_tasks),
                            errors=heartbeat_errors(self._errors()), stopping=stopping)

    def _errors(self) -> list:
        """The recent errors of every task here and of the worker's links, oldest first."""
        return sorted([*self.runtime.errors(), *self.link_events.recent_records()],
                      key=lambda e: e.time)
