"""A LocalCluster with the UI serving it, for the UI's API and browser tests.

Two topologies of the same shape run side by side (numbers -> double -> sink):

- "finite": each spout task emits ``COUNT`` numbered messages, then stops; the sink fails every
  FAIL_EVERY-th number once (an explicit fail, replayed by the spout), so once it is done the
  spouts acked exactly ``2 * COUNT`` messages and failed ``2 * COUNT / FAIL_EVERY`` trees.
- "steady": emits a message every few milliseconds for as long as it runs, so its numbers keep
  changing and deactivating it visibly stops them.

``log_topology`` is a third shape, for the partitions table of an offset-tracking spout: a
``LogSpout`` ("reader") over a local partitioned log, and a bolt that acks everything.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support import wait_until as wait_until  # re-exported for the UI tests

from stormlet import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.ui.app import serve
from stormlet.ui.source import LocalSource

COUNT = 200          # messages per spout task of "finite"
SPOUT_TASKS = 2
FAIL_EVERY = 50      # the sink fails each number divisible by this, once
COMPONENTS = ("numbers", "double", "sink")


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf["ui.count"])          # 0: without end
        self.interval = float(conf["ui.interval"])  # seconds between emits
        self.base = context.this_task_index * 1_000_000
        self.next_i = 0
        self.next_time = time.monotonic()

    def next_tuple(self):
        if self.count and self.next_i >= self.count:
            return
        if time.monotonic() < self.next_time:
            time.sleep(0.001)
            return
        self.next_time += self.interval
        n = self.base + self.next_i
        self.next_i += 1
        self.collector.emit([n], msg_id=n)

    def fail(self, msg_id, reason):
        self.collector.emit([msg_id], msg_id=msg_id)


class Double(BasicBolt):
    outputs = ["n", "double"]

    def execute(self, tup, collector):
        collector.emit([tup[0], 2 * tup[0]])


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.failed_once = set()
        if conf.get("ui.not_finite"):   # metrics JSON cannot hold as they are
            context.register_gauge("nan", lambda: float("nan"))
            context.register_histogram("infinite").update(float("inf"))

    def execute(self, tup):
        n = tup[0]
        if n % FAIL_EVERY == 0 and n not in self.failed_once:
            self.failed_once.add(n)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(), parallelism=SPOUT_TASKS)
    builder.set_bolt("double", Double(), parallelism=2).shuffle_grouping("numbers")
    builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("double", ["n"])
    return builder.build()


FINITE = {"ui.count": COUNT, "ui.interval": 0.002, "topology.message.timeout.secs": 10}
STEADY = {"ui.count": 0, "ui.interval": 0.005, "topology.message.timeout.secs": 10}
# Its sink's gauge reads NaN and its histogram holds infinity; its conf holds infinity too.
NOT_FINITE = {**FINITE, "ui.not_finite": True, "ui.limit": float("inf")}
# The header the UI's pages send with every action; the API refuses actions without it.
ACTION_HEADERS = {"X-Requested-By": "stormlet-ui"}


@contextmanager
def ui_cluster(*names: str, **serve_options: Any) -> Iterator[tuple[LocalCluster, Any]]:
    """A LocalCluster running the named topologies ("finite", "steady") and the UI serving it on
    a free port, ``serve_options`` given to ``serve``; everything stopped at the end."""
    confs = {"finite": FINITE, "steady": STEADY}
    with LocalCluster() as cluster:
        for name in names:
            cluster.submit(name, confs[name], topology())
        server = serve(LocalSource(cluster), "127.0.0.1", 0, **serve_options)
        try:
            yield cluster, server
        finally:
            server.stop()
            for name in cluster.topologies():
                cluster.kill(name, wait_secs=0)


def request(server: Any, path: str, method: str = "GET", body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, decoded JSON) of one request to the UI (JSON errors included). A POST sends
    the pages' action header unless ``headers`` are given."""
    data = None if body is None else json.dumps(body).encode()
    if headers is None:
        headers = {"Content-Type": "application/json",
                   **(ACTION_HEADERS if method == "POST" else {})}
    req = urllib.request.Request(f"{server.url}{path.lstrip('/')}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, strict_json(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, strict_json(exc.read())


def strict_json(text: bytes) -> Any:
    """JSON as a browser parses it: Python's json.loads would accept NaN and Infinity."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON: a browser cannot parse this reply")
    return json.loads(text, parse_constant=refuse)


def get(server: Any, path: str) -> Any:
    status, value = request(server, path)
    assert status == 200, (path, status, value)
    return value


def post(server: Any, path: str, body: Any = None) -> Any:
    status, value = request(server, path, "POST", body if body is not None else {})
    assert status == 200, (path, status, value)
    return value


# ----- an offset-tracking spout over a local partitioned log

LOG_RECORDS = (3, 5, 8)   # records first written to partitions 0, 1 and 2
LOG_CONF = {"topology.message.timeout.secs": 10}


class AckAll(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


def append(log: PartitionedLog, counts: Sequence[int]) -> None:
    """Appends ``counts[p]`` records to partition p."""
    for partition, count in enumerate(counts):
        for i in range(count):
            log.append(f"p{partition}-{i}", partition=partition)
    log.flush()


def write_log(path: Path) -> PartitionedLog:
    log = PartitionedLog.create(path, len(LOG_RECORDS))
    append(log, LOG_RECORDS)
    return log


def log_topology(path: Path):
    builder = TopologyBuilder()
    builder.set_spout("reader", LogSpout(str(path), spout_id="ui", commit_interval=0.1),
                      parallelism=2)
    builder.set_bolt("ack", AckAll()).shuffle_grouping("reader")
    return builder.build()


def partition_rows(server: Any, name: str) -> list[dict]:
    """The partition rows of the reader's component page, by partition."""
    rows = get(server, f"/api/v1/topology/{name}/component/reader")["partitions"]
    return sorted(rows, key=lambda row: row["partition"])


def caught_up(server: Any, name: str) -> bool:
    """Every record of the log acked and committed, as the component page says."""
    rows = partition_rows(server, name)
    return [(r["lag"], r["committed"]) for r in rows] == [(0, n) for n in LOG_RECORDS]
