"""Offset-tracking spout throughput: messages per second from each backend into a bolt that
only acks, every message tracked, and what committing offsets costs.

    python benchmarks/offset_spout.py [--messages 300000]

Prints, in local mode (one spout task, one bolt task, one acker):
- the local partitioned log (4 partitions): acked messages/s, committing every 2 s and every 50 ms;
- Kafka (librdkafka's mock broker on loopback, 4 partitions or one per 25,000 messages):
  acked messages/s;
- the cost of one commit to each offset store (file, ZooKeeper if installed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import figures

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the test brokers: mock Kafka, ZooKeeper

from stormlet import Bolt, LocalCluster, TopologyBuilder  # noqa: E402
from stormlet.runtime.tuning import tune_for_streaming  # noqa: E402
from stormlet.sources import KafkaSpout, LogSpout  # noqa: E402
from stormlet.sources.offset_store import FileOffsetStore, ZooKeeperOffsetStore  # noqa: E402
from stormlet.sources.partitioned_log import PartitionedLog  # noqa: E402

PARTITIONS = 4


class AckOnly(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def acked_per_second(spout, messages: int) -> float:
    builder = TopologyBuilder()
    builder.set_spout("source", spout)
    builder.set_bolt("sink", AckOnly()).shuffle_grouping("source")
    conf = {"topology.max.spout.pending": 5000, "topology.acker.executors": 1}
    with LocalCluster() as cluster:
        started = time.perf_counter()
        cluster.submit("bench", conf, builder.build())
        cluster.wait_for(lambda: cluster.metrics("bench")["source"]["acked"] >= messages,
                         timeout=600, interval=0.02)
        elapsed = time.perf_counter() - started
        cluster.kill("bench", wait_secs=5)
    return messages / elapsed


def local_log(directory: Path, messages: int) -> Path:
    path = directory / "log"
    log = PartitionedLog.create(path, PARTITIONS)
    payload = "x" * 90
    batch = [f"{i:09d}{payload}" for i in range(messages)]
    log.append_many(batch)
    log.flush()
    return path


def kafka_figure(messages: int) -> float | None:
    try:
        from kafka_mock import MockKafkaCluster
    except ImportError as exc:
        print(f"kafka: skipped ({exc})")
        return None
    # The mock broker keeps about 5 MB per partition and deletes older records (its own
    # retention): enough partitions that nothing is deleted before it is read.
    partitions = max(PARTITIONS, messages // 25_000)
    with MockKafkaCluster() as kafka:
        kafka.create_topic("bench", partitions)
        payload = "x" * 90
        for p in range(partitions):
            kafka.produce("bench", [f"{i:09d}{payload}" for i in range(p, messages, partitions)],
                          partition=p)
        spout = KafkaSpout(kafka.bootstrap_servers, "bench", spout_id="bench")
        return acked_per_second(spout, messages)


def commit_cost_ms(store, saves: int = 500) -> float:
    times = []
    for i in range(saves):
        started = time.perf_counter()
        store.save("bench", i % PARTITIONS, {"offset": i, "partition": i % PARTITIONS,
                                             "topic": "bench", "task": 1, "time": time.time()})
        times.append(time.perf_counter() - started)
    store.close()
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    figures.add_flag(parser)
    args = parser.parse_args()
    # LATEST.md's rows (benchmarks/diary.py renders them from the records); each pairs two
    # figures, so it is recorded only when both were measured.
    recorder = figures.Recorder("offset_spout", enabled=args.record)
    tune_for_streaming()
    n = args.messages
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        path = local_log(base, n)
        log_rate = acked_per_second(LogSpout(str(path), spout_id="slow-commits"), n)
        print(f"local log -> ack-only bolt, commits every 2 s:    {log_rate:>10,.0f} msgs/s")
        rate = acked_per_second(LogSpout(str(path), spout_id="fast-commits",
                                         commit_interval=0.05), n)
        print(f"local log -> ack-only bolt, commits every 50 ms:  {rate:>10,.0f} msgs/s")
        kafka_rate = kafka_figure(n)
        if kafka_rate is not None:
            print(f"kafka (mock broker) -> ack-only bolt:             {kafka_rate:>10,.0f} msgs/s")
            recorder.record("offset spout, every message tracked: from the local log / from "
                            "Kafka (librdkafka's mock broker)", [log_rate, kafka_rate],
                            unit="messages/s", detail=f"{n:,} messages")
        file_cost = commit_cost_ms(FileOffsetStore(base / 'offsets'))
        print(f"one commit, file store (fsync + rename):          {file_cost:>10.3f} ms")
        try:
            from zookeeper_server import ZooKeeperServer, zookeeper_available
        except ImportError:
            return
        if zookeeper_available():
            with ZooKeeperServer(base / "zk") as zk:
                cost = commit_cost_ms(ZooKeeperOffsetStore(zk.hosts, "/bench"))
            print(f"one commit, ZooKeeper store (set):                {cost:>10.3f} ms")
            recorder.record("one offset commit: file store / ZooKeeper", [file_cost, cost],
                            unit="ms", detail="medians of 500")


if __name__ == "__main__":
    main()
