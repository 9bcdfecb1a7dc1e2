"""Where the UI's data comes from: a LocalCluster in this process, or a cluster's nimbus.

Both answer the same questions in the same shapes, so the REST API and the pages do not know
which one they show:

    cluster_summary() -> {"mode", "nimbuses": [{"host", "port", "leader", "uptime"}],
                          "supervisors": [{"id", "host", "uptime", "slots", "used_slots"}]}
    topologies()      -> [{"id", "name", "status", "uptime", "workers", "executors",
                           "errors" (how many)}], and "tasks" where known
    topology(key)     -> one such row plus "conf", "structure" (metrics/structure.py), "snapshots"
                         (one metrics snapshot per worker, see TopologyRuntime.metrics_snapshot)
                         and "recent_errors": [{"component", "task", "host", "port", "time",
                         "error"}], newest first; on a cluster also "worker_slots" (each
                         slot's worker as its supervisor reports it, with "restarts")
    snapshots(row)    -> just the "snapshots" of the topology of a ``topologies()`` row
    config(key)       -> the topology's config with its credentials, as its workers run with it
                         (``topology``'s "conf" may have them redacted: nimbus redacts them)
    events(key, limit, since, kind)
                      -> the topology's event history, running or killed a while ago:
                         {"id", "name", "status", "removed", "events": [{"seq", "time", "kind",
                         "text", "writer", "detail"}]}, oldest first (cluster/events.py)
    history(key, resolution) -> its metrics over time per component ("fine": the last hour;
                         "coarse": its whole life), as ``MetricsHistory.series`` answers, with
                         its "id" and "name" (kept by nimbus; in local mode, by ``LocalHistory``)
    logs(key)         -> the files of its workers: nimbus's ``logs_list`` answer
                         (cluster/log_service.py) plus "notice": why there are none to read
                         (local mode), or None
    log_read(key, supervisor, file, **read)
                      -> one read of one of them: nimbus's ``logs_read`` (``read``: offset,
                         length, from_end, inode, grep, component, task)
    activate(key), deactivate(key), rebalance(key, wait, workers, executors), kill(key, wait)
    worker_stacks(key, worker, asked_by), worker_profile(key, worker, seconds, idle, asked_by),
    profile_result(profile, svg), worker_restart(key, worker, reason, asked_by)
                      -> one worker ("HOST:PORT") looked into or restarted, on a cluster only
                         (cluster/introspection_service.py says what each answers)
    live_settings(key) -> {"log_levels", "sampling"} in force (runtime/live_settings.py)
    set_log_levels(key, levels), debug(key, component, percent, seconds) -> the same, changed
    samples(key, component, limit) -> the newest sampled tuples, oldest first

``key`` is a topology's id or its name. Failures are the exceptions below, each of which the API
turns into one status code. Neither redacts what it returns for whoever reads the API: the API
does (api.py, and log_viewer.py for log lines, by redaction.py's rules).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .. import config as cfg
from ..local import LocalCluster, UnknownTopologyError
from ..metrics.history import MetricsHistory
from .local_history import LocalHistory

if TYPE_CHECKING:
    from ..cluster.nimbus_client import NimbusClient

ACTIVE, INACTIVE, KILLED = "active", "inactive", "killed"


class UnknownTopology(LookupError):
    """No running topology has that id or name (HTTP 404)."""


class SourceUnavailable(RuntimeError):
    """Nimbus (or ZooKeeper, to find it) did not answer (HTTP 503)."""


class ActionRefused(RuntimeError):
    """The action cannot be done: not supported here, or refused by nimbus (HTTP 409)."""


class UiSource(Protocol):
    mode: str

    def cluster_summary(self) -> dict[str, Any]: ...
    def topologies(self) -> list[dict[str, Any]]: ...
    def topology(self, key: str) -> dict[str, Any]: ...
    def snapshots(self, row: dict[str, Any]) -> list[dict[str, Any]]: ...
    def config(self, key: str) -> dict[str, Any]: ...
    def events(self, key: str, limit: int, since: int | None,
               kind: str | None) -> dict[str, Any]: ...
    def history(self, key: str, resolution: str) -> dict[str, Any]: ...
    def logs(self, key: str) -> dict[str, Any]: ...
    def log_read(self, key: str, supervisor: str, file: str, **read: Any) -> dict[str, Any]: ...
    def activate(self, key: str) -> None: ...
    def deactivate(self, key: str) -> None: ...
    def rebalance(self, key: str, wait: float, workers: int | None,
                  executors: dict[str, int]) -> None: ...
    def kill(self, key: str, wait: float) -> None: ...
    def worker_stacks(self, key: str, worker: str, asked_by: str) -> dict[str, Any]: ...
    def worker_profile(self, key: str, worker: str, seconds: int, idle: bool,
                       asked_by: str) -> dict[str, Any]: ...
    def profile_result(self, profile: str, svg: bool) -> dict[str, Any]: ...
    def worker_restart(self, key: str, worker: str, reason: str | None,
                       asked_by: str) -> dict[str, Any]: ...
    def live_settings(self, key: str) -> dict[str, Any]: ...
    def set_log_levels(self, key: str, levels: dict[str, Any]) -> dict[str, Any]: ...
    def debug(self, key: str, component: str | None, percent: float | None,
              seconds: float | None) -> dict[str, Any]: ...
    def samples(self, key: str, component: str, limit: int) -> list[dict[str, Any]]: ...


class _Kill(NamedTuple):
    """A kill from the UI: the killed topology's id (which tells a topology resubmitted under
    the same name, not killed, from the one killed) and the FinalReport of its kill."""

    topology_id: str
    report: Future


class _Found(NamedTuple):
    """A running local topology: its name and its runtime."""

    name: str
    runtime: Any


class LocalSource:
    """The topologies of a LocalCluster in this process: one worker each, no nimbus."""

    mode = "local"

    def __init__(self, cluster: LocalCluster, history: MetricsHistory | None = None):
        """``history``: where the charts' series are kept (default: nimbus's resolutions)."""
        self.cluster = cluster
        self.charts = LocalHistory(cluster, history)
        weakref.finalize(self, self.charts.close)   # its sampler thread ends with this source
        self.started = time.time()
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self._kills: dict[str, _Kill] = {}   # by topology name

    def cluster_summary(self) -> dict[str, Any]:
        return {"mode": self.mode, "nimbuses": [], "supervisors": [],
                "process": {"host": self.host, "pid": os.getpid(),
                            "uptime": time.time() - self.started}}

    def topologies(self) -> list[dict[str, Any]]:
        rows = []
        for name in self.cluster.topologies():
            try:
                rows.append(self._row(name, self.cluster.runtime(name)))
            except UnknownTopologyError:
                continue   # killed since we listed it
        return rows

    def _being_killed(self, name: str, runtime: Any) -> bool:
        kill = self._kills.get(name)
        return kill is not None and kill.topology_id == runtime.conf[cfg.STORMLET_TOPOLOGY_ID]

    def _row(self, name: str, runtime: Any) -> dict[str, Any]:
        if self._being_killed(name, runtime):
            status = KILLED
        elif runtime.is_active():
            status = ACTIVE
        else:
            status = INACTIVE
        started = runtime.started_at or time.time()
        return {"id": runtime.conf[cfg.STORMLET_TOPOLOGY_ID], "name": name, "status": status,
                "uptime": time.time() - started, "workers": 1,
                "executors": len(runtime.all_executors()), "tasks": len(runtime.metrics),
                "errors": sum(m.errors.count for m in runtime.metrics)}

    def _find(self, key: str) -> _Found:
        for name in self.cluster.topologies():
            try:
                runtime = self.cluster.runtime(name)
            except UnknownTopologyError:
                continue
            if key in (name, runtime.conf[cfg.STORMLET_TOPOLOGY_ID]):
                return _Found(name, runtime)
        raise UnknownTopology(f"no topology with id or name {key!r} is running")

    def topology(self, key: str) -> dict[str, Any]:
        name, runtime = self._find(key)
        errors = [{"component": e.component, "task": e.task, "host": None, "port": None,
                   "time": e.time, "error": e.error} for e in reversed(runtime.errors())]
        return {**self._row(name, runtime), "conf": runtime.conf, "structure": runtime.structure,
                "snapshots": [runtime.metrics_snapshot()], "recent_errors": errors}

    def snapshots(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        _name, runtime = self._find(row["id"])
        return [runtime.metrics_snapshot()]

    def config(self, key: str) -> dict[str, Any]:
        return self._find(key).runtime.conf

    def history(self, key: str, resolution: str) -> dict[str, Any]:
        name, runtime = self._find(key)
        tid = runtime.conf[cfg.STORMLET_TOPOLOGY_ID]
        return {"id": tid, "name": name, **self.charts.series(tid, resolution)}

    def events(self, key: str, limit: int, since: int | None,
               kind: str | None) -> dict[str, Any]:
        try:
            return self.cluster.events(key, limit, since, kind)
        except UnknownTopologyError as exc:
            raise UnknownTopology(str(exc)) from None

    def logs(self, key: str) -> dict[str, Any]:
        # A local topology's components log through this process's logging, wherever it goes:
        # there are no worker files to list (ui/log_viewer.py).
        return {"topology_id": self._find(key).runtime.conf[cfg.STORMLET_TOPOLOGY_ID], "files": [],
                "unanswered": [], "notice": self._no_logs()}

    def log_read(self, key: str, supervisor: str, file: str, **read: Any) -> dict[str, Any]:
        self._find(key)
        raise ActionRefused(self._no_logs())

    def _no_logs(self) -> str:
        return (f"local mode: the topology runs inside this process (pid {os.getpid()} on "
                f"{self.host}) and its components log where the process does (its stderr), "
                f"not to worker log files; the log pages read those of a cluster's workers "
                f"(stormlet ui for a cluster)")

    # Through the cluster, which records them in the topology's events.
    def activate(self, key: str) -> None:
        self.cluster.activate(self._live(key))

    def deactivate(self, key: str) -> None:
        self.cluster.deactivate(self._live(key))

    def _live(self, key: str) -> str:
        """The name of the topology ``key``, which must not be being killed."""
        name, runtime = self._find(key)
        if self._being_killed(name, runtime):
            raise ActionRefused(f"topology {name!r} is being killed")
        return name

    def rebalance(self, key: str, wait: float, workers: int | None,
                  executors: dict[str, int]) -> None:
        self._find(key)
        raise ActionRefused("rebalance is not supported in local mode: a local topology runs "
                            "in one process with the executors it was submitted with")

    def kill(self, key: str, wait: float) -> None:
        """Returns at once, as on a cluster: the topology is deactivated now and removed after
        ``wait`` seconds (sooner once nothing is in flight)."""
        name, runtime = self._find(key)
        with self._lock:
            if self._being_killed(name, runtime):
                raise ActionRefused(f"topology {name!r} is being killed")
            future: Future = Future()
            self._kills[name] = _Kill(runtime.conf[cfg.STORMLET_TOPOLOGY_ID], future)
        runtime.deactivate()
        threading.Thread(target=self._kill, args=(name, wait, future), name=f"ui-kill-{name}",
                         daemon=True).start()

    def _kill(self, name: str, wait: float, future: Future) -> None:
        try:
            future.set_result(self.cluster.kill(name, wait_secs=wait))
        except BaseException as exc:   # handed to whoever waits on the kill
            future.set_exception(exc)

    def _for_a_cluster(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        pid = os.getpid()
        raise ActionRefused(f"worker stacks, profiles and restarts are for a cluster's workers: "
                            f"a local topology runs in this process (pid {pid}); py-spy dump "
                            f"--pid {pid} shows its threads")

    worker_stacks = worker_profile = profile_result = worker_restart = _for_a_cluster

    def killed(self, name: str) -> Future | None:
        """The FinalReport of ``name``'s latest kill from the UI, or None if the UI did not
        kill it. Kept after the kill is done, for whoever waits on it (``stormlet local``)."""
        kill = self._kills.get(name)
        return kill.report if kill else None

    # ----- run-time settings (LocalCluster's; a ValueError is a refusal)

    def live_settings(self, key: str) -> dict[str, Any]:
        return self.cluster.live_settings(self._find(key).name)

    def set_log_levels(self, key: str, levels: dict[str, Any]) -> dict[str, Any]:
        return self._settle(lambda name: self.cluster.set_log_levels(name, levels), key)

    def debug(self, key: str, component: str | None, percent: float | None,
              seconds: float | None) -> dict[str, Any]:
        return self._settle(lambda name: self.cluster.debug(name, percent, component, seconds),
                            key)

    def samples(self, key: str, component: str, limit: int) -> list[dict[str, Any]]:
        return self.cluster.samples(self._find(key).name, component, limit)

    def _settle(self, change: Any, key: str) -> dict[str, Any]:
        name, _runtime = self._find(key)
        try:
            return change(name)
        except ValueError as exc:
            raise ActionRefused(str(exc)) from None


class ClusterSource:
    """A cluster, through its nimbus: ``client`` (a ``NimbusClient``) finds it and holds the
    credentials."""

    mode = "cluster"

    def __init__(self, client: NimbusClient):
        self.client = client

    def close(self) -> None:
        self.client.close()

    def _call(self, op: str, timeout: float = 15, **args: Any) -> Any:
        from ..cluster.rpc import NimbusUnavailable, RpcError

        try:
            return self.client.call(op, timeout=timeout, **args)
        except NimbusUnavailable as exc:
            raise SourceUnavailable(str(exc)) from None
        except RpcError as exc:
            if str(exc).startswith("no topology named"):
                raise UnknownTopology(str(exc)) from None
            raise ActionRefused(str(exc)) from None

    def cluster_summary(self) -> dict[str, Any]:
        info = self._call("cluster")
        leader = info.get("leader") or {}
        now = time.time()
        nimbuses = [{"host": n.get("host"), "port": n.get("port"),
                     "leader": leader.get("id") == nid,
                     "uptime": now - n["started"] if n.get("started") else None}
                    for nid, n in sorted(info.get("nimbuses", {}).items())]
        supervisors = [{"id": sid, "host": s.get("host"),
                        "uptime": now - s["started"] if s.get("started") else None,
                        "slots": _count(s.get("slots")), "used_slots": _count(s.get("used_slots"))}
                       for sid, s in sorted(info.get("supervisors", {}).items())]
        return {"mode": self.mode, "nimbuses": nimbuses, "supervisors": supervisors}

    def topologies(self) -> list[dict[str, Any]]:
        return self._call("list")

    def _name(self, key: str) -> str:
        """The name of the topology with id or name ``key``, which the actions take."""
        for row in self._call("list"):
            if key in (row["id"], row["name"]):
                return row["name"]
        raise UnknownTopology(f"no topology with id or name {key!r} is running")

    def topology(self, key: str) -> dict[str, Any]:
        # topology_info and metrics take an id as well as a name.
        try:
            info = self._call("topology_info", name=key)
        except UnknownTopology:
            raise UnknownTopology(f"no topology with id or name {key!r} is running") from None
        # The topology's row as ``list`` has it: topology_info's "errors" are the recent ones.
        row = {**{k: info[k] for k in ("name", "id", "status", "workers", "executors", "uptime")},
               "workers_asked": info.get("workers_asked"),
               "errors": info["error_count"], "last_error": info["last_error"]}
        # None for a topology submitted before nimbus kept structures: no graph, no components.
        structure = info.get("structure") or {"components": {}}
        errors = [{k: e.get(k) for k in ("component", "task", "host", "port", "time", "error")}
                  for e in info.get("errors", [])]
        return {**row, "tasks": sum(c["tasks"] for c in structure["components"].values()),
                "conf": info.get("conf", {}), "structure": structure,
                "snapshots": self._call("metrics", name=info["id"]), "recent_errors": errors,
                "assignment": info.get("assignment", []),
                "worker_slots": info.get("worker_slots", [])}

    def snapshots(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        return self._call("metrics", name=row["id"])

    def config(self, key: str) -> dict[str, Any]:
        # topology_info's "conf" has the credentials redacted for every caller; this one asks
        # for them as the admin (refused to read-only credentials).
        return self._call("topology_conf", name=key)

    def events(self, key: str, limit: int, since: int | None,
               kind: str | None) -> dict[str, Any]:
        return self._call("events", topology=key, limit=limit, since=since, kind=kind)
    def history(self, key: str, resolution: str) -> dict[str, Any]:
        return self._call("metrics_history", name=key, resolution=resolution)

    def logs(self, key: str) -> dict[str, Any]:
        from ..cluster.log_service import CALLER_TIMEOUT_SECS

        return {**self._call("logs_list", timeout=CALLER_TIMEOUT_SECS, name=key), "notice": None}

    def log_read(self, key: str, supervisor: str, file: str, **read: Any) -> dict[str, Any]:
        from ..cluster.log_service import CALLER_TIMEOUT_SECS

        return self._call("logs_read", timeout=CALLER_TIMEOUT_SECS, name=key,
                          supervisor=supervisor, file=file, **read)

    def activate(self, key: str) -> None:
        self._call("activate", name=self._name(key))

    def deactivate(self, key: str) -> None:
        self._call("deactivate", name=self._name(key))

    def rebalance(self, key: str, wait: float, workers: int | None,
                  executors: dict[str, int]) -> None:
        # stormlet's rebalance moves executors at once (there is no wait): ``wait`` is accepted
        # for Storm's URL and ignored.
        self._call("rebalance", name=self._name(key), workers=workers, executors=executors)

    def kill(self, key: str, wait: float) -> None:
        self._call("kill", name=self._name(key), wait=wait)

    def worker_stacks(self, key: str, worker: str, asked_by: str) -> dict[str, Any]:
        from ..cluster.introspection_service import CALL_SLACK_SECS, STACKS_CALL_SECS

        return self._call("worker_stacks", STACKS_CALL_SECS + CALL_SLACK_SECS, name=key,
                          worker=worker, asked_by=asked_by)

    def worker_profile(self, key: str, worker: str, seconds: int, idle: bool,
                       asked_by: str) -> dict[str, Any]:
        return self._call("worker_profile", name=key, worker=worker, seconds=seconds,
                          idle=idle, asked_by=asked_by)

    def profile_result(self, profile: str, svg: bool) -> dict[str, Any]:
        return self._call("worker_profile_result", profile=profile, svg=svg)

    def worker_restart(self, key: str, worker: str, reason: str | None,
                       asked_by: str) -> dict[str, Any]:
        from ..cluster.introspection_service import CALL_SLACK_SECS, RESTART_CALL_SECS

        return self._call("worker_restart", RESTART_CALL_SECS + CALL_SLACK_SECS, name=key,
                          worker=worker, reason=reason, asked_by=asked_by)

    # ----- run-time settings (nimbus's runtime_settings.py; each takes an id or a name)

    def live_settings(self, key: str) -> dict[str, Any]:
        return self._call("live_settings", name=key)

    def set_log_levels(self, key: str, levels: dict[str, Any]) -> dict[str, Any]:
        return self._call("set_log_levels", name=key, levels=levels)

    def debug(self, key: str, component: str | None, percent: float | None,
              seconds: float | None) -> dict[str, Any]:
        return self._call("debug", name=key, component=component, percent=percent,
                          seconds=seconds)

    def samples(self, key: str, component: str, limit: int) -> list[dict[str, Any]]:
        return self._call("samples", name=key, component=component, limit=limit)


def _count(slots: Any) -> int:
    """A slot count from nimbus, which sends either a number or the list of ports."""
    if isinstance(slots, (list, tuple)):
        return len(slots)
    return int(slots or 0)
