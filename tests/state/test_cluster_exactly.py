"""Effectively-once on a real loopback cluster (ZooKeeper, nimbus, a supervisor, two workers): a
stateful word count over the partitioned log or a Kafka topic (the mock broker), fed while it
runs, with faults injected mid-stream: a worker SIGKILLed, the supervisor SIGKILLed with its
workers and started again, nimbus SIGKILLed and started again, ZooKeeper SIGKILLed and started
again. The committed state must then equal a failure-free run's exactly: every word's total the
true count, every (partition, offset, word) counted once.

The count's output goes through the sinks of effectively-once too (the topology's
``add_sinks``): the embedded upsert table (one SQLite file the two workers share), the Redis
upsert hash and, over Kafka, the transactional Kafka sink; each sink's committed records must
equal a failure-free run's (``expected_records``): every (partition, offset, word) written
once, a word's totals 1..n. librdkafka's mock broker keeps no transaction semantics (a
read_committed reader sees aborted transactions' records, and the sink's mark, an offset sent
to the transaction, is never committed, so a restarted task publishes its staged checkpoint
again): after a fault the Kafka topic is checked as the table it stands for (the last record of
each key), and a failure-free run's (``"none"``, in the full form) record for record.

Quick form (CI): two runs, the log with a worker killed and Kafka with the supervisor killed,
on the embedded store. Full form: ``STORMLET_EXACTLY_SEEDS=N`` runs N seeds of each source on
each store (embedded, and Redis when installed), each seed choosing one or two faults from
``FAULTS`` and when they strike, and one failure-free run of each source and store."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import after_test, serve_cluster, wait_until
from cluster_topologies.exactly_word_count import SINK_TABLE
from kazoo.exceptions import NoNodeError
from redis_server import SKIP_REASON, RedisServer, redis_available
from zookeeper_server import zookeeper_available

from stormlet.cluster.zk_state import connect, offsets_path
from stormlet.sinks.upsert import read_table
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state.checkpoint import CHECKPOINT_COMPONENT
from stormlet.state.exactly import PROGRESS_KEY
from stormlet.state.providers import namespace
from stormlet.state.redis_store import KEY_PREFIX
from stormlet.state.store import decode_key, decode_value, encode_key

pytestmark = [
    pytest.mark.skipif(not zookeeper_available(),
                       reason="ZooKeeper is not installed: run deploy/zookeeper.sh install"),
    pytest.mark.skipif(not redis_available(), reason=SKIP_REASON),   # the Redis sink's
]

TOPOLOGIES = Path(__file__).resolve().parents[1] / "cluster_topologies"
TOPOLOGY = {"log": TOPOLOGIES / "exactly_word_count.py",
            "kafka": TOPOLOGIES / "exactly_kafka_word_count.py"}
FAULTS = ("worker", "supervisor", "nimbus", "zookeeper")
MARKS = {"log": (), "kafka": (pytest.mark.kafka,)}   # the Kafka runs start the mock broker
SENTENCES = 1500
RATE = 300   # sentences a second, appended while the topology runs
SEEDS = int(os.environ.get("STORMLET_EXACTLY_SEEDS", "1"))
STORES = ["embedded"] + (["redis"] if SEEDS > 1 and redis_available() else [])
QUICK = [("log", "embedded", 0, ("worker",)), ("kafka", "embedded", 0, ("supervisor",))]


def cases() -> list:
    """(source, store, seed, faults): the quick form's two, or the full form's seeded ones."""
    if SEEDS <= 1:
        return [pytest.param(*case, id=f"{case[0]}-{case[1]}-{'+'.join(case[3])}",
                             marks=MARKS[case[0]]) for case in QUICK]
    found = []
    for source in ("log", "kafka"):
        for store in STORES:
            for seed in range(SEEDS):
                rng = random.Random(f"{source}{store}{seed}")
                faults = tuple(rng.sample(FAULTS, rng.choice((1, 2))))
                found.append(pytest.param(source, store, seed, faults, marks=MARKS[source],
                                          id=f"{source}-{store}-{seed}-{'+'.join(faults)}"))
            found.append(pytest.param(source, store, SEEDS, (), marks=MARKS[source],
                                      id=f"{source}-{store}-none"))
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


@pytest.fixture(autouse=True)
def _logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


def sentence(i: int) -> str:
    return f"{i} a{i % 13} b{i % 5}"   # two different words


def failure_free_totals() -> dict[str, int]:
    totals: collections.Counter[str] = collections.Counter()
    for i in range(SENTENCES):
        totals.update(sentence(i).split()[1:])
    return dict(totals)


class Committed:
    """Reads the count bolt's committed totals and seen-counts, and the checkpoint progress,
    from the embedded store's file (``redis`` None) or from Redis."""

    def __init__(self, db_path: Path, name: str, redis: RedisServer | None):
        self.db_path, self.name, self.redis = db_path, name, redis

    def __call__(self) -> tuple[dict, dict, tuple]:
        if self.redis is None:
            return committed(self.db_path, self.name)
        client = self.redis.client()
        state: dict[str, Any] = {}
        for key in client.scan_iter(match=KEY_PREFIX + namespace(self.name, "count", 0)[:-1]
                                    + "*"):
            if b"$" not in key:
                state.update((decode_key(k), decode_value(v))
                             for k, v in client.hgetall(key).items())
        raw = client.hget(KEY_PREFIX + namespace(self.name, CHECKPOINT_COMPONENT),
                          encode_key(PROGRESS_KEY))
        return split_state(state, decode_value(raw) if raw else (0, "", 0))


def split_state(state: dict, progress: tuple) -> tuple[dict, dict, tuple]:
    totals = {k: n for k, n in state.items() if isinstance(k, str)}
    seen = {k: n for k, n in state.items() if isinstance(k, tuple)}
    return totals, seen, tuple(progress)


def committed(db_path: Path, name: str) -> tuple[dict, dict, tuple]:
    """The count bolt's committed totals and seen-counts, and the checkpoint progress."""
    if not db_path.exists():
        return {}, {}, (0, "", 0)
    db = sqlite3.connect(db_path, timeout=10)
    try:
        rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE ?",
                          (namespace(name, "count", 0)[:-1] + "%",)).fetchall()
        progress = db.execute("SELECT v FROM kv WHERE ns = ? AND k = ?",
                              (namespace(name, CHECKPOINT_COMPONENT),
                               encode_key(PROGRESS_KEY))).fetchone()
    except sqlite3.OperationalError:
        return {}, {}, (0, "", 0)
    finally:
        db.close()
    state = {decode_key(k): decode_value(v) for k, v in rows}
    return split_state(state, decode_value(progress[0]) if progress else (0, "", 0))


def expected_records(seen: dict) -> tuple[set[str], collections.Counter]:
    """What a failure-free run's sinks hold, in the form ``output`` gives: the name
    ``<partition>:<offset>:<word>`` of every word of every record (from the committed state's
    seen-counts, which the test has checked are each record's words once), and each word's
    totals 1..n (which record got which total depends on the order the records came in)."""
    names = {f"{partition}:{offset}:{word}" for _, partition, offset, word in seen}
    return names, collections.Counter((word, i) for word, n in failure_free_totals().items()
                                      for i in range(1, n + 1))


def output(rows: dict[str, int]) -> tuple[set[str], collections.Counter]:
    """A sink's committed rows (record name -> total) as the record names and the (word, total)
    pairs."""
    return set(rows), collections.Counter((name.rsplit(":", 1)[1], total)
                                          for name, total in rows.items())


def differences(got: tuple[set, collections.Counter], expected: tuple[set, collections.Counter]
                ) -> str:
    names, totals = got
    missing, extra = expected[0] - names, names - expected[0]
    wrong = sorted((totals - expected[1]) + (expected[1] - totals))[:10]
    return (f"{len(missing)} record(s) missing (e.g. {sorted(missing)[:3]}), {len(extra)} "
            f"extra (e.g. {sorted(extra)[:3]}); (word, total) pairs off: {wrong}")


class SinkOutput:
    """Reads what each sink of the topology committed: the embedded upsert table, the Redis
    upsert hash and, over Kafka, the transactional sink's topic (read_committed, from the
    start; ``records`` keeps every record read, in order)."""

    def __init__(self, db_path: Path, redis: RedisServer, kafka=None, topic: str | None = None):
        self.db_path, self.redis, self.topic = db_path, redis, topic
        self.records: list[tuple[str, int]] = []
        self.consumer = None
        if topic is not None:
            from confluent_kafka import Consumer, TopicPartition

            self.consumer = Consumer({
                "bootstrap.servers": kafka.bootstrap_servers, "group.id": f"read-{topic}",
                "isolation.level": "read_committed", "enable.auto.commit": False})
            self.consumer.assign([TopicPartition(topic, 0, 0)])

    def tables(self) -> dict[str, dict[str, int]]:
        """Each sink's committed rows: record name -> total (the Kafka topic read as the table
        it stands for: the last record of each key)."""
        found = {"embedded": (read_table(self.db_path, SINK_TABLE)
                              if self.db_path.exists() else {}),
                 "redis": {k.decode(): int(v)
                           for k, v in self.redis.client().hgetall(SINK_TABLE).items()}}
        if self.consumer is not None:
            while (message := self.consumer.poll(0.05)) is not None:
                assert message.error() is None, message.error()
                key, value = message.key(), message.value()
                assert key is not None and value is not None, message
                self.records.append((key.decode(), int(value)))
            found["kafka"] = dict(self.records)
        return found

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


class Feed:
    """Appends the sentences to the log, or produces them to the Kafka topic, at ``RATE``."""

    def __init__(self, source: str, target: Path | str, kafka=None):
        self.source, self.target, self.kafka = source, target, kafka
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        log = PartitionedLog(self.target) if self.source == "log" else None
        step = RATE // 10
        try:
            for start in range(0, SENTENCES, step):
                if self.stop.is_set():
                    return
                batch = [sentence(i) for i in range(start, min(SENTENCES, start + step))]
                if log is not None:
                    log.append_many(batch)
                    log.flush()
                else:
                    self.kafka.produce(self.target, batch, partition=(start // step) % 2)
                time.sleep(0.1)   # the feed's pace, not a wait for the system under test
        finally:
            if log is not None:
                log.close()


@pytest.mark.parametrize(("source", "store", "seed", "faults"), cases())
def test_faults_leave_the_committed_word_count_exact(request, cluster, tmp_path, source, store,
                                                     seed, faults):
    kafka = request.getfixturevalue("mock_kafka") if source == "kafka" else None
    with RedisServer(tmp_path / "redis") as redis:   # the Redis sink's, and the store's
        run(cluster, tmp_path, source, seed, faults, redis if store == "redis" else None, redis,
            kafka)


def forget_commits(cluster) -> None:
    """Delete the offset commits of the module's earlier runs, which a spout of the same id
    would otherwise resume at in a new log or topic (a new topology resumes a spout id's
    commits, by design)."""
    client = connect(cluster.zk.hosts)
    try:
        for spout_id in client.get_children(offsets_path()):
            client.delete(f"{offsets_path()}/{spout_id}", recursive=True)
    except NoNodeError:   # nothing committed yet
        pass
    finally:
        client.stop()
        client.close()


def inject(cluster, name: str, fault: str, rng: random.Random) -> tuple[str, set[int]]:
    """Strike with ``fault`` and undo it (a daemon started again); returns what was done and
    the pids of the workers it killed, whose restart the test then waits for."""
    workers = sorted(cluster.topology_workers(name).values(), key=lambda b: b["pid"])
    if fault == "worker":
        victim = rng.choice(workers)
        os.kill(victim["pid"], signal.SIGKILL)
        return f"SIGKILL worker pid {victim['pid']}", {victim["pid"]}
    if fault == "supervisor":
        daemon = cluster.supervisors["s1"]
        daemon.kill()
        for beat in workers:
            try:
                os.kill(beat["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(rng.uniform(1, 4))   # how long the node is down: the fault's length
        daemon.start()
        return "SIGKILL the supervisor and its workers, started again", {
            beat["pid"] for beat in workers}
    if fault == "nimbus":
        daemon = cluster.nimbuses[0]
        daemon.kill()
        time.sleep(rng.uniform(1, 4))   # the fault's length
        daemon.start()
        cluster.wait_for_leader()   # its old registration lingers until its session expires
        return "SIGKILL nimbus, started again", set()
    if fault == "zookeeper":
        cluster.zk.stop(hard=True)
        time.sleep(rng.uniform(2, 6))   # the fault's length, within the sessions' timeout
        cluster.zk.start()
        return "SIGKILL ZooKeeper, started again", set()
    raise ValueError(f"unknown fault {fault!r}")


def run(cluster, tmp_path: Path, source: str, seed: int, faults: tuple[str, ...],
        redis: RedisServer | None, sink_redis: RedisServer, kafka) -> None:
    rng = random.Random(seed)
    name = f"exactly{source[0]}{seed}{'r' if redis else ''}"
    forget_commits(cluster)
    if source == "log":
        target: Path | str = tmp_path / "log"
        PartitionedLog.create(target, 2).close()
        where = [f"words.log={target}"]
    else:
        target = f"words-{name}"
        kafka.create_topic(target, 2)
        where = [f"words.kafka={kafka.bootstrap_servers}", f"words.topic={target}"]
    state_file = cluster.base / "s1" / "state" / f"{name}.sqlite3"
    committed_now = Committed(state_file, name, redis)
    where.append(f"words.redis={json.dumps(sink_redis.provider_config)}")
    sink_topic = None
    if source == "kafka":
        sink_topic = f"counts-{name}"
        kafka.create_topic(sink_topic, 1)
        where.append(f"words.sink.topic={sink_topic}")
    sinks = SinkOutput(state_file, sink_redis, kafka, sink_topic)
    state = ["topology.state.provider=embedded"]
    if redis is not None:
        state = ["topology.state.provider=redis",
                 f"topology.state.provider.config={json.dumps(redis.provider_config)}"]
    cluster.submit(TOPOLOGY[source], name, "topology.workers=2", *where, *state)
    wait_until(lambda: len(cluster.topology_workers(name)) == 2, 40, "two workers")
    feed = Feed(source, target, kafka)
    feed.thread.start()
    done = []
    try:
        for k, fault in enumerate(faults):
            at = rng.randint(200, SENTENCES // 3) * (k + 1)   # each fault mid-stream
            wait_until(lambda: len(committed_now()[1]) > at * 2, 90,
                       f"{at} sentences' words committed")
            what, killed = inject(cluster, name, fault, rng)
            done.append(what)
            wait_until(lambda: len(cluster.topology_workers(name)) == 2 and not killed & {
                b["pid"] for b in cluster.topology_workers(name).values()},
                60, "the topology's two workers to run again")
        expected = failure_free_totals()
        struck_at = time.monotonic()
        try:
            wait_until(lambda: committed_now()[0] == expected, 120,
                       "the committed totals to equal a failure-free run's")
        except AssertionError:
            totals, seen, progress = committed_now()
            off = {w: (totals.get(w), n) for w, n in expected.items() if totals.get(w) != n}
            twice = sorted(k for k, n in seen.items() if n > 1)[:10]
            raise AssertionError(f"after {done}: committed (got, expected) differ: {off}; "
                                 f"counted twice: {twice}; progress {progress}") from None
        recovered_secs = time.monotonic() - struck_at
        totals, seen, progress = committed_now()
        assert totals == expected
        assert len(seen) == 2 * SENTENCES
        assert {n for n in seen.values()} == {1}, "a word of a record was counted twice"
        records = expected_records(seen)
        try:
            wait_until(lambda: all(output(rows) == records for rows in sinks.tables().values()),
                       60, "each sink's committed records to equal a failure-free run's")
        except AssertionError:
            differing = {sink: differences(output(rows), records)
                         for sink, rows in sinks.tables().items() if output(rows) != records}
            raise AssertionError(f"after {done}: the sinks' committed records differ from a "
                                 f"failure-free run's: {differing}") from None
        sinks_secs = time.monotonic() - struck_at - recovered_secs
    finally:
        feed.stop.set()
        feed.thread.join()
        cluster.kill_and_wait(name)
        sinks.close()
    if set(faults) & {"worker", "supervisor"}:
        assert progress[2] >= 2, f"no recovery happened ({progress}): the kill tested nothing"
    kafka_note = ""
    if sink_topic is not None:
        extra = len(sinks.records) - len(records[0])
        if not faults:   # record for record: nothing aborted, nothing published twice
            assert extra == 0, (f"a failure-free run wrote {extra} Kafka record(s) more than "
                                f"its inputs (checkpoint progress {progress}: epoch above 1 "
                                f"means a checkpoint was recovered, whose aborted records the "
                                f"mock broker shows)")
        # Aborted or published twice, every record is one a failure-free run writes: its key
        # a record's word, its total one that word reaches (a count too high shows here).
        assert {name for name, _ in sinks.records} == records[0]
        assert {(name.rsplit(":", 1)[1], total) for name, total in sinks.records} == set(
            records[1]), "the Kafka topic holds a total no failure-free run writes"
        kafka_note = f"; Kafka topic: {len(sinks.records)} records, {extra} beyond the table"
    since = "the last fault" if faults else "the feed started"
    print(f"{source} {seed}: {'; '.join(done) or 'no fault'}; exact {recovered_secs:.1f} s "
          f"after {since}, the sinks {sinks_secs:.1f} s later; checkpoint progress "
          f"{progress}{kafka_note}")
