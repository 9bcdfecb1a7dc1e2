"""Supervisor: runs the worker processes its node is assigned, and keeps them running.

It registers itself in ZooKeeper (an ephemeral node: nimbus sees it vanish when it dies), and
every second compares what runs on its slots with the assignments: it starts missing workers
(fetching topology code from nimbus once), restarts workers that exited or stopped heartbeating,
and kills workers no longer assigned here. Every few seconds it writes one report on its workers
to ZooKeeper: one write per node, not one per worker. The report carries each worker's metrics
and recent errors, and the last errors of the last worker that exited on each slot, so that a
worker's dying words outlive it (see errors.py for what is kept and how big it may get).

A worker runs with its topology's worker settings: the supervisor's environment plus
``topology.environment`` (stormlet's own variables set last), and ``topology.worker.childopts``
given to its Python. Every pass also measures the workers whose topology sets
``topology.worker.max.heap.size.mb``, and one over it is killed and started again, which is
reported as an error of the slot (memory_limit.py).

A worker writes its own log, rotated, in its directory under ``DATA/logs/workers/`` (log_files.py,
logging_setup.py); the supervisor sends the process's raw output beside it (``worker.out``).
Its node service (node_service.py), whose address it registers in ZooKeeper, serves those files
to nimbus (``stormlet logs``) and keeps them bounded; it also dumps a worker's stacks, profiles
it and restarts it when nimbus asks (node_introspection.py).

A ZooKeeper outage does not stop workers: the supervisor keeps the last assignment it read and
only acts on what it can observe locally until ZooKeeper is back.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kazoo.protocol.states import KazooState

from .. import config as cfg
from ..repeats import Repeats
from . import events, rpc
from .blob_cache import DEFAULT_KEEP_SECS, BlobCache
from .blob_transfer import download
from .code import CodeError, unpack
from .cpu_pinning import CpuPinning
from .environments import BuildError, Builds, Environments, EnvironmentSettings
from .error_reports import cap_report, report_errors, unstarted_entry
from .events import RESTART_ASKED, EventRecorder, EventStore, exit_text
from .heartbeat import heartbeat_path, last_beat_time, read_heartbeat
from .log_files import logs_dir, worker_log_dir, worker_out_file
from .logging_setup import LOG_DIR_OPTION, LogSettings
from .memory_limit import Overruns, overrun_text, resident_mb
from .names import check_topology_id
from .nimbus_client import fetch_code
from .node_introspection import NodeIntrospection
from .node_service import NodeService
from .security import (
    SECRET_FILE_ENV,
    WORKER_CREDENTIALS_ENV,
    Security,
    check_bind_address,
    write_private_file,
)
from .tenure import slot_tenure
from .worker_command import PORT_OPTION, PROC, command_line, is_worker, option_value, worker_command
from .worker_introspection import DEFAULT_RESTART_TIMEOUT_SECS, Restarts
from .zk_state import (
    CONNECTION_ERRORS,
    DEFAULT_ROOT,
    DEFAULT_SESSION_TIMEOUT,
    ClusterState,
    assigned_executors,
    connect,
    describe,
)

log = logging.getLogger(__name__)

SYNC_SECS = 1.0
REPORT_SECS = 3.0
# A worker that exits (or is stopped over its memory limit) younger than this is restarted
# after growing delays: it would likely do the same again at once.
QUICK_EXIT_SECS = 10.0


class Wanted(NamedTuple):
    """What should run in one of this supervisor's slots: a topology's worker, and the slot's
    tenure in its assignment (a new tenure means a new worker: tenure.py)."""

    topology_id: str
    tenure: int | None


@dataclass
class WorkerProcess:
    topology_id: str
    tenure: int | None   # its slot's tenure when it started (tenure.py)
    process: subprocess.Popen
    heartbeat_file: Path
    started: float = field(default_factory=time.time)
    restarts: int = 0
    memory_limit_mb: float | None = None   # its topology's (memory_limit.py)


class Supervisor:
    def __init__(self, zk_hosts: str, slots: list[int], data_dir: str | Path = "supervisor-data",
                 host: str = "127.0.0.1", zk_root: str = DEFAULT_ROOT,
                 supervisor_id: str | None = None, worker_timeout: float = 30.0,
                 worker_start_timeout: float = 120.0, security: Security | None = None,
                 bind: str | None = None, pin_workers: bool | None = None,
                 zk_session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                 environments: EnvironmentSettings | None = None,
                 blob_keep_secs: float = DEFAULT_KEEP_SECS, service_port: int = 0,
                 log_settings: LogSettings | None = None):
        """Peers reach this node's workers at ``host``; they listen on ``bind`` (default:
        ``host``), which without a cluster secret (``security``) must be loopback.
        ``pin_workers``: pin each worker to a CPU always (True), never (False), or by default
        (None): see cpu_pinning.py. ``zk_session_timeout``, its workers' too: see
        ``zk_state.DEFAULT_SESSION_TIMEOUT``. ``environments``: where and how this node builds
        the environments of topologies that declare dependencies (environments.py).
        ``blob_keep_secs``: how long a cached blob no topology here uses is kept
        (blob_cache.py). ``service_port``: where this node's service (node_service.py: its
        logs, for nimbus) listens, on ``bind``; 0: any free port. ``log_settings``: this
        node's (its own log's, and the bound on each worker's raw output)."""
        self.zk_session_timeout = zk_session_timeout
        self.security = security or Security()
        self.bind = bind or host
        check_bind_address(self.bind, self.security, "this supervisor's workers")
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.slots = sorted(slots)
        self.pinning = CpuPinning(len(self.slots), pin_workers)
        self.host = host
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.supervisor_id = supervisor_id or self._stored_id()
        self.worker_timeout = worker_timeout
        self.worker_start_timeout = worker_start_timeout
        self.workers: dict[int, WorkerProcess] = {}
        self.restarts: dict[tuple[str, int], int] = {}
        self.quick_exits: dict[int, int] = {}
        self.not_before: dict[int, float] = {}
        self.stopping = threading.Event()
        self._session_lost = threading.Event()   # until the registration is back
        self._assignments: dict[str, dict] = {}
        # Port -> what the last worker that exited there left: its last metrics and errors.
        self.exited: dict[int, dict[str, Any]] = {}
        # ZooKeeper out of reach, found by a pass every second: logged once a minute at most.
        self._repeats = Repeats(log)
        # Workers stopped over their memory limit, by slot: what is reported of them.
        self.overruns = Overruns()
        # Topologies' environments, built off the loop; port -> why its worker cannot start
        # (its environment failed to build), reported like an exited worker's errors.
        self.builds = Builds(Environments(environments))
        self.unstarted: dict[int, dict] = {}
        self.blob_cache = BlobCache(self.data_dir / "blobs", self._code_dir, self._fetch_blob,
                                    blob_keep_secs)
        self._blob_maps: dict[str, dict[str, str]] = {}   # tid -> its topology.blobstore.map
        # Worker starts, exits and stops, in their topology's event history (events.py).
        self._events = EventRecorder(lambda: EventStore(self.client, self.zk_root),
                                     f"supervisor:{self.supervisor_id}@{self.host}")
        self.node_service = NodeService(
            logs_dir(self.data_dir), self.bind, service_port, host, self.security,
            in_use=lambda: set(self._assignments) | {w.topology_id for w in
                                                     list(self.workers.values())},
            output_max_bytes=(log_settings or LogSettings()).max_bytes)
        # Restarts asked for (the node service's), carried out by the loop (_sync).
        self.restart_requests = Restarts()
        # Stack dumps, profiles and restarts of its workers, for nimbus (node_introspection.py).
        introspection = NodeIntrospection(
            lambda port: self.workers.get(port),
            lambda tid, port: worker_log_dir(self.data_dir, tid, port),
            self.restart_worker, host)
        for name, operation in introspection.operations().items():
            self.node_service.add_operation(name, operation)

    def _stored_id(self) -> str:
        # The same node keeps its id across restarts, so nimbus sees it come back, not a stranger.
        path = self.data_dir / "supervisor-id"
        if not path.exists():
            path.write_text(f"{self.host}-{uuid.uuid4().hex[:8]}")
        return path.read_text().strip()

    def start(self) -> None:
        self._kill_orphans()
        self.client = connect(self.zk_hosts, session_timeout=self.zk_session_timeout,
                              security=self.security)
        try:
            # Refuses a root this cluster did not make, as nimbus does.
            self.state = ClusterState(self.client, self.zk_root, self.security)
            self.node_service.start()
        except BaseException:
            self.client.stop()
            self.client.close()
            raise
        self._register()
        self.client.add_listener(self._on_connection)
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._thread.start()
        log.info("supervisor %s on %s with slots %s; workers %s", self.supervisor_id, self.host,
                 self.slots, self.pinning.describe())

    def record_event(self, topology_id: str, kind: str, text: str, **detail: object) -> None:
        """Add an event to the topology's history (events.py), as ``Nimbus.record_event``
        does; never raises. A topology whose history is gone gets none."""
        self._events.record(topology_id, kind, text, **detail)

    def _worker_event(self, kind: str, port: int, worker: WorkerProcess, text: str,
                      **detail: object) -> None:
        """An event of the worker on ``port``: its text begins with the worker's name."""
        self.record_event(worker.topology_id, kind, f"worker {self.host}:{port} {text}",
                          host=self.host, port=port, supervisor=self.supervisor_id,
                          pid=worker.process.pid, **detail)

    def _kill_orphans(self) -> None:
        """Workers a previous run of this supervisor left behind hold our ports and answer to
        nobody: stop them before starting ours (they are restarted under supervision)."""
        for port in self.slots:
            beat = read_heartbeat(heartbeat_path(self.data_dir, port))
            if beat is None or beat.pid is None:
                continue
            pid = beat.pid
            try:
                command = command_line(pid)
            except OSError:
                continue
            if is_worker(command) and option_value(command, PORT_OPTION) == str(port).encode():
                log.warning("stopping worker pid %d left on port %d by a previous supervisor",
                            pid, port)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + 10
                while (PROC / str(pid)).exists() and time.monotonic() < deadline:
                    time.sleep(0.05)

    def _register(self) -> None:
        self.state.register_supervisor(self.supervisor_id, {
            "host": self.host, "slots": self.slots, "started": time.time(),
            "service": self.node_service.address})

    def _on_connection(self, state: str) -> None:
        if state == KazooState.LOST:
            # The session expired, and our ephemeral registration with it: the loop puts it
            # back once connected again. After a mere disconnect both live on, and rewriting
            # the node (delete, create) could show nimbus this supervisor gone: it would move
            # the workers.
            self._session_lost.set()

    def _reregister(self) -> None:
        """Put back the registration an expired session took (from the loop, connected)."""
        self._session_lost.clear()   # before: an expiry meanwhile sets it again
        try:
            self._register()
        except Exception as exc:
            self._session_lost.set()
            self._repeats.warning("register", "could not re-register supervisor %s in ZooKeeper "
                                  "(%s): nimbus takes it for dead until it does; it tries again "
                                  "every %.0f s", self.supervisor_id, describe(exc), SYNC_SECS)
        else:
            self._repeats.clear("register")
            log.info("supervisor %s registered again after its ZooKeeper session expired",
                     self.supervisor_id)

    def stop(self, kill_workers: bool = True) -> None:
        self.stopping.set()
        self.node_service.stop()
        self._thread.join(timeout=10)
        if kill_workers:
            for port in list(self.workers):
                self._kill(port, "the supervisor is stopping", cause=events.SUPERVISOR_STOPPING)
        self.client.stop()
        self.client.close()

    # ----- the loop

    def _loop(self) -> None:
        last_report = 0.0
        while not self.stopping.wait(SYNC_SECS):
            try:
                if self._session_lost.is_set() and self.client.state == KazooState.CONNECTED:
                    self._reregister()
                self._read_assignments()
                self._sync_blobs()
                self._sync()
                self._remove_unused_code()
                if time.monotonic() - last_report >= REPORT_SECS:
                    self._report()
                    last_report = time.monotonic()
            except CONNECTION_ERRORS as exc:
                self._zookeeper_lost(exc)
            except Exception:
                log.exception("supervisor pass failed")
            else:
                self._zookeeper_back()

    def _zookeeper_lost(self, exc: Exception) -> None:
        # Expected on a real network (the link dropped during a pass): one line, no traceback.
        self._repeats.warning("zookeeper", "supervisor %s lost ZooKeeper during a pass (%s): "
                              "its workers keep running on the last assignment it read; it "
                              "tries again every %.0f s", self.supervisor_id, describe(exc),
                              SYNC_SECS)

    def _zookeeper_back(self) -> None:
        # Only a pass that reached ZooKeeper says it is back: one that skipped it does not.
        if self.client.state == KazooState.CONNECTED and self._repeats.clear("zookeeper"):
            log.info("supervisor %s reaches ZooKeeper again", self.supervisor_id)

    def _read_assignments(self) -> None:
        if self.client.state != KazooState.CONNECTED:
            return  # keep acting on the last assignment we saw
        good, corrupt = self.state.checked_assignments()
        for tid in corrupt & set(self._assignments):
            good[tid] = self._assignments[tid]   # act on the last good version
        self._assignments = good

    def desired(self) -> dict[int, Wanted]:
        """What should run here: per slot, the topology id and its tenure there (a new one
        means a new worker: tenure.py). A worker takes on and gives up executors while it
        runs (worker.py), so a change of those alone is no reason to replace it."""
        want: dict[int, Wanted] = {}
        # Only well-formed assignments get here (ClusterState.checked_assignments).
        for tid, assignment in self._assignments.items():
            for executor in assigned_executors(assignment):
                if executor.supervisor == self.supervisor_id and executor.port in self.slots:
                    want[executor.port] = Wanted(tid, slot_tenure(assignment, self.supervisor_id,
                                                                  executor.port))
        return want

    def restart_worker(self, topology_id: str, port: int, reason: str,
                       timeout: float = DEFAULT_RESTART_TIMEOUT_SECS) -> dict:
        """Stop the worker of ``topology_id`` on ``port``, logging ``reason``, and start it
        again at once; returns once it has stopped (worker_introspection.Restarts)."""
        return self.restart_requests.ask(topology_id, port, reason, timeout)

    def _sync(self) -> None:
        self.restart_requests.serve(
            self.workers, lambda port, reason: self._kill(port, reason, cause=RESTART_ASKED),
            self.host)
        want = self.desired()
        for port in list(self.workers):
            worker = self.workers[port]
            wanted = want.get(port)
            if wanted is None and worker.topology_id not in self._assignments:
                self._kill(port, "its topology is no longer assigned (killed)",
                           cause=events.UNASSIGNED)
            elif wanted is None or wanted.topology_id != worker.topology_id:
                self._kill(port, "the topology's new assignment moved it off this slot",
                           cause=events.MOVED)
            elif wanted.tenure != worker.tenure:
                self._kill(port, "its slot left the assignment and was given again (fenced: a "
                           "new worker takes the new tenure)", cause=events.FENCED)
        for port, (tid, tenure) in want.items():
            running = self.workers.get(port)
            if running is None:
                if (time.monotonic() >= self.not_before.get(port, 0.0)
                        and self._blobs_ready(tid, port)):
                    self._launch(port, tid, tenure)
                continue
            exit_code = running.process.poll()
            if exit_code is not None:
                # A worker that dies young is restarted with growing delays, not in a tight loop;
                # one killed by SIGKILL (an operator, the OOM killer) is no crash loop: at once.
                delay = self._restart_delay(port, running, exit_code != -signal.SIGKILL)
                last_words = self._keep_last_words(port, running, exit_code)
                log.warning("worker %s:%d of %s exited with %s; restarting in %.0fs%s",
                            self.host, port, tid, exit_code, delay, last_words)
                self._worker_event(events.WORKER_EXITED, port, running,
                                   f"{exit_text(exit_code)} after "
                                   f"{time.time() - running.started:.0f} s; restarting "
                                   f"{f'in {delay:.0f} s' if delay else 'at once'}{last_words}",
                                   exit_code=exit_code, restart_in=delay,
                                   uptime=time.time() - running.started)
                del self.workers[port]
                self.not_before[port] = time.monotonic() + delay
            elif self._heartbeat_stale(running):
                log.warning("worker %s:%d of %s stopped heartbeating; killing and restarting%s",
                            self.host, port, tid,
                            self._keep_last_words(port, running, "no heartbeat"))
                self._kill(port, f"no heartbeat for {self.worker_timeout:g} s (hung, or too busy "
                           f"to write one); restarting it", hard=True, cause=events.HEARTBEAT)
                self._launch(port, tid, tenure)
            else:
                self._check_memory(port, running)

    def _restart_delay(self, port: int, worker: WorkerProcess, may_loop: bool) -> float:
        """How long to wait before starting the next worker on ``port`` after ``worker``
        ended: growing delays while workers there end young, if that ``may_loop``."""
        quick = may_loop and time.time() - worker.started < QUICK_EXIT_SECS
        self.quick_exits[port] = self.quick_exits.get(port, 0) + 1 if quick else 0
        return min(30.0, 2.0 ** self.quick_exits[port]) if quick else 0.0

    def _check_memory(self, port: int, worker: WorkerProcess) -> None:
        """Stop ``worker`` and start it again (after a delay, if it was young) when it uses more
        memory than its topology allows, recording why (memory_limit.py)."""
        if worker.memory_limit_mb is None:
            return
        try:
            used = resident_mb(worker.process.pid)
        except (OSError, ValueError, IndexError):
            return   # it has just exited: the next pass sees that
        if used <= worker.memory_limit_mb:
            return
        # Over its limit at every start (it loads too much, say), it would loop.
        delay = self._restart_delay(port, worker, may_loop=True)
        text = overrun_text(self.host, port, worker.topology_id, used, worker.memory_limit_mb,
                            delay)
        self._keep_last_words(port, worker, "stopped over its memory limit")
        self.overruns.overrun(port, worker.topology_id, text)
        self._kill(port, f"using {used:.0f} MB, over its memory limit of "
                   f"{worker.memory_limit_mb:g} MB ({cfg.TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB}); "
                   f"restarting it{f' in {delay:.0f} s' if delay >= 1 else ''}", hard=True,
                   cause=events.MEMORY)
        self.not_before[port] = time.monotonic() + delay

    def _remove_unused_code(self) -> None:
        if self.client.state != KazooState.CONNECTED:
            return  # an outage is no reason to forget anything
        in_use = set(self._assignments) | {w.topology_id for w in self.workers.values()}
        code_dir = self.data_dir / "code"
        if code_dir.is_dir():
            for path in code_dir.iterdir():
                if path.name.lstrip(".").removesuffix(".partial") not in in_use:
                    shutil.rmtree(path, ignore_errors=True)
        credentials = self._credentials_dir()
        if credentials.is_dir():
            for path in credentials.glob("*.json"):
                if path.stem not in in_use:
                    path.unlink(missing_ok=True)
        for key in [k for k in self.restarts if k[0] not in in_use]:
            del self.restarts[key]
        for port in [p for p, e in self.exited.items() if e["topology_id"] not in in_use]:
            del self.exited[port]
        self.overruns.retain(lambda tid: tid in in_use)
        for port in [p for p, e in self.unstarted.items() if e["topology_id"] not in in_use]:
            del self.unstarted[port]
        self.builds.keep(code_dir / tid for tid in in_use)

    def _heartbeat_stale(self, worker: WorkerProcess) -> bool:
        beat = last_beat_time(worker.heartbeat_file)
        if beat is None:
            return time.time() - worker.started > self.worker_start_timeout
        return time.time() - beat > self.worker_timeout

    # ----- workers

    def _code_dir(self, tid: str) -> Path:
        """The topology's unpacked project directory: its workers' working directory."""
        return self.data_dir / "code" / check_topology_id(tid)

    def _code_entry(self, tid: str) -> Path:
        directory = self._code_dir(tid)
        marker = directory / ".entry"
        if not marker.is_file():
            code = self._fetch_code(tid)
            staging = directory.with_name(f".{tid}.partial")
            shutil.rmtree(staging, ignore_errors=True)
            entry = unpack(code, staging)
            (staging / ".entry").write_text(entry.relative_to(staging).as_posix())
            shutil.rmtree(directory, ignore_errors=True)
            os.replace(staging, directory)
        return directory / marker.read_text().strip()

    def _fetch_code(self, tid: str) -> bytes:
        """From the leader, or any nimbus that has it (standbys keep copies); only bytes that
        match the digest in the topology's record are taken."""
        expected = (self.state.topology(tid) or {}).get("code_sha256")
        problem = "no nimbus is registered"
        for address in self.state.nimbus_addresses():
            try:
                return fetch_code(address, tid, expected, self.security, timeout=15)
            except rpc.RpcError as exc:
                problem = str(exc)
            except CodeError as exc:
                problem = f"{address}: {exc}"
                log.warning("refused the code of %s from the nimbus at %s: %s", tid, address, exc)
        raise rpc.RpcError(f"no nimbus could give the code of {tid}: {problem}")

    # ----- blobs (blob_cache.py): fetched once per node, linked into workers' directories

    def _sync_blobs(self) -> None:
        """Tell the blob cache what the topologies here map and what their keys hold now."""
        connected = self.client.state == KazooState.CONNECTED
        here = ({wanted.topology_id for wanted in self.desired().values()}
                | {w.topology_id for w in self.workers.values()})
        self._blob_maps = {tid: m for tid, m in self._blob_maps.items() if tid in here}
        for tid in here - set(self._blob_maps):
            record = self.state.topology(tid) if connected else None
            if record is not None:   # a topology's map never changes: read once
                try:
                    self._blob_maps[tid] = cfg.blobstore_map(
                        (record.get("conf") or {}).get(cfg.TOPOLOGY_BLOBSTORE_MAP))
                except ValueError as exc:   # nimbus checked it at submit
                    log.warning("topology %s has a blob map that does not parse (%s): its "
                                "workers get no blobs", tid, exc)
                    self._blob_maps[tid] = {}
        mapping = any(self._blob_maps.values())
        records = self.state.blobs() if connected and mapping else None
        self.blob_cache.sync(self._blob_maps, records if mapping else {})

    def _blobs_ready(self, tid: str, port: int) -> bool:
        if self.blob_cache.ready(tid):
            self._repeats.clear(("blobs", tid, port))
            return True
        self._repeats.warning(("blobs", tid, port), "worker for %s on port %d waits for %s",
                              tid, port, self.blob_cache.waiting_for(tid))
        return False

    def _fetch_blob(self, digest: str, size: int, destination: Path, partial: Path) -> None:
        """Copy a blob from the nimbuses (the blob cache's thread calls it)."""
        download(self.state.nimbus_addresses(), digest, size, destination, partial,
                 self.security)

    def _launch(self, port: int, tid: str, tenure: int | None) -> None:
        record = self.state.topology(tid)
        if not isinstance(record, dict):
            log.debug("not starting a worker for %s: its record is gone (killed)", tid)
            return   # its assignment goes next
        conf = record.get("conf") or {}
        try:
            # Checked at submit; a record written by a nimbus before the check is checked here.
            options = cfg.worker_python_options(conf)
            limit = cfg.worker_memory_limit_mb(conf)
            environment = self._worker_environment(tid, str(record.get("name", "")), conf)
            log_settings = LogSettings.from_conf(conf)
            entry = self._code_entry(tid)
            self.blob_cache.link(tid)
        except Exception as exc:
            log.warning("cannot start worker for %s on port %d yet: %s", tid, port, exc)
            return
        python = self._worker_python(port, tid)
        if python is None:
            return
        log_dir = worker_log_dir(self.data_dir, tid, port)
        log_dir.mkdir(parents=True, exist_ok=True)
        heartbeat = heartbeat_path(self.data_dir, port)
        heartbeat.parent.mkdir(exist_ok=True)
        heartbeat.unlink(missing_ok=True)
        command = worker_command(python, options, [
            "--zk", self.zk_hosts, "--zk-root", self.zk_root, "--topology-id", tid,
            "--zk-session-timeout", str(self.zk_session_timeout),
            "--supervisor-id", self.supervisor_id, PORT_OPTION, str(port),
            "--host", self.host, "--bind", self.bind, "--code", str(entry),
            "--heartbeat-file", str(heartbeat),
            # Outside the code directory: state outlives a topology instance.
            "--state-dir", str((self.data_dir / "state").resolve()),
            # It writes its log there itself (logging_setup.py); its raw output goes beside.
            LOG_DIR_OPTION, str(log_dir.resolve()), *log_settings.options()])
        with open(worker_out_file(log_dir), "ab") as log_file:
            process = self.pinning.start(command, lambda argv: subprocess.Popen(
                argv, stdout=log_file, stderr=subprocess.STDOUT, cwd=str(entry.parent),
                env=environment, start_new_session=True))
        restarts = self.restarts.get((tid, port), -1) + 1
        self.restarts[(tid, port)] = restarts
        self.workers[port] = WorkerProcess(tid, tenure, process, heartbeat, restarts=restarts,
                                           memory_limit_mb=limit)
        again = f" again (restart {restarts} on this slot)" if restarts else ""
        self._worker_event(events.WORKER_STARTED, port, self.workers[port],
                           f"started{again}, pid {process.pid}", restarts=restarts,
                           tenure=tenure)
        log.info("started worker %s:%d for %s (pid %d)%s", self.host, port, tid, process.pid,
                 f" with Python options {' '.join(options)}" if options else "")

    def _worker_python(self, port: int, tid: str) -> str | None:
        """The interpreter of the topology's workers: its environment's (environments.py) once
        built on this node, ours when it declares no dependencies. None while the build runs,
        or after it failed: that is reported against the topology and this node (``stormlet
        errors``, ``stormlet list``) until a later attempt succeeds."""
        code_dir = self.data_dir / "code" / tid
        try:
            python = self.builds.python_for(code_dir)
        except BuildError as exc:
            self._repeats.warning(("environment", tid), "cannot start worker %s:%d of %s: its "
                                  "environment failed to build: %s", self.host, port, tid, exc)
            failures = self.builds.failures(code_dir)
            if self.unstarted.get(port, {}).get("failures") != failures:
                self.unstarted[port] = unstarted_entry(tid, str(exc), failures)
                self.record_event(tid, events.ENVIRONMENT_FAILED,
                                  f"worker {self.host}:{port} cannot start: its environment "
                                  f"failed to build: {exc}", host=self.host, port=port,
                                  supervisor=self.supervisor_id, failures=failures)
            return None
        if python is None:
            self._repeats.warning(("environment", tid), "worker %s:%d of %s waits for its "
                                  "environment to be built", self.host, port, tid)
        else:
            self._repeats.clear(("environment", tid))
            self.unstarted.pop(port, None)
        return python

    def _worker_environment(self, tid: str, name: str, conf: dict) -> dict[str, str]:
        """Ours, less the cluster secret's location, plus the topology's own variables
        (``topology.environment``: ``ValueError`` if it cannot be used); with security on, plus
        the file holding the topology's own credentials (all a worker gets: it runs the
        topology's code). Stormlet's own variables are set last, so that nothing a topology
        sets replaces them (its config may not name one anyway: config.RESERVED_ENV_PREFIX)."""
        environment = {k: v for k, v in os.environ.items()
                       if k not in (SECRET_FILE_ENV, WORKER_CREDENTIALS_ENV)}
        environment.update(cfg.worker_environment(conf))
        if self.security.enabled:
            directory = self._credentials_dir()
            directory.mkdir(mode=0o700, exist_ok=True)
            directory.chmod(0o700)   # whatever it was made with before
            path = directory / f"{tid}.json"
            write_private_file(path, json.dumps(self.security.worker_credentials(tid, name)),
                               replace=True)
            environment[WORKER_CREDENTIALS_ENV] = str(path.resolve())
        return environment

    def _credentials_dir(self) -> Path:
        return self.data_dir / "credentials"

    def _kill(self, port: int, reason: str, hard: bool = False, cause: str = "") -> None:
        """Stop the worker on ``port`` (SIGTERM, or SIGKILL if ``hard``), recording ``reason``
        (``cause``: a word for scripts, events.py) in its topology's events."""
        worker = self.workers.pop(port, None)
        if worker is None:
            return
        log.info("stopping worker %s:%d of %s: %s", self.host, port, worker.topology_id, reason)
        process = worker.process
        if process.poll() is None:
            process.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._worker_event(events.WORKER_STOPPED, port, worker,
                           f"stopped by its supervisor: {reason} ({exit_text(process.returncode)})",
                           cause=cause, reason=reason, exit_code=process.returncode)

    def _keep_last_words(self, port: int, worker: WorkerProcess, exit_code: object) -> str:
        """Keep what an ending worker last reported (before a new worker's start deletes its
        heartbeat file); returns why it stopped, or its newest error, for the log line."""
        beat = read_heartbeat(worker.heartbeat_file)
        errors = report_errors(beat.errors) if beat is not None else []
        self.exited[port] = {"topology_id": worker.topology_id, "pid": worker.process.pid,
                             "exit": str(exit_code), "time": time.time(),
                             "metrics": beat.metrics if beat is not None else {},
                             "errors": errors}
        if beat is not None and beat.stopping is not None:
            return f"; it said: {beat.stopping[:500]}"
        if errors:
            newest = errors[-1]
            return (f"; its last error: {newest['component']} task {newest['task']}: "
                    f"{newest['error']}")
        return ""

    def _report(self) -> None:
        if self.client.state != KazooState.CONNECTED:
            return
        workers = {}
        for port, worker in self.workers.items():
            entry = {"topology_id": worker.topology_id, "pid": worker.process.pid,
                     "uptime": time.time() - worker.started, "restarts": worker.restarts,
                     "errors": []}
            beat = read_heartbeat(worker.heartbeat_file)
            if beat is not None:
                entry["metrics"] = beat.metrics
                entry["heartbeat"] = beat.time
                entry["errors"] = report_errors(beat.errors)
            workers[str(port)] = entry
        exited = {str(port): dict(entry) for port, entry in self.exited.items()}
        for port, gone in self.exited.items():
            # Workers stopped over their memory limit: what the supervisor says of them.
            overruns = self.overruns.errors(port, gone["topology_id"])
            if overruns:
                exited[str(port)]["errors"] = [*gone["errors"], *overruns]
                exited[str(port)]["supervisor_errors"] = self.overruns.count(
                    port, gone["topology_id"])
        unstarted = {str(port): dict(entry) for port, entry in self.unstarted.items()}
        cap_report([*workers.values(), *exited.values(), *unstarted.values()])
        self.state.set_heartbeat(self.supervisor_id, {"time": time.time(), "host": self.host,
                                                      "workers": workers, "exited": exited,
                                                      "unstarted": unstarted})

