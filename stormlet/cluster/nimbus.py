"""Nimbus: accepts topologies, schedules them onto supervisors' slots, and keeps them placed.

Several nimbus processes may run; one leads (a kazoo election) and does everything that writes
cluster state. Standbys answer read-only requests (``list``, ``errors``), copy every topology's
code and every blob (blob_service.py) from the leader so that they can take over, and refuse the
rest with the leader's address.
Running topologies do not need nimbus: workers keep going while none is up.

A submit waits while nimbus prepares the topology (builds its environment, inspects it), or,
with ``wait=False`` (``stormlet submit --no-wait``), is answered at once and prepared in the
background: see submissions.py, which also says what a failover does to it.

Workers push their metrics to the leader, which keeps them in memory only (``metrics_store``),
with what the workers it saw replaced had counted, and serves them with ``metrics``: a standby
has none to serve, and one that becomes leader starts empty (it learns each worker from its next
report; what workers replaced before then counted is not known to it).

    nimbus = Nimbus("127.0.0.1:2181", port=6627, data_dir="/var/lib/stormlet/nimbus")
    nimbus.start()    # returns; serves from threads until nimbus.stop()
"""

from __future__ import annotations

import json
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
from ..repeats import Repeats
from . import events, rpc
from .blob_service import BlobService
from .blob_store import CHUNK_BYTES, BlobStore
from .chart_service import ChartService
from .code import MAX_PACKAGE_BYTES, CodeError, digest, inspect_package, unpack, verify
from .environments import (
    CLEAN_SECS,
    BuildError,
    Environment,
    Environments,
    EnvironmentSettings,
    package_spec,
)
from .error_reports import topology_error_summary, topology_errors
from .events import EventService, history_answer, redact_history, slots_text
from .introspection_service import IntrospectionService
from .log_service import LogService, shown_to_readers
from .metrics_store import MetricsStore
from .names import check_topology_id, check_topology_name, is_topology_id, new_topology_id
from .nimbus_client import fetch_code
from .runtime_settings import RuntimeSettings
from .scheduler import (
    SchedulingError,
    even_schedule,
    pick_slots,
    plan_from_summary,
    repair,
    spread_back,
)
from .security import Security, check_bind_address
from .submissions import (
    PREPARING,
    Preparation,
    Preparer,
    Submission,
    accepted,
    error_rows,
    list_row,
    redact_rows,
)
from .tenure import next_assignment
from .zk_state import (
    CONNECTION_ERRORS,
    DEFAULT_ROOT,
    DEFAULT_SESSION_TIMEOUT,
    ClusterState,
    Executor,
    ForeignNodeError,
    FoundTopology,
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
        self.logs = LogService(lambda: self.state, self._find_any, self.security)
        # Stack dumps, profiles and restarts of a topology's workers (introspection_service.py).
        self.introspection = IntrospectionService(lambda: self.state, self._find_any,
                                                  self.security, self.record_event)
        self.nimbus_id = nimbus_id or f"{host}-{port}-{uuid.uuid4().hex[:6]}"
        # Each topology's event history (events.py): what nimbus decides, and the read op.
        self.events = EventService(lambda: self.state, f"nimbus:{self.nimbus_id}")
        self.stopping = threading.Event()
        self.is_leader = threading.Event()
        self.session_lost = threading.Event()
        self._lock = threading.Lock()   # leader state changes happen one at a time
        self._good_assignments: dict[str, dict] = {}   # the last well-formed ones seen
        # What the monitor finds wrong every second: logged when found, then once a minute.
        self._repeats = Repeats(log)
        self._live_since: dict[str, float] = {}   # supervisor -> since when this nimbus saw it
        self.metrics_store = MetricsStore()
        # Each topology's metrics over time, from the same reports (the UI's charts).
        self.charts = ChartService(self._require_leader, self._find_any)
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
        # Under _lock: the names of submits that wait while they are prepared (a submission
        # prepared in the background holds its name in ZooKeeper instead: submissions.py).
        self._reserved: set[str] = set()
        self.preparer = Preparer(
            lambda: self.state, self._lock, self.is_leader, self.host, self.port,
            inspect=lambda code, conf, preparation: self._inspect(code, conf, preparation)[0],
            record=self._record, code=self._submitted_code,
            drop_code=lambda tid: self._code_path(tid).unlink(missing_ok=True),
            building=self.environments.building)

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
            # A refused submission's row quotes its refusal.
            "list": Op(self.list_topologies, read, shown_to_others=redact_rows),
            "cluster": Op(self.cluster_info, read),
            # An error's text may quote a credential: only an admin gets it as it is.
            "errors": Op(self.errors, read, shown_to_others=redact_errors),
            "metrics": Op(self.metrics, read),
            # An event's text may quote a credential (a worker's last error): as errors.
            "events": Op(self.event_history, read, shown_to_others=redact_history),
            "metrics_history": Op(self.charts.read, read),
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
            # A topology's worker logs, read through the supervisors (log_service.py): slow,
            # as a node out of reach takes seconds to give up on.
            "logs_list": Op(self.logs.list, read, slow=True),
            "logs_read": Op(self.logs.read, read, slow=True, shown_to_others=shown_to_readers,
                            others_arguments={"redacted": True}),
            # A worker looked into, through its supervisor (introspection_service.py): a
            # profile is started here and taken on a thread of its own, then polled.
            "worker_stacks": Op(self.introspection.stacks, admin, slow=True),
            "worker_profile": Op(self.introspection.profile, admin),
            "worker_profile_result": Op(self.introspection.profile_result, admin),
            "worker_restart": Op(self.introspection.restart, admin, slow=True),
            **self.runtime_settings.operations(),
        }

    def _require_leader(self) -> None:
        if not self.is_leader.is_set():
            leader = self.state.leader()
            where = rpc_address(leader) if leader else "unknown"
            raise rpc.RpcError(f"{rpc.NOT_LEADER}; the leader is at {where}")

    def _find(self, name: str) -> FoundTopology:
        for tid, record in self.state.topologies().items():
            if record.get("name") == name:
                return FoundTopology(tid, record)
        raise self._not_running(name)

    def _find_any(self, key: str) -> FoundTopology:
        """Like _find, for the read-only ops: ``key`` is a topology's name or its id."""
        for tid, record in self.state.topologies().items():
            if key in (tid, record.get("name")):
                return FoundTopology(tid, record)
        raise self._not_running(key)

    def record_event(self, topology_id: str, kind: str, text: str, **detail: Any) -> None:
        """Add an event to the topology's history (events.py): ``kind`` a lowercase word (or
        words joined by ``-``), ``text`` one line for an operator, ``detail`` fields for
        scripts. Never raises: a failure is logged, and the operation it describes goes on."""
        self.events.record(topology_id, kind, text, **detail)

    def event_history(self, topology: str, limit: int = events.DEFAULT_READ,
                      since: int | None = None, kind: str | None = None) -> dict:
        """The ``events`` op (``EventService.history``); a submission being prepared or refused
        (submissions.py) has none yet: its answer says so with no events."""
        try:
            return self.events.history(topology, limit, since, kind)
        except events.NoHistory:
            submission = self._submission(topology)
            if submission is None:
                raise
            return history_answer(submission.id, submission.name, submission.status, None, [])

    def _not_running(self, key: str) -> rpc.RpcError:
        """The refusal of an action on ``key``, which no running topology is: it says so of a
        submission being prepared or refused, which an action cannot touch either."""
        submission = self._submission(key)
        if submission is None:
            return rpc.RpcError(f"no topology named {key!r} is running")
        return rpc.RpcError(f"topology {submission.name!r} is not running: its submission is "
                            f"{submission.status} (see `stormlet list`; `stormlet kill "
                            f"{submission.name}` clears it)")

    def _submission(self, key: str) -> Submission | None:
        """The submission prepared or refused (submissions.py) whose name or id is ``key``."""
        for tid, submission in self.state.submissions().items():
            if key in (tid, submission.name):
                return submission
        return None

    def submit(self, name: str, payload: bytes = b"", conf: dict | None = None,
               wait: bool = True) -> dict:
        """Check at once what can be (the name, the code package, the config's shape), then
        prepare the topology: build the environment it declares and inspect it in it (off the
        lock, so other requests go on meanwhile), record it with its code's digest and schedule
        it. With ``wait`` false, answer {"id", "status": "preparing"} once the checks pass and
        prepare it in the background (submissions.py)."""
        self._require_leader()
        check_topology_name(name)
        code = payload
        if not code:
            raise rpc.RpcError("the submission carries no code package")
        conf = _checked_conf(name, conf)
        if not wait:
            return self._accept(name, code, conf)
        with self._lock:
            self._refuse_taken_name(name)
            self._reserved.add(name)
            self._drop_refusals(name)
        try:
            topology_id = new_topology_id(name)
            summary, environment = self._inspect(code, conf)
            with self._lock:
                warnings = self._record(name, topology_id, code, conf, summary)
        finally:
            with self._lock:
                self._reserved.discard(name)
        return {"id": topology_id, "warnings": warnings,
                "environment": None if environment is None else {
                    "key": environment.key, "built": environment.built,
                    "build_seconds": environment.build_seconds}}

    def _record(self, name: str, topology_id: str, code: bytes, conf: dict,
                summary: dict) -> list[str]:
        """Under the lock: record the inspected topology with its code's digest and schedule
        it, or refuse it (``RpcError``); its warnings."""
        self._refuse_running_name(name)   # again: another submission may have won
        merged = {**summary["config"], **conf}
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
        self.events.open(topology_id, name, merged)   # before anything records in it
        self.state.set_topology(topology_id, record)
        self._topology_ids = self._topology_ids | {topology_id}
        self.record_event(topology_id, events.SUBMITTED,
                          f"submitted {name} asking for {workers} "
                          f"worker{'s' if workers != 1 else ''}",
                          workers=workers, components=len(summary["components"]),
                          code_sha256=record["code_sha256"])
        self._schedule(topology_id, record, "at submit")
        log.info("submitted %s as %s", name, topology_id)
        warnings = summary.get("warnings", [])
        for line in warnings:
            log.warning("topology %s: %s", name, line)
        return warnings

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

    def _refuse_taken_name(self, name: str) -> None:
        """Under the lock: refuse a name that a topology runs under, or that a submission
        holds while it is prepared (one that waits, or one in the background)."""
        self._refuse_running_name(name)
        if name in self._reserved:
            raise rpc.RpcError(f"a topology named {name!r} is being submitted")
        if any(s.name == name and s.status == PREPARING
               for s in self.state.submissions().values()):
            raise rpc.RpcError(f"a topology named {name!r} is being prepared (submitted without "
                               f"waiting: `stormlet list` shows it)")

    def _drop_refusals(self, name: str) -> None:
        """Under the lock: forget the refused submissions of ``name``, submitted again."""
        for tid, submission in self.state.submissions().items():
            if submission.name == name and submission.status != PREPARING:
                self.state.remove_submission(tid)

    # ----- submissions prepared in the background (submissions.py)

    def _accept(self, name: str, code: bytes, conf: dict) -> dict:
        """Take a submission to prepare in the background once its package unpacks and
        declares a usable environment and its name is free: store its code, hold its name in
        ZooKeeper, start preparing it."""
        self._check_package(code)
        topology_id = new_topology_id(name)
        submission = accepted(topology_id, name, conf, digest(code), time.time())
        with self._lock:
            self._refuse_taken_name(name)
            self._drop_refusals(name)
            self._store_code(topology_id, code)
            try:
                self.preparer.accept(submission)
            except BaseException:
                self._code_path(topology_id).unlink(missing_ok=True)
                raise
        log.info("accepted %s as %s; preparing it in the background", name, topology_id)
        return {"id": topology_id, "status": PREPARING}

    def _check_package(self, code: bytes) -> None:
        """Refuse now what preparing the package would refuse before any build: not a
        package, a member outside it, a manifest whose requirements pip must not read."""
        staging = Path(tempfile.mkdtemp(prefix="check-", dir=self.data_dir))
        try:
            unpack(code, staging)
            package_spec(staging)
        except CodeError as exc:
            raise rpc.RpcError(str(exc)) from None
        except BuildError as exc:
            raise rpc.RpcError(f"the topology's Python dependencies cannot be installed: "
                               f"{exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _submitted_code(self, submission: Submission) -> bytes:
        """The submission's code package: this nimbus's copy, else a live peer's (copied now:
        this nimbus took over before its replication pass did); refused when none has it."""
        path = self._code_path(submission.id)
        if not path.is_file():
            self._fetch_code(submission.id, submission.code_sha256,
                             [a for a in self.state.nimbus_addresses() if a != self.address])
        try:
            code = path.read_bytes()
            verify(code, submission.code_sha256, submission.id)
        except FileNotFoundError:
            raise rpc.RpcError("its code package is on no live nimbus: the nimbus that accepted "
                               "it stopped before another copied it; submit it again") from None
        except CodeError as exc:
            raise rpc.RpcError(f"{exc}; submit it again") from None
        return code

    # ----- preparing a topology

    def _inspect(self, code: bytes, conf: dict,
                 progress: Preparation | None = None) -> tuple[dict, Environment | None]:
        """The topology's summary, from loading it in the environment it declares (built on
        this node now, or found built), as its workers will run; and that environment."""
        staging = Path(tempfile.mkdtemp(prefix="inspect-", dir=self.data_dir))
        try:
            entry = unpack(code, staging)
            environment = self._environment(staging, progress)
            python = None if environment is None else environment.python
            return inspect_package(entry, overrides=conf, python=python), environment
        except CodeError as exc:
            raise rpc.RpcError(str(exc)) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _environment(self, directory: Path,
                     progress: Preparation | None = None) -> Environment | None:
        """The environment the package unpacked in ``directory`` declares, or None; a build
        that fails refuses the submission with pip's own last lines."""
        try:
            spec = package_spec(directory)
            if spec is None:
                return None
            if progress is not None:
                progress.environment = spec.key
            return self.environments.ensure(spec)
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
        topology's workers counted (see cluster/error_reports.py); ``last_error`` is a time or None.
        Submissions being prepared or refused follow, as rows of their own
        (``submissions.list_row``)."""
        assignments = self.state.assignments()
        reports = self.state.heartbeats()
        topologies = self.state.topologies()
        rows = [_row(tid, record, assigned_executors(assignments.get(tid)), reports)
                for tid, record in topologies.items()]
        now = time.time()
        # Submissions prepared in the background, or refused (submissions.py).
        return rows + [list_row(submission, now, self.preparer.progress(tid))
                       for tid, submission in self.state.submissions().items()
                       if tid not in topologies]

    def errors(self, name: str, limit: int = 20) -> list[dict]:
        """A topology's newest errors, newest first, as its supervisors last reported them:
        component, task, time, error, detail, host, port; for a submission refused (see
        submissions.py), its refusal. Answered by standbys too."""
        if not isinstance(limit, int) or limit < 1:
            raise rpc.RpcError(f"limit must be a positive number, got {limit!r}")
        try:
            tid, _record = self._find(name)
        except rpc.RpcError:
            submission = self._submission(name)
            if submission is None:
                raise
            return error_rows(submission)   # its refusal, if it was refused
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
        self.charts.feed(topology_id, snapshot)

    def metrics(self, name: str) -> list[dict]:
        """The newest snapshot of each of the topology's assigned workers that reported within
        the last STALE_REPORTS intervals, in (host, port) order, each task row counting what
        replaced and silent workers of its task counted, then a ``"retired"`` snapshot of the
        tasks no such worker reports (see ``metrics_store``). Only the leader has them: a
        standby refuses rather than answer with none, and a new leader starts empty. ``name``
        may be the topology's id."""
        self._require_leader()
        try:
            tid, record = self._find_any(name)
        except rpc.RpcError:
            if self._submission(name) is None:
                raise
            return []   # a submission: no worker yet
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
        as "errors". ``name`` may be the topology's id. A submission being prepared or refused
        has its ``list`` row, its config, none of the rest, and its refusal as its errors."""
        try:
            tid, record = self._find_any(name)
        except rpc.RpcError:
            submission = self._submission(name)
            if submission is None:
                raise
            row = list_row(submission, time.time(), self.preparer.progress(submission.id))
            return {**row, "error_count": row["errors"], "conf": redact_config(submission.conf),
                    "structure": None, "assignment": [], "worker_slots": [],
                    "errors": error_rows(submission)}
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
        (the UI shows it to a holder of its token). ``name`` may be the topology's id; a
        submission's is the submit's overrides."""
        try:
            return self._find_any(name).record.get("conf", {})
        except rpc.RpcError:
            submission = self._submission(name)
            if submission is None:
                raise
            return submission.conf

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
        result = self._set_status(name, ACTIVE)
        self.record_event(result["id"], events.ACTIVATED, "activated: its spouts emit again")
        return result

    def deactivate(self, name: str) -> dict:
        result = self._set_status(name, INACTIVE)
        self.record_event(result["id"], events.DEACTIVATED,
                          "deactivated: its spouts stop emitting; tuples in flight finish")
        return result

    def kill(self, name: str, wait: float | None = None) -> dict:
        """Deactivate now; remove after ``wait`` seconds (default: the message timeout), as
        Storm does, so in-flight tuples can finish. A submission being prepared or refused
        (submissions.py) is removed at once: {"id", "status": "cleared", "was": its status};
        an environment being built for it finishes, and stays cached for whoever needs it."""
        self._require_leader()
        with self._lock:
            submission = self._submission(name)
            if submission is not None and submission.name == name:
                self.state.remove_submission(submission.id)
                self._code_path(submission.id).unlink(missing_ok=True)
                log.info("cleared the submission of %s (%s), %s", name, submission.id,
                         submission.status)
                return {"id": submission.id, "status": "cleared", "was": submission.status}
        _tid, record = self._find(name)
        if wait is None:
            wait = float(record.get("conf", {}).get(cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS, 30))
        wait = max(0.0, float(wait))
        result = self._set_status(name, KILLED, kill_at=time.time() + wait)
        self.record_event(result["id"], events.KILLED,
                          f"killed: deactivated now, removed in {wait:g} s", wait=wait)
        return result

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
                before = record.get("workers")
                record["workers"] = workers
            record["executors"] = {**record.get("executors", {}), **(executors or {})}
            self.state.set_topology(tid, record)
            changes = [] if workers is None else [f"workers {before} -> {workers}"]
            changes += [f"{component} executors -> {count}"
                        for component, count in sorted((executors or {}).items())]
            self.record_event(tid, events.REBALANCED,
                              f"rebalanced: {', '.join(changes) or 'nothing changed'}",
                              workers=record["workers"], executors=executors or {})
            self._schedule(tid, record, "after the rebalance")
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

    def _schedule(self, topology_id: str, record: dict, when: str) -> None:
        """Place the topology's executors over the workers it asks for (as many as are free);
        ``when``: why now, for its event ("at submit", "after the rebalance")."""
        n_ackers = int(record["conf"].get(cfg.TOPOLOGY_ACKER_EXECUTORS) or 0)
        plan = plan_from_summary({"components": record["summary"]}, n_ackers,
                                 record.get("executors"))
        slots = pick_slots(self._free_slots(exclude_topology=topology_id), record["workers"])
        try:
            executors = even_schedule(plan, slots)
        except SchedulingError as exc:
            self._repeats.warning(("unscheduled", topology_id), "cannot schedule %s yet: %s; it "
                                  "waits for a supervisor with free slots", topology_id, exc)
            self.events.condition(("unscheduled", topology_id), topology_id, events.WAITING,
                                  f"cannot be placed yet: {exc}; it waits for a supervisor with "
                                  f"free slots")
            return
        self._repeats.clear(("unscheduled", topology_id))
        self.events.over(("unscheduled", topology_id))
        self.state.set_assignment(
            topology_id, next_assignment(self.state.assignment(topology_id), executors))
        log.info("assigned %s to %d workers", topology_id, len(slots))
        asked = record["workers"]
        short = f" (of {asked} asked for: no more slots are free)" if len(slots) < asked else ""
        workers = f"{len(slots)} worker{'s' if len(slots) != 1 else ''}{short}"
        self.record_event(topology_id, events.ASSIGNED, f"assigned {when} to {workers}: "
                          f"{slots_text((s.host, s.port) for s in slots)}",
                          slots=[list(s) for s in slots], executors=len(executors))

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
            self.record_event(tid, events.REASSIGNED, "reassigned: its assignment in ZooKeeper "
                              "was corrupt, and was rewritten from the last good one (no "
                              "worker moves)", reason=events.CORRUPT_ASSIGNMENT)
        self._good_assignments = assignments
        topologies = self.state.topologies()
        self._topology_ids = frozenset(topologies)
        self.metrics_store.retain(set(topologies))
        self.preparer.tend(topologies)
        self.charts.retain(topologies)
        # Per-topology conditions are (what, topology id); the others, plain strings.
        self._repeats.retain(lambda key: not isinstance(key, tuple) or key[1] in topologies)
        for tid, record in topologies.items():
            if record.get("status") == KILLED and time.time() >= float(record.get("kill_at") or 0):
                self.state.remove_topology(tid)
                if is_topology_id(tid):
                    self._code_path(tid).unlink(missing_ok=True)
                log.info("removed killed topology %s", tid)
                self.events.removed(tid, "removed: its workers stop and its code is deleted")
                continue
            self.runtime_settings.expire(tid, record)
            assignment = assignments.get(tid)
            if assignment is None:
                self._schedule(tid, record, "once slots were free")
                continue
            try:
                repaired = repair(assigned_executors(assignment), live, self._free_slots())
            except SchedulingError as exc:
                self._repeats.warning(("unrepaired", tid), "topology %s has workers on dead "
                                      "supervisors and nowhere to move them: %s; their executors "
                                      "run nowhere until a supervisor with free slots joins",
                                      tid, exc)
                self.events.condition(("unrepaired", tid), tid, events.WAITING,
                                      f"{_lost_text(assigned_executors(assignment), live)}, and "
                                      f"its workers there have nowhere to move ({exc}): their "
                                      f"executors run nowhere until a supervisor with free "
                                      f"slots joins", reason=events.LOST_SUPERVISOR)
                continue
            self._repeats.clear(("unrepaired", tid))
            self.events.over(("unrepaired", tid))
            if repaired is not None:
                log.info("reassigning %s: it had workers on dead supervisors; their executors "
                         "move, the others stay", tid)
                self.state.set_assignment(tid, next_assignment(assignment, repaired))
                self._record_move(tid, events.LOST_SUPERVISOR, assigned_executors(assignment),
                                  repaired, _lost_text(assigned_executors(assignment), live))
                continue
            executors = assigned_executors(assignment)
            spread = spread_back(executors, int(record.get("workers") or 1),
                                 [s for s in self._free_slots() if s.supervisor in settled])
            if spread is not None:
                log.info("spreading %s back over %d workers (it asked for %s) now that slots "
                         "are free", tid, len({e.slot for e in spread}), record.get("workers"))
                self.state.set_assignment(tid, next_assignment(assignment, spread))
                self._record_move(tid, events.SPREAD_BACK, executors, spread,
                                  f"slots are free again for the {record.get('workers')} "
                                  f"workers it asked for")
        self.events.tidy(topologies)

    def _record_move(self, topology_id: str, reason: str, before: list[Executor],
                     after: list[Executor], why: str) -> None:
        """A REASSIGNED event: ``why`` nimbus moved executors, and between which slots."""
        old, new = {e.slot for e in before}, {e.slot for e in after}
        moved = sum(a.slot != b.slot for a, b in zip(before, after))
        gone, added = old - new, new - old
        text = (f"reassigned: {why}; {moved} executor{'s' if moved != 1 else ''} moved"
                + (f" off {slots_text((s.host, s.port) for s in gone)}" if gone else "")
                + (f" to {slots_text((s.host, s.port) for s in added)}" if added
                   else " to the other workers"))
        self.record_event(topology_id, events.REASSIGNED, text, reason=reason, moved=moved,
                          stopped=[list(s) for s in sorted(gone)],
                          started=[list(s) for s in sorted(added)])

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
            topologies = set(self.state.topologies())
            self._topology_ids = frozenset(topologies)
            known = topologies | {tid for tid, s in self.state.submissions().items()
                                  if s.status == PREPARING}
        except Exception:
            return
        for path in self.code_dir.glob("*.zip"):
            if path.stem not in known:
                path.unlink(missing_ok=True)

    def _fetch_missing_code(self) -> None:
        """Copy the code of every topology, and of every submission being prepared, that this
        nimbus lacks from another live nimbus (standbys keep copies so that one can take over; a
        new leader fills any gap the same way)."""
        try:
            missing = {tid: record.get("code_sha256")   # tid -> the digest its code must have
                       for tid, record in self.state.topologies().items()
                       if is_topology_id(tid) and not self._code_path(tid).is_file()}
            missing.update({tid: submission.code_sha256
                            for tid, submission in self.state.submissions().items()
                            if submission.status == PREPARING
                            and not self._code_path(tid).is_file()})
            if not missing:
                return
            peers = [a for a in self.state.nimbus_addresses() if a != self.address]
        except Exception as exc:
            log.debug("code replication pass failed: %s", exc)
            return
        for tid, expected in missing.items():
            self._fetch_code(tid, expected, peers)

    def _fetch_code(self, topology_id: str, expected: str | None, peers: list[str]) -> None:
        """Copy the code of ``topology_id`` (whose digest is ``expected``) from the first of
        ``peers`` that has it; nothing if none does."""
        for address in peers:
            try:
                self._store_code(topology_id, fetch_code(address, topology_id, expected,
                                                         self.security, timeout=10))
                log.info("copied the code of %s from %s", topology_id, address)
                return
            except rpc.RpcError as exc:
                log.debug("no code for %s at %s: %s", topology_id, address, exc)
            except CodeError as exc:
                log.warning("refused the code of %s from %s: %s", topology_id, address, exc)


def _checked_conf(name: str, conf: Any) -> dict:
    """A submit's config overrides, if their shape will do (a map of JSON values giving
    stormlet's settings valid values); else the submit's refusal."""
    if conf is None:
        return {}
    if not isinstance(conf, dict):
        raise rpc.RpcError("conf must be a map of settings")
    problems = cfg.problems(conf)
    if problems:
        raise rpc.RpcError(cfg.refusal(name, problems))
    try:
        json.dumps(conf)
    except (TypeError, ValueError) as exc:
        raise rpc.RpcError(f"the submitted config must hold JSON values only ({exc})") from None
    return conf


def _lost_text(executors: list[Executor], live: set[str]) -> str:
    """Which supervisors (and hosts) of an assignment are gone, for its events."""
    lost = sorted({(e.supervisor, e.host) for e in executors if e.supervisor not in live})
    names = ", ".join(f"{sid} on {host}" for sid, host in lost)
    return f"supervisors {names} are gone" if len(lost) > 1 else f"supervisor {names} is gone"


def _row(topology_id: str, record: dict, executors: list[Executor],
         reports: dict[str, dict]) -> dict:
    """A topology's row in ``list``: name, id, status, workers (the slots it runs in now),
    workers_asked (as submitted or rebalanced: fewer run while slots are short), executors,
    uptime, and its errors (count) and last_error (see cluster/error_reports.py)."""
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
