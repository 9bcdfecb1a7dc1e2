"""A worker process: runs the executors assigned to one slot of one topology.

Started by a supervisor as ``python -m stormlet.cluster.worker ...``. It loads the topology code,
binds the slot's port, connects to the other workers, and runs its executors with the same engine
as local mode. It follows the topology's status (active/inactive) and where other workers' tasks
live; when its own executors change (a rebalance) it exits and its supervisor starts it afresh.
It writes a heartbeat file every second, which its supervisor watches and reports on: its
metrics and its tasks' recent errors. If an executor thread dies, the worker writes one more
heartbeat (so the cause reaches ``stormlet errors``) and exits; its supervisor starts it afresh.
Every ``topology.metrics.report.secs`` it sends its metrics snapshot to the nimbus leader
(see metrics_reporter).
Moving tuples never needs ZooKeeper: a ZooKeeper outage only pauses status and placement updates.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import zmq

from .. import config as cfg
from ..loader import load_topology_file
from ..runtime.engine import TopologyRuntime
from ..runtime.tuning import tune_for_streaming
from .wire import FrameDecoder
from .backpressure import OverloadWatch
from .errors import heartbeat_errors
from .metrics_reporter import MetricsReporter
from .transport import Receiver, RemoteRoute, Sender, make_deliver
from .zk_state import ClusterState, connect, decode_node

log = logging.getLogger(__name__)

HEARTBEAT_SECS = 1.0


def executor_key(executors: list[list]) -> list:
    return sorted([e[0], list(e[1])] for e in executors)


def mine(assignment: dict, supervisor_id: str, port: int) -> list[list]:
    return [e for e in assignment.get("executors", []) if e[2] == supervisor_id and e[4] == port]


class Worker:
    def __init__(self, zk_hosts: str, zk_root: str, topology_id: str, supervisor_id: str,
                 port: int, host: str, code_entry: Path, heartbeat_file: Path):
        self.topology_id = topology_id
        self.supervisor_id = supervisor_id
        self.port = port
        self.host = host
        self.heartbeat_file = heartbeat_file
        self.done = threading.Event()
        self.exit_reason = ""
        self.failed = False
        self.client = connect(zk_hosts)
        self.state = ClusterState(self.client, zk_root)
        record = self.state.topology(topology_id)
        assignment = self.state.assignment(topology_id)
        if record is None or assignment is None:
            raise SystemExit(f"topology {topology_id} is not (or no longer) assigned")
        self.executors = mine(assignment, supervisor_id, port)
        if not self.executors:
            raise SystemExit(f"nothing of {topology_id} is assigned to {supervisor_id}:{port}")
        topology, _conf = load_topology_file(code_entry)
        self.context = zmq.Context()
        self.stopping = threading.Event()
        self.sender = Sender(self.context, self.stopping, topology_id)
        plan = [(e[0], list(e[1])) for e in self.executors]
        # What components may need of the cluster: offset spouts commit to its ZooKeeper, and
        # know a restarted worker of this topology instance from a new submission.
        conf = {**record["conf"], cfg.STORMLET_ZOOKEEPER_CONNECT: zk_hosts,
                cfg.STORMLET_ZOOKEEPER_ROOT: self.state.root,
                cfg.STORMLET_TOPOLOGY_ID: topology_id}
        self.runtime = TopologyRuntime(record["name"], topology, conf, plan=plan,
                                       remote_routes=self._remote_routes(assignment))
        overload = OverloadWatch(self.runtime.routes, self._peers,
                                 lambda address, message: self.sender.queue.put((address, message)))
        self.receiver = Receiver(self.context, f"tcp://{host}:{port}",
                                 FrameDecoder(self.runtime.layout, topology_id),
                                 make_deliver(self.runtime.routes, self.sender.paused, overload),
                                 self.stopping, overload)
        self.status = record.get("status")
        self.started = time.time()
        self._beat_lock = threading.Lock()   # the heartbeat thread and a last beat at exit
        self.reporter = MetricsReporter(
            functools.partial(self.runtime.metrics_snapshot, host, port), self.state.leader,
            topology_id, host, port, float(self.runtime.conf[cfg.TOPOLOGY_METRICS_REPORT_SECS]))

    def _remote_routes(self, assignment: dict) -> dict:
        routes = {}
        for _component, tasks, sid, host, port in assignment.get("executors", []):
            if (sid, port) != (self.supervisor_id, self.port):
                route = self.sender.route(f"tcp://{host}:{port}")
                for task in tasks:
                    routes[task] = route
        return routes

    def _peers(self) -> set[str]:
        """The other workers of this topology, as this worker reaches them now."""
        return {r.address for r in self.runtime.routes if isinstance(r, RemoteRoute)}

    def run(self) -> None:
        self.receiver.start()
        self.sender.start()
        self.runtime.start(active=self.status == "active")
        threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True).start()
        threading.Thread(target=self.reporter.run, args=(self.done,), name="metrics-reporter",
                         daemon=True).start()
        self._watch(self.state.topology_path(self.topology_id), "topology", self._on_topology)
        self._watch(self.state.assignment_path(self.topology_id), "assignment",
                    self._on_assignment)
        log.info("worker %s:%d of %s running %d executors", self.host, self.port,
                 self.topology_id, len(self.executors))
        while not self.done.wait(0.5):
            dead = [e for e in self.runtime.all_executors() if e.finished.is_set()]
            if dead:
                # Half a worker is worse than none: exit, and the supervisor starts a whole one.
                # The executor logged and recorded why; one last heartbeat carries that to the
                # supervisor, which keeps it after this process is gone.
                self.failed = True
                reason = dead[0].death or f"executor {dead[0].name} ended"
                try:
                    self._write_heartbeat(stopping=reason)
                except Exception:
                    log.exception("could not write the last heartbeat")
                self.stop(reason)
        log.info("worker %s:%d stopping: %s", self.host, self.port, self.exit_reason)
        self.shutdown()

    def stop(self, reason: str) -> None:
        self.exit_reason = reason
        self.done.set()

    def _watch(self, path: str, what: str, handle: Callable[[dict], None]) -> None:
        """Follow a node: ``handle`` gets each valid version; removal stops the worker."""

        def on_change(data, stat, *args) -> bool | None:
            if self.done.is_set():
                return False
            if data is None:
                self.stop(f"the {what} was removed")
                return False
            record = decode_node(path, data)
            if record is not None:
                handle(record)
            return None

        self.client.DataWatch(path, on_change)

    def _on_topology(self, record: dict) -> None:
        status = record.get("status")
        if status != self.status:
            self.status = status
            if status == "active":
                self.runtime.activate()
            else:
                self.runtime.deactivate()

    def _on_assignment(self, assignment: dict) -> None:
        try:
            executors = mine(assignment, self.supervisor_id, self.port)
        except (AttributeError, TypeError, IndexError):
            log.warning("ignoring malformed assignment for %s", self.topology_id)
            return
        if executor_key(executors) != executor_key(self.executors):
            self.stop("its executors were reassigned")
            return
        # Others moved: point their tasks at their new workers, and let go of the old ones.
        old = self._peers()
        for task, route in self._remote_routes(assignment).items():
            current = self.runtime.routes[task]
            if getattr(current, "address", None) != route.address:
                self.runtime.routes[task] = route
        for address in old - self._peers():
            self.sender.retire(address)

    def _heartbeat(self) -> None:
        while not self.done.is_set():
            try:
                self._write_heartbeat()
            except Exception:  # a full disk, say: the supervisor will notice the silence
                log.exception("could not write the heartbeat file %s", self.heartbeat_file)
            self.done.wait(HEARTBEAT_SECS)

    def _write_heartbeat(self, stopping: str | None = None) -> None:
        beat = {"time": time.time(), "pid": os.getpid(), "started": self.started,
                "topology_id": self.topology_id, "port": self.port,
                "metrics": self.runtime.summary(),
                "errors": heartbeat_errors(self.runtime.errors())}
        if stopping:
            beat["stopping"] = stopping   # why this worker is about to exit
        with self._beat_lock:
            partial = self.heartbeat_file.with_suffix(".part")
            partial.write_text(json.dumps(beat))
            os.replace(partial, self.heartbeat_file)

    def shutdown(self) -> None:
        # Drain briefly: the topology is going away or this worker is being replaced; what is
        # still in flight fails now or times out at its spout and is replayed.
        self.runtime.stop(wait_secs=min(5.0, self.runtime.timeout_secs))
        # The final counts, while this slot may still be assigned (its supervisor stopping, say).
        self.reporter.report(lookup=False)
        self.stopping.set()
        self.sender.join(timeout=2)
        self.receiver.join(timeout=2)
        self.context.term()
        self.client.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="stormlet-worker")
    parser.add_argument("--zk", required=True)
    parser.add_argument("--zk-root", required=True)
    parser.add_argument("--topology-id", required=True)
    parser.add_argument("--supervisor-id", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--code", type=Path, required=True, help="the topology's entry file")
    parser.add_argument("--heartbeat-file", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s worker:{args.port} %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    tune_for_streaming()
    worker = Worker(args.zk, args.zk_root, args.topology_id, args.supervisor_id, args.port,
                    args.host, args.code, args.heartbeat_file)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: worker.stop("SIGINT"))
    worker.run()
    sys.exit(1 if worker.failed else 0)


if __name__ == "__main__":
    main()
