"""`stormlet replay` and `stormlet backfill` on a real Spark standalone cluster (``spark_cluster``:
a master and a worker from the pip-installed PySpark, on loopback).

The jobs run through the real command in a subprocess (``python -m stormlet ... --master
spark://...``, and once through ``spark-submit``), never in this process, where another test's
local session may be active. Paths are given relative to the job's working directory, which is not
the executors' (they run in the worker's work directory), and Spark's default file system is
made HDFS, as a cluster's Hadoop config often does: plain paths must stay local. Each test checks
the result exactly and that the job ran on the cluster: the master lists its application, and
every executor of it reached the driver on loopback.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from spark_cluster import REPO_ROOT, SparkCluster, pyspark_home, spark_cluster  # noqa: F401
from test_backfill import read_output, stream_topology
from zookeeper_server import free_port

import stormlet.cli.spark_submit
from stormlet import FailReason
from stormlet.failed import FailedMessageWriter, FailedRecord, SourceRef
from stormlet.sources.partitioned_log import PartitionedLog, partition_for_key
from stormlet.spark.cluster import (
    MasterUnavailable,
    check_reachable,
    is_local,
    loopback_master,
    standalone_hosts,
)

JOB_TIMEOUT = 240    # seconds; a job that hangs fails the test instead of the run


def job_env(**extra: str) -> dict[str, str]:
    """The jobs' environment: this checkout's stormlet, and none of the settings a session
    would otherwise take from the test run (the driver's address, the executors' Python)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_GATEWAY_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return {**env, **extra}


def run(args: list[object], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=job_env(**env), text=True,
                          capture_output=True, timeout=JOB_TIMEOUT, stdin=subprocess.DEVNULL)


def stormlet_command(*args: object, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "stormlet", *args], cwd, **env)


def spark_submit(master: str, *args: object, cwd: Path,
                 **env: str) -> subprocess.CompletedProcess:
    home = pyspark_home()
    assert home is not None, "no pyspark"
    submit = home / "bin" / "spark-submit"
    # spark-submit runs the driver under PYSPARK_DRIVER_PYTHON (else python3 on the PATH): the
    # interpreter that has stormlet.
    return run([submit, "--master", master, stormlet.cli.spark_submit.__file__, *args], cwd,
               **{"PYSPARK_DRIVER_PYTHON": sys.executable, **env})


def spark_defaults(directory: Path, **settings: str) -> dict[str, str]:
    """The environment that gives a job these Spark settings (``spark-defaults.conf`` in a
    ``SPARK_CONF_DIR``, read by ``stormlet`` and spark-submit alike)."""
    directory.mkdir()
    (directory / "spark-defaults.conf").write_text(
        "".join(f"{key} {value}\n" for key, value in settings.items()))
    return {"SPARK_CONF_DIR": str(directory)}


# A cluster's Hadoop config often makes HDFS Spark's default file system; plain paths must still
# be local ones (nothing listens on this port: a path sent there fails the job).
HDFS_DEFAULT = {"spark.hadoop.fs.defaultFS": "hdfs://127.0.0.1:1"}


def succeeded(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-4000:]}"
    return result.stdout


def error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, f"{result.stdout}\n{result.stderr[-4000:]}"
    return result.stderr.strip().splitlines()[-1]


def ran_on_cluster(cluster: SparkCluster, name: str, before: set[str]) -> None:
    """The master ran one new application called ``name``, and each of its executors connected
    to the driver on loopback."""
    new = [app for app in cluster.applications() if app["id"] not in before]
    assert [app["name"] for app in new] == [name]
    logs = list((cluster.work_dir / new[0]["id"]).glob("*/stderr"))
    assert logs, f"no executor of {new[0]['id']} in {cluster.work_dir}"
    for log in logs:
        driver = re.search(r'"--driver-url" "spark://CoarseGrainedScheduler@([^:"]+):',
                           log.read_text(errors="replace"))
        assert driver and driver[1] == "127.0.0.1", log


def app_ids(cluster: SparkCluster) -> set[str]:
    return {app["id"] for app in cluster.applications()}


# ----- replay


def failed_records(log: PartitionedLog) -> tuple[list[FailedRecord], set[tuple]]:
    """Failed messages of ``log`` and of another source, and what replaying them into ``log``
    must leave there: (partition, key, value) of each."""
    name = str(log.path.resolve())
    reason = FailReason("error", "sink", "cannot parse")
    records: list[FailedRecord] = []
    expected: set[tuple[int, str, str | bytes]] = set()
    for i in range(12):       # from this log: back to the partition each came from
        source = SourceRef(kind="log", name=name, partition=i % 3, offset=i)
        if i == 0:            # an older failure of the same message: the latest wins
            records.append(FailedRecord(message_id=[i % 3, i], reason=reason, attempts=1,
                                        first_failed_at=1.0, last_failed_at=5.0, key="k0",
                                        value="stale", source=source))
        records.append(FailedRecord(message_id=[i % 3, i], reason=reason, attempts=2,
                                    first_failed_at=1.0, last_failed_at=10.0 + i, key=f"k{i}",
                                    value=f"v{i}", source=source))
        expected.add((i % 3, f"k{i}", f"v{i}"))
    elsewhere = SourceRef(kind="log", name="/elsewhere", partition=7, offset=0)
    for i in range(6):        # from another log: by the key's hash; bytes stay bytes
        records.append(FailedRecord(message_id=100 + i, reason=reason, attempts=1,
                                    first_failed_at=1.0, last_failed_at=20.0, key=f"u{i}",
                                    value=f"b{i}".encode(), source={**elsewhere, "offset": i}))
        expected.add((partition_for_key(f"u{i}", 3), f"u{i}", f"b{i}".encode()))
    records.append(FailedRecord(message_id=200, reason=reason, attempts=1, first_failed_at=1.0,
                                last_failed_at=30.0, key=None, value={"not": "replayable"}))
    return records, expected


def log_contents(path: Path) -> Counter:
    log = PartitionedLog(path)
    return Counter((p, r.key, r.value) for p in range(log.partitions) for r in log.read(p, 0))


def test_replay_on_the_cluster_then_again_through_spark_submit(spark_cluster, tmp_path):
    log = PartitionedLog.create(tmp_path / "events", 3)
    records, expected = failed_records(log)
    with FailedMessageWriter(tmp_path / "failed", "orders", "reader", 1) as writer:
        for record in records:
            writer.write(record)

    conf = spark_defaults(tmp_path / "conf", **HDFS_DEFAULT)
    before = app_ids(spark_cluster)
    out = succeeded(stormlet_command("replay", "--failed-dir", "failed", "--to", "log:events",
                                     "--master", spark_cluster.url, cwd=tmp_path, **conf))
    assert f"replayed 18 messages to log:{tmp_path / 'events'}" in out
    assert "20 records matched, 1 older duplicates, 0 replayed before, 1 unreplayable" in out
    assert log_contents(tmp_path / "events") == Counter(expected)    # each once, nothing else
    ran_on_cluster(spark_cluster, "stormlet-replay", before)
    # The executors wrote the plan: a file per target partition, named by it.
    plan_files = list((tmp_path / "failed").glob(".replays/*/plan/part-*"))
    assert sorted(f.name for f in plan_files) == [
        f"part-{p:05d}.parquet" for p in sorted({p for p, _, _ in expected})]

    # spark-submit's --master is the job's: it runs on the cluster, finds every message
    # replayed before and writes nothing. (Other filters than the first run's, or it would not
    # read the files again, nor start Spark.)
    before = app_ids(spark_cluster)
    out = succeeded(spark_submit(spark_cluster.url, "replay", "--failed-dir", "failed", "--to",
                                 "log:events", "--until", "2100-01-01", cwd=tmp_path, **conf))
    assert "replayed 0 messages" in out and "18 replayed before" in out
    assert log_contents(tmp_path / "events") == Counter(expected)
    ran_on_cluster(spark_cluster, "stormlet-replay", before)

    # The first run's filters again: its files are not read again, and no Spark job runs.
    before = app_ids(spark_cluster)
    out = succeeded(stormlet_command("replay", "--failed-dir", "failed", "--to", "log:events",
                                     "--master", spark_cluster.url, cwd=tmp_path, **conf))
    assert "replayed 0 messages" in out and "1 file not read again" in out
    assert app_ids(spark_cluster) == before


# ----- backfill

# A word count whose tokenizer lives in a sibling module, shipped with the topology file, and a
# probe stream saying where each split task ran.
TOPOLOGY = '''
import os
import sys

import stormlet
from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder

from cluster_words import tokenize


class Lines(Spout):
    outputs = ["line"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.lines = open(conf["lines.file"]).read().splitlines()
        self.next = 0

    def next_tuple(self):
        if self.next < len(self.lines):
            self.collector.emit([self.lines[self.next]], msg_id=self.next)
            self.next += 1


class Split(BasicBolt):
    outputs = {"default": ["word"], "where": ["task", "pid", "cwd", "stormlet", "python"]}

    def prepare(self, conf, context):
        self.task, self.probed = context.this_task_index, False

    def execute(self, tup, collector):
        if not self.probed:
            self.probed = True
            collector.emit([self.task, os.getpid(), os.getcwd(), stormlet.__file__,
                            sys.executable], stream="where")
        for word in tokenize(tup["line"]):
            collector.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=[tup])
        self.collector.ack(tup)


class Probe(Bolt):
    outputs = ["task", "pid", "cwd", "stormlet", "python"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit(list(tup.values), anchors=[tup])
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("lines", Lines())
builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("lines")
builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
builder.set_bolt("probe", Probe()).global_grouping("split", "where")
topology = builder.build()
'''

WORDS = '''
def tokenize(line):
    """Lower-cased words without their punctuation."""
    return [w.strip(".,;!?").lower() for w in line.split() if w.strip(".,;!?")]
'''


def test_backfill_on_the_cluster_equals_streaming(spark_cluster, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "cluster_count.py").write_text(textwrap.dedent(TOPOLOGY))
    (code / "cluster_words.py").write_text(textwrap.dedent(WORDS))
    rng = random.Random(11)
    vocabulary = ["Storm", "storm.", "Spark", "bolt", "Spout!", "tuple", "ack", "Stream,", "log"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 8)))
             for _ in range(400)]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    streamed = stream_topology(code / "cluster_count.py",
                               {"lines.file": str(tmp_path / "lines.txt")},
                               [("count", "default")], "lines", len(lines))

    before = app_ids(spark_cluster)
    out = succeeded(stormlet_command("backfill", "code/cluster_count.py", "--input", "lines.txt",
                                     "--output", "out", "--master", spark_cluster.url,
                                     cwd=tmp_path, **spark_defaults(tmp_path / "conf",
                                                                    **HDFS_DEFAULT)))
    assert f"backfill cluster_count: {len(lines)} messages from {tmp_path / 'lines.txt'}" in out
    ran_on_cluster(spark_cluster, "stormlet-backfill-cluster_count", before)

    counted = read_output(tmp_path / "out" / "count" / "default", ["word", "count"])
    assert counted == streamed[("count", "default")]          # every (word, n) emitted, once
    words = Counter(w.strip(".,;!?").lower() for line in lines for w in line.split())
    assert {w: max(n for v, n in counted if v == w) for w, _ in counted} == words

    # Each split task ran in a Python worker of an executor the Spark worker started: in its
    # work directory, with this checkout's stormlet, under this interpreter (a loopback master's
    # executors run the driver's), and not in this process.
    fields = ["task", "pid", "cwd", "stormlet", "python"]
    where = [dict(zip(fields, row)) for row in read_output(tmp_path / "out" / "probe" / "default",
                                                           fields)]
    assert sorted(w["task"] for w in where) == [0, 1]
    for w in where:
        assert Path(w["cwd"]).is_relative_to(spark_cluster.work_dir), w
        assert Path(w["stormlet"]).is_relative_to(REPO_ROOT), w
        assert w["python"] == sys.executable and w["pid"] != os.getpid(), w


# ----- what a user sees when the cluster cannot run the job


def test_an_unreachable_master_is_one_line_at_once(spark_cluster, tmp_path):
    (tmp_path / "lines.txt").write_text("a b\n")
    port = free_port()
    began = time.monotonic()
    result = stormlet_command("backfill", REPO_ROOT / "topologies" / "word_count.py", "--input",
                              "lines.txt", "--output", "out", "--master",
                              f"spark://127.0.0.1:{port}", cwd=tmp_path)
    line = error_line(result)
    assert line.startswith(f"Error: cannot reach the Spark master spark://127.0.0.1:{port} "), line
    assert "is it running" in line
    assert time.monotonic() - began < 20       # Spark alone would retry for a minute
    assert not (tmp_path / "out").exists()


def test_a_master_without_workers_is_one_line_after_the_timeout(spark_cluster, tmp_path):
    # The fixture is asked for its marker (and the JVMs it proves can start): this test starts
    # a master of its own, without any worker. Spark alone would wait for one forever.
    with FailedMessageWriter(tmp_path / "failed", "orders", "reader", 1) as writer:
        writer.write(FailedRecord(message_id=1, reason=FailReason("error", "sink", "x"),
                                  attempts=1, first_failed_at=1.0, last_failed_at=2.0, key="k",
                                  value="v"))
    PartitionedLog.create(tmp_path / "events", 1)
    conf = spark_defaults(tmp_path / "conf", **{"spark.stormlet.executorTimeout": "2"})
    with SparkCluster(tmp_path / "lonely", worker=False) as lonely:
        began = time.monotonic()
        result = stormlet_command("replay", "--failed-dir", "failed", "--to", "log:events",
                                  "--master", lonely.url, cwd=tmp_path, **conf)
        line = error_line(result)
        assert line.startswith(f"Error: no executor started within 2 s on {lonely.url}: are "
                               f"workers registered with the master, with a free core and 1g of "
                               f"memory free each (spark.executor.memory)?"), line
        assert "spark.stormlet.executorTimeout sets this wait" in line
        assert time.monotonic() - began < 60
        # The application was ended, not left waiting on the master (which learns it a moment
        # after the driver stops).
        deadline = time.monotonic() + 10
        while lonely.state()["activeapps"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lonely.state()["activeapps"] == []
    assert PartitionedLog(tmp_path / "events").end_offset(0) == 0
    assert not list((tmp_path / "failed").glob(".replays/*/run.json"))


# ----- the master checks, without Spark


def test_master_urls_say_where_the_workers_are():
    assert standalone_hosts("spark://10.0.0.5:7077") == [("10.0.0.5", 7077)]
    assert standalone_hosts("spark://a:7077,b:7078") == [("a", 7077), ("b", 7078)]
    assert standalone_hosts("spark://a") == [("a", 7077)]
    assert standalone_hosts("spark://[::1]:7077") == [("::1", 7077)]
    assert standalone_hosts("local[2]") == standalone_hosts("yarn") == []
    assert is_local("local") and is_local("local[*]") and not is_local("spark://127.0.0.1:7077")
    for master in ("local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077",
                   "spark://[::1]:7077", "spark://127.0.0.2:1,localhost:2"):
        assert loopback_master(master), master
    for master in ("spark://10.0.0.5:7077", "spark://127.0.0.1:7077,10.0.0.5:7077",
                   "spark://master:7077", "yarn", "k8s://https://127.0.0.1:6443"):
        assert not loopback_master(master), master


def test_a_master_port_that_refuses_is_reported_with_the_address():
    port = free_port()
    with pytest.raises(MasterUnavailable, match=rf"spark://127.0.0.1:{port} \(127.0.0.1:{port}: "
                                                r"Connection refused\): is it running"):
        check_reachable(f"spark://127.0.0.1:{port}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = listening.getsockname()[1]
        check_reachable(f"spark://127.0.0.1:{port},127.0.0.1:{up}")   # one answers: enough
    check_reachable("yarn")                                            # left to Spark
