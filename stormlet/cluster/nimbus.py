"""Nimbus: accepts topologies, schedules them onto supervisors' slots, and keeps them placed.

Several nimbus processes may run; one leads (a kazoo election) and does everything that writes
cluster state. Standbys answer read-only requests (``list``, ``errors``), copy every topology's
code and every blob (blob_service.py) from the leader so that they can take over, and refuse the
rest with the leader's address.
Running topologies do not need nimbus: workers keep going while none is up.

Workers push their metrics to the leader, which keeps them in memory only (``metrics_store``),
with what the workers it saw replaced had counted, and serves them with ``metrics``: a standby
has none to serve, and one that becomes leader starts empty (it learns each worker from its next
report; what workers replaced before then counted is not known to it).

    nimbus = Nimbus("127.0.0.1:2181", port=6627, data_dir="/var/lib/stormlet/nimbus")
    nimbus.start()    # returns; serves from threads until nimbus.stop()
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kazoo.protocol.states import KazooState

from .. import config as cfg
from ..redaction import redact_config, redact_errors
from . import rpc
from .blob_service import BlobService
from .blob_store import CHUNK_BYTES, BlobStore
from .code import MAX_PACKAGE_BYTES, CodeError, digest, inspect_package, unpack
from .environments import (
    CLEAN_SECS,
    BuildError,
    Environment,
    Environments,
    EnvironmentSettings,
    package_spec,
)
from .errors import topology_error_summary, topology_errors
from .metrics_store import MetricsStore
from .names import check_topology_id, check_topology_name, is_topology_id, new_topology_id
from .scheduler import (
    SchedulingError,
    even_schedule,
    pick_slots,
    plan_from_summary,
    repair,
    spread_back,
)
from .nimbus_client import fetch_code
from .repeats import Repeats
from .runtime_settings import RuntimeSettings
from .security import Security, check_bind_address
from .tenure import next_assignment
from .zk_state import (
    CONNECTION_ERRORS,
    DEFAULT_ROOT,
    DEFAULT_SESSION_TIMEOUT,
    ClusterState,
    Executor,
    ForeignNodeError,
    Slot,
    assigned_executors,
    connect,
    describe,
    offsets_path,
    rpc_address,
)

log = logging.getLogger(__name__)

ACTIVE, INACTIVE, KILLED = "active", "inactive", "killed"
# How often the leader checks placements, kills and unscheduled topologies.
MONITOR_SECS = 1.0
# A supervisor that (re)joined takes on work spread back to it only once it has stayed
# registered this long: a host whose link flaps would otherwise be given executors each time.
SETTLE_SECS = 10.0
# Most errors one `errors` request returns.
MAX_ERRORS = 1000
# Recent errors in a `topology_info` answer.
INFO_ERRORS = 20
# A worker's snapshot is dropped after this many report intervals without a newer one.
STALE_REPORTS = 3
# Request size limits beyond the default (rpc.DEFAULT_MAX_BYTES): a submission's config (its code
# package is the payload), and a worker's metrics snapshot (a few hundred tasks' counters).
SUBMIT_CONF_BYTES = 1024 * 1024
METRICS_REPORT_BYTES = 4 * 1024 * 1024
METRICS_REPORT_CONTAINERS = 200_000


class Nimbus:
    def __init__(self, zk_hosts: str, port: int = 6627, data_dir: str | Path = "nimbus-data",
                 host: str = "127.0.0.1", zk_root: str = DEFAULT_ROOT,
                 nimbus_id: str | None = None, security: Security | None = None,
                 bind: str | None = None,
                 zk_session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                 environments: EnvironmentSettings | None = None):
        """``host`` is the address peers reach this nimbus at; it listens on ``bind`` (default:
        ``host``), which without a cluster secret (``security``) must be loopback.
        ``zk_session_timeout``: see ``zk_state.DEFAULT_SESSION_TIMEOUT``. ``environments``:
        where and how this node builds the environments of topologies that declare
        dependencies (environments.py): nimbus inspects a submission in the one it declares."""
        self.zk_session_timeout = zk_session_timeout
        self.security = security or Security()
        self.bind = bind or host
        check_bind_address(self.bind, self.security, "nimbus")
        self.zk_hosts = zk_hosts
        self.zk_root = zk_root
        self.port = port
        self.host = host
        self.address = f"tcp://{host}:{port}"
        self.data_dir = Path(data_dir)
        self.code_dir = self.data_dir / "code"
        self.code_dir.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobService(BlobStore(self.data_dir / "blobs"), lambda: self.state,
                                 self._require_leader, self.security, self.address)
        self.nimbus_id = nimbus_id or f"{host}-{port}-{uuid.uuid4().hex[:6]}"
        self.stopping = threading.Event()
        self.is_leader = threading.Event()
        self.session_lost = threading.Event()
        self._lock = threading.Lock()   # leader state changes happen one at a time
        self._good_assignments: dict[str, dict] = {}   # the last well-formed ones seen
        # What the monitor finds wrong every second: logged when found, then once a minute.
        self._repeats = Repeats(log)
        self._live_since: dict[str, float] = {}   # supervisor -> since when this nimbus saw it
        self.metrics_store = MetricsStore()
        # Log levels and tuple sampling while a topology runs (runtime_settings.py).
        self.runtime_settings = RuntimeSettings(lambda: self.state, self._require_leader,
                                                self._lock, self._find_any, self.record_event,
                                                self.metrics)
        self.environments = Environments(environments)
        self._environments_cleaned = time.monotonic()
        # The topologies whose workers nimbus admits (with security on). Kept current by the
        # leader's monitor, a standby's replication pass and submit; read at each handshake on
        # the ZAP thread, which must never wait on ZooKeeper.
        self._topology_ids: frozenset[str] = frozenset()
        self._threads: list[threading.Thread] = []

    # ----- lifecycle

    def start(self) -> None:
        self.client = connect(self.zk_hosts, session_timeout=self.zk_session_timeout,
                              security=self.security)
        try:
            # Refuses a root this cluster did not make (a ForeignNodeError, the command's error).
            self.state = ClusterState(self.client, self.zk_root, self.security)
            self._topology_ids = frozenset(self.state.topologies())
            if self.security.enabled:
                self.state.ensure_offsets_root()
                secured = self.state.secure_topology_nodes()
                if secured:
                    log.info("made %d topology records and assignments readable by their own "
                             "topology's workers only", secured)
        except BaseException:
            self.client.stop()
            self.client.close()
            raise
        self._announce()
        self.client.add_listener(self._on_connection)
        server = rpc.RpcServer(f"tcp://{self.bind}:{self.port}", self._operations(),
                               self.stopping, self.security,
                               topology_ids=lambda: self._topology_ids)
        for target, name in ((server.serve, "rpc"), (self._campaign, "election"),
                             (self._replicate_code, "code-replica")):
            thread = threading.Thread(target=target, name=f"nimbus-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("%s", self._serving_line(server.endpoint))

    def _serving_line(self, endpoint: str) -> str:
        """Where this nimbus listens (``endpoint``, as bound) and, when that is another
        address, where peers reach it (``--host``): the two differ behind ``--bind 0.0.0.0``."""
        line = f"nimbus {self.nimbus_id} serving on {endpoint}"
        if endpoint != self.address:
            line += f"; peers reach it at {self.address}"
        return line

    def _announce(self) -> None:
        self.state.announce_nimbus(self.nimbus_id, {"host": self.host, "port": self.port,
                                                    "started": time.time()})

    def _on_connection(self, state: str) -> None:
        if state == KazooState.LOST:
            # The session expired: our election node and ephemeral records are gone, and a
            # standby may lead already. Stop leading at once; the election loop campaigns again.
            self.session_lost.set()
            self.is_leader.clear()
        elif state == KazooState.CONNECTED and self.session_lost.is_set():
            # Not on kazoo's event thread, which must not block.
            threading.Thread(target=self._announce_again, daemon=True).start()

    def _announce_again(self) -> None:
        try:
            self._announce()
        except Exception as exc:
            log.warning("could not re-announce nimbus %s: %s", self.nimbus_id, exc)

    def stop(self) -> None:
        self.stopping.set()
        try:
            self._election.cancel()
        except Exception:
            pass
        for thread in self._threads:
            thread.join(timeout=5)
        self.client.stop()
        self.client.close()

    # ----- leadership

    def _campaign(self) -> None:
        self._election = self.state.election(self.nimbus_id)
        while not self.stopping.is_set():
            try:
                self._election.run(self._lead)
            except CONNECTION_ERRORS as exc:
                if not self.stopping.is_set():
                    # Expected on a real network: one line, no traceback.
                    self._repeats.warning("election", "nimbus %s lost ZooKeeper during the "
                                          "election (%s); it campaigns again when ZooKeeper is "
                                          "back", self.nimbus_id, describe(exc))
                    time.sleep(1)
            except Exception:
                if not self.stopping.is_set():
                    log.exception("nimbus election failed; retrying")
                    time.sleep(1)

    def _zookeeper_lost(self, exc: Exception) -> None:
        # Expected on a real network (the link dropped during a pass): one line, no traceback.
        self._repeats.warning("zookeeper", "nimbus %s lost ZooKeeper during its monitor pass "
                              "(%s): it changes no assignment until ZooKeeper is back",
                              self.nimbus_id, describe(exc))

    def _zookeeper_back(self) -> None:
        if self._repeats.clear("zookeeper"):
            log.info("nimbus %s reaches ZooKeeper again", self.nimbus_id)

    def _lead(self) -> None:
        self.session_lost.clear()
        log.info("nimbus %s is the leader", self.nimbus_id)
        self.state.set_leader({"host": self.host, "port": self.port, "id": self.nimbus_id,
                               "since": time.time()})
        self._fetch_missing_code()
        self.is_leader.set()
        try:
            while not self.stopping.wait(MONITOR_SECS):
                if self.session_lost.is_set():
                    log.warning("nimbus %s lost its ZooKeeper session; stepping down",
                                self.nimbus_id)
                    return
                if self.client.state != KazooState.CONNECTED:
                    continue  # ZooKeeper is unreachable: change nothing until it is back
                try:
                    with self._lock:
                        self._monitor()
                except CONNECTION_ERRORS as exc:
                    self._zookeeper_lost(exc)
                except Exception:
                    log.exception("nimbus monitor pass failed")
                else:
                    self._zookeeper_back()
        finally:
            self.is_leader.clear()

    # ----- requests

    def _operations(self) -> dict[str, rpc.Operation]:
        """What nimbus answers, who may ask (see rpc's roles) and how large a request may be."""
        Op, admin, worker, read = rpc.Operation, rpc.ADMIN, rpc.WORKER, rpc.READ
        return {
            "submit": Op(self.submit, admin, max_bytes=SUBMIT_CONF_BYTES,
                         max_payload_bytes=MAX_PACKAGE_BYTES, slow=True),
            "kill": Op(self.kill, admin), "activate": Op(self.activate, admin),
            "deactivate": Op(self.deactivate, admin), "rebalance": Op(self.rebalance, admin),
            "get_code": Op(self.get_code, worker),
            "report_metrics": Op(self.report_metrics, worker, max_bytes=METRICS_REPORT_BYTES,
                                 max_containers=METRICS_REPORT_CONTAINERS),
            "list": Op(self.list_topologies, read), "cluster": Op(self.cluster_info, read),
            # An error's text may quote a credential: only an admin gets it as it is.
            "errors": Op(self.errors, read, shown_to_others=redact_errors),
            "metrics": Op(self.metrics, read),
            "topology_info": Op(self.topology_info, read,
                                shown_to_others=lambda info: {
                                    **info, "errors": redact_errors(info["errors"])}),
            "topology_conf": Op(self.topology_conf, admin),
            # What `stormlet submit` shows while this node builds a topology's environment.
            "environment_builds": Op(self.environments.building, read),
            # The blob store (blob_service.py): the admin writes, supervisors and standbys copy.
            "blob_upload_begin": Op(self.blobs.upload_begin, admin),
            "blob_upload_chunk": Op(self.blobs.upload_chunk, admin,
                                    max_payload_bytes=CHUNK_BYTES),
            "blob_upload_commit": Op(self.blobs.upload_commit, admin),
            "blob_upload_abandon": Op(self.blobs.upload_abandon, admin),
            "blob_delete": Op(self.blobs.delete, admin),
            "blob_list": Op(self.blobs.list, read),
            "get_blob_chunk": Op(self.blobs.get_chunk, rpc.DAEMON),
            **self.runtime_settings.operations(),
        }

    def record_event(self, topology_id: str, kind: str, text: str, **detail: Any) -> None:
        pass  # events.py fills this in

    def _require_leader(self) -> None:
        if not self.is_leader.is_set():
            leader = self.state.leader()
            where = rpc_address(leader) if leader else "unknown"
            raise rpc.RpcError(f"{rpc.NOT_LEADER}; the leader is at {where}")

    def _find(self, name: str) -> tuple[str, dict]:
        for tid, record in self.state.topologies().items():
            if record.get("name") == name:
                return tid, record
        raise rpc.RpcError(f"no topology named {name!r} is running")

    def _find_any(self, key: str) -> tuple[str, dict]:
        """Like _find, for the read-only ops: ``key`` is a topology's name or its id."""
        for tid, record in self.state.topologies().items():
            if key in (tid, record.get("name")):
                return tid, record
        raise rpc.RpcError(f"no topology named {key!r} is running")

    def submit(self, name: str, payload: bytes = b"", conf: dict | None = None) -> dict:
        """Inspect the code package (the request's payload; off the lock, so other requests go
        on meanwhile), then record the topology with its code's digest and schedule it."""
        self._require_leader()
        check_topology_name(name)
        code = payload
        if not code:
            raise rpc.RpcError("the submission carries no code package")
        if conf is not None and not isinstance(conf, dict):
            raise rpc.RpcError("conf must be a map of settings")
        self._refuse_running_name(name)
        topology_id = new_topology_id(name)
        summary, environment = self._inspect(code, conf)
        with self._lock:
            self._refuse_running_name(name)   # again: another submission may have won
            merged = {**summary["config"], **(conf or {})}
            # The inspection checked it too, but it ran the topology's own code.
            problems = cfg.problems(merged)
            if problems:
                raise rpc.RpcError(cfg.refusal(name, problems))
            self.blobs.check_map(name, merged, code)
            workers = int(merged.get(cfg.TOPOLOGY_WORKERS) or 1)
            ackers = merged.get(cfg.TOPOLOGY_ACKER_EXECUTORS)
            # Fixed at submit: the acker count decides task numbering, which never changes.
            merged[cfg.TOPOLOGY_ACKER_EXECUTORS] = workers if ackers is None else int(ackers)
            record = {"name": name, "id": topology_id, "status": ACTIVE, "conf": merged,
                      "launched": time.time(), "workers": workers, "executors": {},
                      "summary": summary["components"], "structure": summary.get("structure"),
                      "code_sha256": digest(code), "kill_at": None}
            self._claim_offsets(name, summary.get("offset_spouts", []))
            self._store_code(topology_id, code)
            self.state.set_topology(topology_id, record)
            self._topology_ids = self._topology_ids | {topology_id}
            self._schedule(topology_id, record)
        log.info("submitted %s as %s", name, topology_id)
        warnings = summary.get("warnings", [])
        for line in warnings:
            log.warning("topology %s: %s", name, line)
        return {"id": topology_id, "warnings": warnings,
                "environment": None if environment is None else {
                    "key": environment.key, "built": environment.built,
                    "build_seconds": environment.build_seconds}}

    def _claim_offsets(self, name: str, spouts: list) -> None:
        """Make the offsets nodes of the topology's offset spouts that commit under the
        cluster's offsets root its own (``ClusterState.claim_offsets``), or refuse the
        submission naming the node another topology owns or someone else planted."""
        if not self.security.enabled:
            return
        running = {str(r.get("name")) for r in self.state.topologies().values()}
        root = offsets_path(self.state.root)
        for spout in spouts:
            if not isinstance(spout, dict) or not isinstance(spout.get("spout_id"), str):
                continue
            if spout.get("zk_root") not in (None, root):
                continue   # commits elsewhere: its workers make (and check) those nodes
            try:
                self.state.claim_offsets(spout["spout_id"], name, running)
            except ForeignNodeError as exc:
                raise rpc.RpcError(f"spout {spout.get('component')!r}: {exc}") from None

    def _refuse_running_name(self, name: str) -> None:
        if any(r.get("name") == name for r in self.state.topologies().values()):
            raise rpc.RpcError(f"a topology named {name!r} is already running")

    def _inspect(self, code: bytes, conf: dict | None) -> tuple[dict, Environment | None]:
        """The topology's summary, from loading it in the environment it declares (built on
        this node now, or found built), as its workers will run; and that environment."""
        staging = Path(tempfile.mkdtemp(prefix="inspect-", dir=self.data_dir))
        try:
            entry = unpack(code, staging)
            environment = self._environment(staging)
            python = None if environment is None else environment.python
            return inspect_package(entry, overrides=conf, python=python), environment
        except CodeError as exc:
            raise rpc.RpcError(str(exc)) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _environment(self, directory: Path) -> Environment | None:
        """The environment the package unpacked in ``directory`` declares, or None; a build
        that fails refuses the submission with pip's own last lines."""
        try:
            spec = package_spec(directory)
            return None if spec is None else self.environments.ensure(spec)
        except BuildError as exc:
            raise rpc.RpcError(f"the topology's Python dependencies could not be installed "
                               f"(on nimbus's node, to inspect it): {exc}") from None

    def _store_code(self, topology_id: str, code: bytes) -> None:
        path = self._code_path(topology_id)   # checks the id before any file is written
        partial = path.with_name(f".{path.name}.part")
        partial.write_bytes(code)
        os.replace(partial, path)

    def _code_path(self, topology_id: str) -> Path:
        return self.code_dir / f"{check_topology_id(topology_id)}.zip"

    def get_code(self, topology_id: str) -> bytes:
        path = self._code_path(topology_id)
        if not path.is_file():
            raise rpc.RpcError(f"no code for topology {topology_id!r} on this nimbus")
        return path.read_bytes()

    def list_topologies(self) -> list[dict]:
        """Answered by standbys too: it only reads ZooKeeper. ``errors`` counts what the
        topology's workers counted (see cluster/errors.py); ``last_error`` is a time or None."""
        assignments = self.state.assignments()
        reports = self.state.heartbeats()
        return [_row(tid, record, assigned_executors(assignments.get(tid)), reports)
                for tid, record in self.state.topologies().items()]

    def errors(self, name: str, limit: int = 20) -> list[dict]:
        """A topology's newest errors, newest first, as its supervisors last reported them:
        component, task, time, error, detail, host, port. Answered by standbys too."""
        if not isinstance(limit, int) or limit < 1:
            raise rpc.RpcError(f"limit must be a positive number, got {limit!r}")
        tid, _record = self._find(name)
        return topology_errors(self.state.heartbeats(), tid, min(limit, MAX_ERRORS))

    def cluster_info(self) -> dict:
        """Nimbuses and supervisors; each supervisor's record (host, slots as ports, started)
        gains "used_slots": how many of its slots the assignments use."""
        used: dict[str, set[int]] = {}
        for assignment in self.state.assignments().values():
            for executor in assigned_executors(assignment):
                used.setdefault(executor.supervisor, set()).add(executor.port)
        supervisors = {}
        for sid, info in self.state.supervisors().items():
            in_use = used.get(sid, set()) & set(info.get("slots", []))
            supervisors[sid] = {**info, "used_slots": len(in_use)}
        return {"leader": self.state.leader(), "nimbuses": self.state.nimbuses(),
                "supervisors": supervisors}

    # ----- metrics

    def report_metrics(self, topology_id: str, host: str, port: int, snapshot: dict) -> None:
        """A worker's newest metrics (its ``TopologyRuntime.metrics_snapshot()``). Only the
        leader keeps them: a standby refuses, so the worker looks the leader up again."""
        self._require_leader()
        assigned = {(e.host, e.port) for e in
                    assigned_executors(self.state.checked_assignment(check_topology_id(topology_id)))}
        if (host, port) not in assigned:
            raise rpc.RpcError(f"no worker of {topology_id} is assigned to {host}:{port}")
        try:
            self.metrics_store.put(topology_id, host, port, snapshot)
        except ValueError as exc:
            log.warning("rejected a metrics report from %s:%s: %s", host, port, exc)
            raise rpc.RpcError(f"malformed metrics report: {exc}") from None

    def metrics(self, name: str) -> list[dict]:
        """The newest snapshot of each of the topology's assigned workers that reported within
        the last STALE_REPORTS intervals, in (host, port) order, each task row counting what
        replaced and silent workers of its task counted, then a ``"retired"`` snapshot of the
        tasks no such worker reports (see ``metrics_store``). Only the leader has them: a
        standby refuses rather than answer with none, and a new leader starts empty. ``name``
        may be the topology's id."""
        self._require_leader()
        tid, record = self._find_any(name)
        executors = assigned_executors(self.state.checked_assignment(tid))
        interval = float(cfg.merged(record.get("conf"))[cfg.TOPOLOGY_METRICS_REPORT_SECS])
        return self.metrics_store.snapshots(tid, {(e.host, e.port) for e in executors},
                                            max_age=STALE_REPORTS * interval)

    def topology_info(self, name: str) -> dict:
        """What a topology page shows apart from the numbers: its ``list`` row (status, uptime,
        workers, executors, last_error; its error count as "error_count"), conf (credentials
        redacted: the read role may call this; see ``topology_conf``), structure, placement
        (each executor as [component, tasks, supervisor, host, port]), each worker slot's
        process as its supervisor last reported it (pid, uptime, restarts), and recent errors
        as "errors". ``name`` may be the topology's id."""
        tid, record = self._find_any(name)
        # A corrupt assignment (logged) shows as none: the leader soon puts a good one back.
        executors = assigned_executors(self.state.checked_assignment(tid))
        reports = self.state.heartbeats()
        row = _row(tid, record, executors, reports)
        return {**row, "error_count": row["errors"],
                "conf": redact_config(record.get("conf", {})),
                "structure": record.get("structure"), "assignment": executors,
                "worker_slots": worker_slots(reports, tid, executors),
                "errors": topology_errors(reports, tid, INFO_ERRORS)}

    def topology_conf(self, name: str) -> dict:
        """A topology's config with its credentials, as its workers run with it: the admin's
        (the UI shows it to a holder of its token). ``name`` may be the topology's id."""
        return self._find_any(name)[1].get("conf", {})

    def _set_status(self, name: str, status: str, **extra: Any) -> dict:
        self._require_leader()
        with self._lock:
            tid, record = self._find(name)
            if record.get("status") == KILLED:
                raise rpc.RpcError(f"topology {name!r} is being killed")
            record.update(status=status, **extra)
            self.state.set_topology(tid, record)
        return {"id": tid, "status": status}

    def activate(self, name: str) -> dict:
        return self._set_status(name, ACTIVE)

    def deactivate(self, name: str) -> dict:
        return self._set_status(name, INACTIVE)

    def kill(self, name: str, wait: float | None = None) -> dict:
        """Deactivate now; remove after ``wait`` seconds (default: the message timeout), as
        Storm does, so in-flight tuples can finish."""
        self._require_leader()
        _tid, record = self._find(name)
        if wait is None:
            wait = float(record.get("conf", {}).get(cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS, 30))
        return self._set_status(name, KILLED, kill_at=time.time() + max(0.0, float(wait)))

    def rebalance(self, name: str, workers: int | None = None,
                  executors: dict[str, int] | None = None) -> dict:
        self._require_leader()
        with self._lock:
            tid, record = self._find(name)
            for component, count in (executors or {}).items():
                if component not in record["summary"]:
                    raise rpc.RpcError(f"topology {name!r} has no component {component!r}")
                if not isinstance(count, int) or count < 1:
                    raise rpc.RpcError(f"executors for {component!r} must be >= 1, got {count!r}")
            if workers is not None:
                if not isinstance(workers, int) or workers < 1:
                    raise rpc.RpcError(f"workers must be >= 1, got {workers!r}")
                record["workers"] = workers
            record["executors"] = {**record.get("executors", {}), **(executors or {})}
            self.state.set_topology(tid, record)
            self._schedule(tid, record)
        return {"id": tid, "workers": record["workers"]}

    # ----- scheduling

    def _free_slots(self, exclude_topology: str | None = None) -> list[Slot]:
        used = set()
        for tid, assignment in self.state.assignments().items():
            if tid != exclude_topology:
                used |= {e.slot for e in assigned_executors(assignment)}
        free = []
        for sid, info in self.state.supervisors().items():
            for port in info.get("slots", []):
                slot = Slot(sid, info.get("host", "127.0.0.1"), int(port))
                if slot not in used:
                    free.append(slot)
        return free

    def _schedule(self, topology_id: str, record: dict) -> None:
        n_ackers = int(record["conf"].get(cfg.TOPOLOGY_ACKER_EXECUTORS) or 0)
        plan = plan_from_summary({"components": record["summary"]}, n_ackers, record.get("executors"))
        slots = pick_slots(self._free_slots(exclude_topology=topology_id), record["workers"])
        try:
            executors = even_schedule(plan, slots)
        except SchedulingError as exc:
            self._repeats.warning(("unscheduled", topology_id), "cannot schedule %s yet: %s; it "
                                  "waits for a supervisor with free slots", topology_id, exc)
            return
        self._repeats.clear(("unscheduled", topology_id))
        self.state.set_assignment(
            topology_id, next_assignment(self.state.assignment(topology_id), executors))
        log.info("assigned %s to %d workers", topology_id, len(slots))

    def _monitor(self) -> None:
        live = set(self.state.supervisors())
        now = time.monotonic()
        self._live_since = {sid: self._live_since.get(sid, now) for sid in live}
        settled = {sid for sid, since in self._live_since.items() if now - since >= SETTLE_SECS}
        assignments, corrupt = self.state.checked_assignments()
        for tid in corrupt & set(self._good_assignments):
            # Put the last good version back rather than reschedule: no worker needs to move.
            log.warning("rewriting the corrupt assignment of %s with its last good version", tid)
            previous = self._good_assignments[tid]
            assignments[tid] = {**previous, "version": previous.get("version", 0) + 1}
            self.state.set_assignment(tid, assignments[tid])
        self._good_assignments = assignments
        topologies = self.state.topologies()
        self._topology_ids = frozenset(topologies)
        self.metrics_store.retain(set(topologies))
        # Per-topology conditions are (what, topology id); the others, plain strings.
        self._repeats.retain(lambda key: isinstance(key, str) or key[1] in topologies)
        for tid, record in topologies.items():
            if record.get("status") == KILLED and time.time() >= float(record.get("kill_at") or 0):
                self.state.remove_topology(tid)
                if is_topology_id(tid):
                    self._code_path(tid).unlink(missing_ok=True)
                log.info("removed killed topology %s", tid)
                continue
            self.runtime_settings.expire(tid, record)
            assignment = assignments.get(tid)
            if assignment is None:
                self._schedule(tid, record)
                continue
            try:
                repaired = repair(assigned_executors(assignment), live, self._free_slots())
            except SchedulingError as exc:
                self._repeats.warning(("unrepaired", tid), "topology %s has workers on dead "
                                      "supervisors and nowhere to move them: %s; their executors "
                                      "run nowhere until a supervisor with free slots joins",
                                      tid, exc)
                continue
            self._repeats.clear(("unrepaired", tid))
            if repaired is not None:
                log.info("reassigning %s: it had workers on dead supervisors; their executors "
                         "move, the others stay", tid)
                self.state.set_assignment(tid, next_assignment(assignment, repaired))
                continue
            executors = assigned_executors(assignment)
            spread = spread_back(executors, int(record.get("workers") or 1),
                                 [s for s in self._free_slots() if s.supervisor in settled])
            if spread is not None:
                log.info("spreading %s back over %d workers (it asked for %s) now that slots "
                         "are free", tid, len({e.slot for e in spread}), record.get("workers"))
                self.state.set_assignment(tid, next_assignment(assignment, spread))

    # ----- standby: keep a copy of every topology's code and every blob

    def _replicate_code(self) -> None:
        while not self.stopping.wait(2.0):
            if not self.is_leader.is_set():
                self._fetch_missing_code()
                self._remove_unused_code()
            self._remove_unused_environments()
            self._replicate_blobs()

    def _remove_unused_environments(self) -> None:
        """Every CLEAN_SECS, the environments no daemon on this node used for their TTL."""
        if time.monotonic() - self._environments_cleaned < CLEAN_SECS:
            return
        self._environments_cleaned = time.monotonic()
        try:
            self.environments.remove_unused()
        except OSError as exc:
            log.warning("could not remove unused environments: %s", exc)

    def _replicate_blobs(self) -> None:
        """Every nimbus keeps every blob some key holds (a standby, to take over; a leader
        that lacks one, as after a takeover, to serve it) and drops the others."""
        if self.client.state != KazooState.CONNECTED:
            return
        try:
            peers = [a for a in self.state.nimbus_addresses() if a != self.address]
            self.blobs.replicate(peers)
        except CONNECTION_ERRORS as exc:
            log.debug("blob replication pass failed: %s", describe(exc))
        except Exception:
            log.exception("blob replication pass failed")

    def _remove_unused_code(self) -> None:
        if self.client.state != KazooState.CONNECTED:
            return
        try:
            known = set(self.state.topologies())
            self._topology_ids = frozenset(known)
        except Exception:
            return
        for path in self.code_dir.glob("*.zip"):
            if path.stem not in known:
                path.unlink(missing_ok=True)

    def _fetch_missing_code(self) -> None:
        """Copy the code of every topology this nimbus lacks from another live nimbus (standbys
        keep copies so that one can take over; a new leader fills any gap the same way)."""
        try:
            missing = {tid: record.get("code_sha256")   # tid -> the digest its code must have
                       for tid, record in self.state.topologies().items()
                       if is_topology_id(tid) and not self._code_path(tid).is_file()}
            if not missing:
                return
            peers = [a for a in self.state.nimbus_addresses() if a != self.address]
        except Exception as exc:
            log.debug("code replication pass failed: %s", exc)
            return
        for tid, expected in missing.items():
            for address in peers:
                try:
                    self._store_code(tid, fetch_code(address, tid, expected, self.security,
                                                     timeout=10))
                    log.info("copied the code of %s from %s", tid, address)
                    break
                except rpc.RpcError as exc:
                    log.debug("no code for %s at %s: %s", tid, address, exc)
                except CodeError as exc:
                    log.warning("refused the code of %s from %s: %s", tid, address, exc)


def _row(topology_id: str, record: dict, executors: list[Executor],
         reports: dict[str, dict]) -> dict:
    """A topology's row in ``list``: name, id, status, workers (the slots it runs in now),
    workers_asked (as submitted or rebalanced: fewer run while slots are short), executors,
    uptime, and its errors (count) and last_error (see cluster/errors.py)."""
    return {"name": record.get("name"), "id": topology_id, "status": record.get("status"),
            "workers": len({e.slot for e in executors}),
            "workers_asked": record.get("workers"), "executors": len(executors),
            "uptime": time.time() - float(record.get("launched", time.time())),
            **topology_error_summary(reports, topology_id)}


def worker_slots(reports: dict[str, dict], topology_id: str,
                 executors: list[Executor]) -> list[dict]:
    """Each slot the topology is assigned, with the worker process its supervisor last reported
    there: {"supervisor", "host", "port", "pid", "uptime", "restarts"}; the last three are None
    until the supervisor reports a worker of this topology at that port."""
    rows = []
    for slot in sorted({e.slot for e in executors}):
        worker = reports.get(slot.supervisor, {}).get("workers", {}).get(str(slot.port))
        if not isinstance(worker, dict) or worker.get("topology_id") != topology_id:
            worker = {}
        rows.append({"supervisor": slot.supervisor, "host": slot.host, "port": slot.port,
                     "pid": worker.get("pid"),
                     "uptime": worker.get("uptime"), "restarts": worker.get("restarts")})
    return rows
