"""What effectively-once's sinks cost: a stateful word count over the partitioned log, in local
mode, its running counts written to each sink in turn.

    python benchmarks/exactly_sinks.py              # 20,000 sentences (60,000 words)
    python benchmarks/exactly_sinks.py --sentences 5000 --no-redis

The topology: LogSpout (2 tasks) -> split (2) -> stateful count (2) -> sink (2), fields grouped
by word, in ``topology.guarantee: effectively-once`` with the embedded state store and a
checkpoint every 500 ms. The sinks: none (the count's output dropped by a bolt that writes
nothing); ``EmbeddedUpsertBolt``; ``RedisUpsertBolt`` (a redis-server on loopback, skipped with
a line if none is installed); ``TransactionalKafkaBolt`` on librdkafka's mock broker. Each run
is timed from submit until its output is whole (the state, table, hash or topic holds every
word's final count); prints words/s and the ratio to no sink.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the mock Kafka broker and the Redis server

from kafka_mock import MockKafkaCluster  # noqa: E402
from redis_server import RedisServer, redis_available  # noqa: E402

from stormlet import Bolt, LocalCluster, TopologyBuilder  # noqa: E402
from stormlet import config as cfg  # noqa: E402
from stormlet.sinks.kafka import (  # noqa: E402
    FieldNameBasedTupleToKafkaMapper,
    TransactionalKafkaBolt,
)
from stormlet.sinks.upsert import EmbeddedUpsertBolt, RedisUpsertBolt, read_table  # noqa: E402
from stormlet.sources import LogSpout  # noqa: E402
from stormlet.sources.partitioned_log import PartitionedLog  # noqa: E402
from stormlet.state import StatefulBolt  # noqa: E402
from stormlet.state.embedded import state_file  # noqa: E402
from stormlet.state.store import decode_key, decode_value  # noqa: E402


class Split(Bolt):
    outputs = ["word"]

    def execute(self, tup):
        for word in tup["value"].split():
            self.collector.emit([word], anchors=[tup])
        self.collector.ack(tup)


class Count(StatefulBolt):
    outputs = ["word", "n"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        n = self.state.get(tup["word"], 0) + 1
        self.state.put(tup["word"], n)
        self.collector.emit([tup["word"], str(n)], anchors=[tup])
        self.collector.ack(tup)


class Drop(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def run(work: Path, sentences: list[str], sink: Bolt, whole) -> float:
    log = PartitionedLog.create(work / "log", 2)
    log.append_many(sentences)
    log.close()
    builder = TopologyBuilder()
    builder.set_spout("sentences", LogSpout(str(work / "log"), spout_id="s"), parallelism=2)
    builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
    builder.set_bolt("sink", sink, parallelism=2).fields_grouping("count", ["word"])
    conf = {cfg.TOPOLOGY_GUARANTEE: cfg.EFFECTIVELY_ONCE,
            cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(work / "state")},
            cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: 500}
    with LocalCluster() as cluster:
        start = time.monotonic()
        cluster.submit("bench", conf, builder.build())
        while not whole():
            time.sleep(0.05)
        took = time.monotonic() - start
        cluster.kill("bench", wait_secs=0)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--no-redis", action="store_true",
                        help="skip the Redis sink (which starts a redis-server)")
    args = parser.parse_args()
    sentences = [f"w{i % 101} v{i % 37} common" for i in range(args.sentences)]
    words = 3 * len(sentences)
    totals = Counter(w for s in sentences for w in s.split())
    final = {w: str(n) for w, n in totals.items()}
    results: dict[str, float] = {}

    def measure(name: str, sink: Bolt, whole) -> None:
        work = Path(tempfile.mkdtemp(prefix="exactly-sinks-"))
        try:
            took = run(work, sentences, sink, lambda: whole(work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results[name] = took
        base = results.get("no sink")
        ratio = f"  {took / base:.2f}x the time of no sink" if base else ""
        print(f"{name:28s} {words / took:9,.0f} words/s  ({took:.2f} s){ratio}", flush=True)

    def state_whole(work: Path) -> bool:
        import sqlite3
        path = state_file(work / "state", "bench")
        if not path.exists():
            return False
        db = sqlite3.connect(path)
        try:
            rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE 'bench/count/%'").fetchall()
        except sqlite3.OperationalError:
            return False
        finally:
            db.close()
        return {decode_key(k): decode_value(v) for k, v in rows} == dict(totals)

    measure("no sink", Drop(), state_whole)

    def table_whole(work: Path) -> bool:
        path = state_file(work / "state", "bench")
        return path.exists() and read_table(path, "totals") == final
    measure("EmbeddedUpsertBolt", EmbeddedUpsertBolt("totals", ["word"], "n"), table_whole)

    if not args.no_redis and redis_available():
        with RedisServer(Path(tempfile.mkdtemp(prefix="exactly-sinks-redis-"))) as server:
            client = server.client()
            expected = {w.encode(): n.encode() for w, n in final.items()}
            measure("RedisUpsertBolt", RedisUpsertBolt(server.provider_config, "totals",
                                                       ["word"], "n"),
                    lambda work: client.hgetall("totals") == expected)
    else:
        print("RedisUpsertBolt: skipped")

    with MockKafkaCluster() as kafka:
        from confluent_kafka import Consumer, TopicPartition
        kafka.create_topic("totals", 1)
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "b",
                             "isolation.level": "read_committed"})
        consumer.assign([TopicPartition("totals", 0, 0)])
        seen = [0]

        def topic_whole(work: Path) -> bool:
            while (message := consumer.poll(0.01)) is not None:
                seen[0] += message.error() is None
            return seen[0] >= words
        measure("TransactionalKafkaBolt", TransactionalKafkaBolt(kafka.bootstrap_servers)
                .with_topic_selector("totals")
                .with_tuple_to_kafka_mapper(FieldNameBasedTupleToKafkaMapper("word", "n")),
                topic_whole)
        consumer.close()


if __name__ == "__main__":
    main()
