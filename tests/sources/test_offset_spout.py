"""The offset-tracking spout over the local partitioned log, in a real LocalCluster.

Each test reproduces one trap of storm-kafka's PartitionManager (or checks a promise of the
issue) and shows what stormlet does instead. The sink records every value it sees (duplicates
included) and fails or acks according to the test's config.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path

import pytest
import support
from zookeeper_server import ZooKeeperServer, zookeeper_available

from stormlet import Bolt, LocalCluster, TopologyBuilder
from stormlet.failed import read_failed
from stormlet.sources import LogSpout, RetryPolicy
from stormlet.sources.offset_spout import OffsetSpout
from stormlet.sources.offset_store import FileOffsetStore, ZooKeeperOffsetStore
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.sources.source import SourceError

SPOUT_ID = "reader"


class Sink(Bolt):
    """Acks every tuple, except values in ``test.poison`` (always failed) and in
    ``test.fail_times`` (failed that many times first)."""

    outputs = ["value"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.poison = set(conf.get("test.poison", []))
        self.fail_times = dict(conf.get("test.fail_times", {}))
        self.seen: list[str] = []

    def execute(self, tup):
        value = tup["value"]
        self.seen.append(value)
        if value in self.poison:
            self.collector.fail(tup, "poison")
        elif self.fail_times.get(value, 0) > 0:
            self.fail_times[value] -= 1
            self.collector.fail(tup, "not yet")
        else:
            self.collector.ack(tup)


def make_log(path: Path, partitions: int, messages: list[str]) -> PartitionedLog:
    log = PartitionedLog.create(path, partitions)
    for i, value in enumerate(messages):
        log.append(value, partition=i % partitions)
    log.flush()
    return log


def topology_over(spout: OffsetSpout, spout_tasks: int = 2, sinks: int = 2):
    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=spout_tasks)
    builder.set_bolt("sink", Sink(), parallelism=sinks).fields_grouping("source", ["value"])
    return builder.build()


def seen(cluster: LocalCluster, name: str = "test") -> Counter:
    return Counter(v for sink in cluster.instances(name, "sink") for v in sink.seen)


def committed(log_path: Path, spout_id: str = SPOUT_ID) -> dict[int, int]:
    return {p: r["offset"] for p, r in FileOffsetStore(log_path / "_offsets").all()
            .get(spout_id, {}).items()}


def ends(log: PartitionedLog) -> dict[int, int]:
    return {p: log.end_offset(p) for p in range(log.partitions)}


def wait_committed(cluster: LocalCluster, log_path: Path, expected: dict[int, int],
                   timeout: float = 20) -> None:
    cluster.wait_for(lambda: committed(log_path) == expected, timeout=timeout)


def opened_by_hand(path: Path, listed: list[int] | None = None,
                   **options) -> tuple[LogSpout, list]:
    """A spout over the log at ``path``, opened as the one task of its component and driven by
    hand, as its executor thread would drive it; and the list of msg ids it emits. ``listed``:
    the partitions its source lists (default: the log's)."""
    emitted: list = []

    class Collector:
        closed = False

        def emit(self, values, msg_id=None):
            emitted.append(msg_id)

    class Context:
        component_id, task_id, this_task_index, topology_name = "source", 1, 0, "by-hand"

        def get_this_component_tasks(self):
            return [1]

    spout = LogSpout(str(path), spout_id="by-hand", **options)
    if listed is not None:
        setattr(spout.source, "partitions", lambda: listed)   # a method, stood in for
    spout.open({}, Context(), Collector())
    return spout, emitted


FAST = {"topology.message.timeout.secs": 5}


def test_every_message_is_delivered_and_committed_per_partition(tmp_path):
    messages = [f"m{i}" for i in range(2000)]
    log = make_log(tmp_path / "log", 4, messages)
    spout = LogSpout(str(tmp_path / "log"), spout_id=SPOUT_ID, commit_interval=0.2)
    with support.running(topology_over(spout), FAST) as cluster:
        wait_committed(cluster, tmp_path / "log", ends(log))
        assert seen(cluster) == Counter(messages)
        # Partitions are dealt to the two tasks by index; each owns two.
        owned = [sorted(s.partitions) for s in cluster.instances("test", "source")]
        assert sorted(owned) == [[0, 2], [1, 3]]
        metrics = {p: m for s in cluster.instances("test", "source")
                   for p, m in s.partition_metrics().items()}
        assert all(m["lag"] == 0 and m["in_flight"] == 0 and m["acked"] == 500
                   for m in metrics.values())
    record = json.loads((tmp_path / "log" / "_offsets" / SPOUT_ID / "3.json").read_text())
    assert record["offset"] == 500 and record["partition"] == 3
    assert record["topic"] == str((tmp_path / "log").resolve())
    assert record["topology"]["name"] == "test" and record["topology"]["id"].startswith("test-")


def test_a_poison_message_is_dead_lettered_after_its_attempts_and_the_partition_moves_on(tmp_path):
    messages = [f"m{i}" for i in range(200)]
    log = make_log(tmp_path / "log", 2, messages)
    retry = RetryPolicy(initial_delay=0.05, multiplier=2, max_attempts=3)
    spout = LogSpout(str(tmp_path / "log"), spout_id=SPOUT_ID, retry=retry, commit_interval=0.2)
    conf = {**FAST, "test.poison": ["m7"], "test.fail_times": {"m12": 2}}
    with support.running(topology_over(spout), conf) as cluster:
        wait_committed(cluster, tmp_path / "log", ends(log))
        counts = seen(cluster)
        assert counts["m7"] == 3            # three attempts, then no more
        assert counts["m12"] == 3           # failed twice, acked the third time
        assert all(counts[m] == 1 for m in messages if m not in ("m7", "m12"))
        # The commit point passed m7 although it never succeeded.
        assert committed(tmp_path / "log")[7 % 2] == log.end_offset(1)
    records = list(read_failed(tmp_path / "log" / "_failed"))
    assert len(records) == 1
    record = records[0]
    assert record["payload"]["value"] == "m7" and record["attempts"] == 3
    assert record["source"]["partition"] == 1 and record["source"]["offset"] == 3
    assert record["reason"]["kind"] == "fail" and record["reason"]["component"] == "sink"
    assert record["reason"]["message"] == "poison"
    assert record["component"] == "source" and record["topology"] == "test"


def test_due_retries_go_out_while_the_uncommitted_cap_holds_new_fetches(tmp_path):
    """storm-kafka-client (STORM-2343/2549): at maxUncommittedOffsets the spout stopped polling,
    and the failed offset holding the commit back was never fetched again: a deadlock."""
    messages = [f"m{i}" for i in range(300)]
    make_log(tmp_path / "log", 1, messages)
    spout = LogSpout(str(tmp_path / "log"), spout_id=SPOUT_ID, max_uncommitted=20,
                     fetch_max=5, retry=RetryPolicy(initial_delay=0.2, max_attempts=10),
                     commit_interval=0.1)
    conf = {**FAST, "test.fail_times": {"m0": 3}}
    with support.running(topology_over(spout, spout_tasks=1, sinks=1), conf) as cluster:
        # While m0 waits to retry, at most the cap (plus one fetch) gets emitted past it.
        source = cluster.instances("test", "source")[0]
        peaks = [0]

        def all_committed() -> bool:   # watching the uncommitted count meanwhile
            state = source.partitions.get(0)
            if state is not None:
                peaks.append(max(peaks[-1], state.uncommitted()))
            return committed(tmp_path / "log").get(0) == 300

        support.wait_until(all_committed, 20, "offset 300 committed", interval=0.005)
        assert committed(tmp_path / "log") == {0: 300}
        assert seen(cluster)["m0"] == 4
        peak = peaks[-1]
        assert 20 <= peak <= 20 + 5   # the cap was reached (else no deadlock to avoid), and held


def test_a_restart_resumes_from_the_commit_and_a_resubmission_does_not_reread(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 2, [f"a{i}" for i in range(300)])
    topology = topology_over(LogSpout(str(path), spout_id=SPOUT_ID, commit_interval=0.2))
    with LocalCluster() as cluster:
        cluster.submit("test", FAST, topology)
        wait_committed(cluster, path, ends(log))
        first = seen(cluster)
        cluster.kill("test", wait_secs=5)
        for i in range(100):
            log.append(f"b{i}", partition=i % 2)
        log.flush()
        cluster.submit("test", FAST, topology)
        wait_committed(cluster, path, ends(log))
        second = seen(cluster)
        cluster.kill("test", wait_secs=5)
    assert first == Counter(f"a{i}" for i in range(300))
    assert second == Counter(f"b{i}" for i in range(100))


@pytest.mark.parametrize("how", ["first_offset", "config"])
def test_start_over_rereads_from_the_earliest_offset(tmp_path, how):
    path = tmp_path / "log"
    log = make_log(path, 2, [f"a{i}" for i in range(100)])
    kwargs = {"first_offset": "earliest"} if how == "first_offset" else {}
    conf = {**FAST, "offsets.start.over": True} if how == "config" else FAST
    topology = topology_over(LogSpout(str(path), spout_id=SPOUT_ID, commit_interval=0.2,
                                      **kwargs))
    with LocalCluster() as cluster:
        for _ in range(2):
            cluster.submit("test", conf, topology)
            cluster.wait_for(lambda: sum(seen(cluster).values()) >= 100, timeout=20)
            time.sleep(0.3)
            assert seen(cluster) == Counter(f"a{i}" for i in range(100))
            cluster.kill("test", wait_secs=5)
            assert committed(path) == ends(log)


def test_first_offset_latest_reads_only_what_arrives_after_the_start(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 1, [f"old{i}" for i in range(50)])
    spout = LogSpout(str(path), spout_id=SPOUT_ID, first_offset="latest", commit_interval=0.1)
    with support.running(topology_over(spout, 1, 1), FAST) as cluster:
        wait_committed(cluster, path, {0: 50})
        for i in range(20):
            log.append(f"new{i}", partition=0)
        log.flush()
        wait_committed(cluster, path, {0: 70})
        assert seen(cluster) == Counter(f"new{i}" for i in range(20))


def committed_then_truncated(path: Path) -> PartitionedLog:
    """A log whose committed offset (10) lies below what retention has since deleted."""
    log = PartitionedLog.create(path, 1, segment_records=10)
    for i in range(60):
        log.append(f"m{i}", partition=0)
    log.flush()
    FileOffsetStore(path / "_offsets").save(SPOUT_ID, 0, {"offset": 10, "partition": 0})
    log.delete_before(0, 30)
    assert log.start_offset(0) == 30
    return log


@pytest.mark.parametrize("policy,first_seen", [("earliest", "m30"), ("latest", None)])
def test_an_out_of_range_offset_follows_the_policy_and_says_so(tmp_path, caplog, policy,
                                                               first_seen):
    path = tmp_path / "log"
    committed_then_truncated(path)
    spout = LogSpout(str(path), spout_id=SPOUT_ID, out_of_range=policy, commit_interval=0.1)
    with caplog.at_level(logging.WARNING, logger="stormlet.sources.offset_spout"):
        with support.running(topology_over(spout, 1, 1), FAST) as cluster:
            wait_committed(cluster, path, {0: 60})
            counts = seen(cluster)
    if first_seen:
        assert counts == Counter(f"m{i}" for i in range(30, 60))
    else:
        assert counts == Counter()
    skipped = 20 if policy == "earliest" else 50
    assert any("offset 10 is out of range" in r.message and f"{skipped} messages skipped"
               in r.message and repr(policy) in r.message for r in caplog.records)


def test_out_of_range_error_policy_stops_the_partition_and_reports_it(tmp_path):
    path = tmp_path / "log"
    committed_then_truncated(path)
    spout = LogSpout(str(path), spout_id=SPOUT_ID, out_of_range="error", commit_interval=0.1)
    with support.running(topology_over(spout, 1, 1), FAST) as cluster:
        cluster.wait_for(lambda: cluster.errors("test"), timeout=10)
        time.sleep(0.3)
        errors = cluster.errors("test")
        assert len(errors) == 1 and errors[0].component == "source"
        assert "out of range" in errors[0].error and "out_of_range='error'" in errors[0].error
        assert seen(cluster) == Counter()
    assert committed(path) == {0: 10}       # nothing skipped silently


def test_at_most_once_commits_before_emitting_and_never_replays(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 1, [f"m{i}" for i in range(100)])
    spout = LogSpout(str(path), spout_id=SPOUT_ID, guarantee="at_most_once",
                     commit_interval=0.1)
    conf = {**FAST, "test.poison": ["m5"]}
    with support.running(topology_over(spout, 1, 1), conf) as cluster:
        cluster.wait_for(lambda: sum(seen(cluster).values()) == 100, timeout=10)
        time.sleep(0.3)
        assert seen(cluster) == Counter(f"m{i}" for i in range(100))  # m5 not replayed
        assert committed(path) == ends(log)


def bad_translate(record):
    # A value msgpack cannot carry: the emit fails, for message m3 only.
    return [record.partition, record.offset, record.key, 1j if record.value == "m3" else
            record.value]


def test_a_message_that_cannot_be_emitted_is_dead_lettered_not_skipped(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 1, [f"m{i}" for i in range(20)])
    spout = LogSpout(str(path), spout_id=SPOUT_ID, translate=bad_translate, commit_interval=0.1)
    with support.running(topology_over(spout, 1, 1), FAST) as cluster:
        wait_committed(cluster, path, ends(log))
        assert seen(cluster) == Counter(f"m{i}" for i in range(20) if i != 3)
        errors = cluster.errors("test")
        assert len(errors) == 1 and "type complex in field 'value'" in errors[0].error
    [record] = read_failed(path / "_failed")
    assert record["source"]["offset"] == 3 and record["reason"]["kind"] == "error"
    assert "cannot emit it" in record["reason"]["message"]


def test_guarantee_none_emits_untracked_and_commits_what_was_emitted(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 2, [f"m{i}" for i in range(100)])
    spout = LogSpout(str(path), spout_id=SPOUT_ID, guarantee="none", commit_interval=0.1)
    conf = {**FAST, "test.poison": ["m5"]}
    with support.running(topology_over(spout, 1, 1), conf) as cluster:
        wait_committed(cluster, path, ends(log))
        time.sleep(0.3)
        assert seen(cluster) == Counter(f"m{i}" for i in range(100))  # no retries
        source = cluster.instances("test", "source")[0]
        assert all(not s.in_flight for s in source.partitions.values())


def test_lost_partitions_are_committed_first_and_their_late_acks_ignored(tmp_path):
    path = tmp_path / "log"
    make_log(path, 2, [f"m{i}" for i in range(20)])
    # Driven by hand, as its executor thread would, to hold a tuple in flight across the move.
    spout, emitted = opened_by_hand(path, commit_interval=60)
    for _ in range(25):
        spout.next_tuple()
    assert sorted(emitted) == [(p, o) for p in (0, 1) for o in range(10)]
    spout.ack((1, 0))
    spout.ack((1, 1))
    spout._reassign([0])                                  # partition 1 moves elsewhere
    assert committed(path, "by-hand")[1] == 2
    spout.ack((1, 2))                                     # a late ack for the lost partition
    assert spout.late_acks == 1 and sorted(spout.partitions) == [0]
    spout.close()


@pytest.mark.parametrize("trouble", ["earliest", "assign"])
def test_a_move_the_source_cannot_make_changes_nothing_and_is_tried_again(tmp_path, caplog,
                                                                         trouble):
    """A broker away when partition 2 is to be taken up: its start cannot be read (it has no
    commit, so it starts at the earliest offset), or the consumer cannot be re-pointed."""
    path = tmp_path / "log"
    make_log(path, 3, [f"m{i}" for i in range(30)])
    spout, emitted = opened_by_hand(path, commit_interval=60, listed=[0, 1])
    working = getattr(spout.source, trouble)

    def broker_away(*args):
        raise SourceError("the broker is away")

    setattr(spout.source, trouble, broker_away)
    spout.source.partitions = lambda: [0, 2]          # the next listing: 1 gone, 2 new
    spout.next_refresh = spout.next_commit = 0.0
    with caplog.at_level(logging.WARNING, logger="stormlet.sources.offset_spout"):
        spout.next_tuple()                            # the refresh fails, and says why
    assert "cannot move to partitions [0, 2] of" in caplog.text
    assert "the broker is away" in caplog.text
    assert sorted(spout.partitions) == [0, 1]
    for _ in range(30):
        spout.next_tuple()                            # reading goes on as it was
    assert sorted(emitted) == [(p, o) for p in (0, 1) for o in range(10)]
    setattr(spout.source, trouble, working)
    spout.next_refresh = spout.next_commit = 0.0
    spout.next_tuple()                                # the next refresh makes the move
    assert sorted(spout.partitions) == [0, 2]
    for _ in range(30):
        spout.next_tuple()
    assert sorted(o for p, o in emitted if p == 2) == list(range(10))
    spout.close()


@pytest.mark.zookeeper
@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")
def test_commits_go_to_zookeeper_as_json_under_the_spout_id(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 2, [f"m{i}" for i in range(100)])
    with ZooKeeperServer(tmp_path / "zk") as zk:
        store = ZooKeeperOffsetStore(zk.hosts, "/offsets-test")
        spout = LogSpout(str(path), spout_id=SPOUT_ID, offsets=store, commit_interval=0.1)
        with support.running(topology_over(spout), FAST) as cluster:
            reader = ZooKeeperOffsetStore(zk.hosts, "/offsets-test")
            cluster.wait_for(lambda: {p: r["offset"] for p, r in reader.all().get(SPOUT_ID, {})
                                      .items()} == ends(log), timeout=20)
            data, _ = reader.client.get(f"/offsets-test/{SPOUT_ID}/1")
            record = json.loads(data)
            assert set(record) >= {"offset", "partition", "topic", "task", "time", "topology"}
            reader.close()


@pytest.mark.parametrize("kwargs,message", [
    ({"first_offset": "begin"}, "first_offset must be one of"),
    ({"out_of_range": "skip"}, "out_of_range must be one of"),
    ({"guarantee": "exactly_once"}, "guarantee must be one of"),
    ({"max_uncommitted": 0}, "max_uncommitted must be a positive integer"),
    ({"spout_id": "a/b"}, "spout_id must be"),
])
def test_bad_options_are_refused_when_the_spout_is_made(tmp_path, kwargs, message):
    make_log(tmp_path / "log", 1, [])
    options = {"spout_id": SPOUT_ID, **kwargs}
    with pytest.raises(ValueError, match=message):
        LogSpout(str(tmp_path / "log"), **options)


@pytest.mark.zookeeper
@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")
def test_reading_goes_on_while_zookeeper_is_down_and_commits_catch_up(tmp_path):
    path = tmp_path / "log"
    log = make_log(path, 2, [f"a{i}" for i in range(100)])
    with ZooKeeperServer(tmp_path / "zk") as zk:
        spout = LogSpout(str(path), spout_id=SPOUT_ID, commit_interval=0.1,
                         offsets=ZooKeeperOffsetStore(zk.hosts, "/outage"))
        reader = ZooKeeperOffsetStore(zk.hosts, "/outage")

        def zk_committed():
            try:
                return {p: r["offset"] for p, r in reader.all().get(SPOUT_ID, {}).items()}
            except Exception:   # the reader not connected again yet
                return None

        with support.running(topology_over(spout, 1, 1), FAST) as cluster:
            cluster.wait_for(lambda: zk_committed() == ends(log), timeout=20)
            zk.stop(hard=True)
            # Nothing needs ZooKeeper to move tuples: messages that come in the outage are
            # processed in it, also those after the spout has tried (and failed) to commit.
            for batch in range(2):
                for i in range(50 * batch, 50 * batch + 50):
                    log.append(f"b{i}", partition=i % 2)
                log.flush()
                cluster.wait_for(lambda: sum(seen(cluster).values()) == 150 + 50 * batch,
                                 timeout=20)
                time.sleep(1.0)   # ten commit intervals
            assert not cluster.errors("test")
            zk.start()
            cluster.wait_for(lambda: zk_committed() == ends(log), timeout=30)
            assert seen(cluster) == Counter([f"a{i}" for i in range(100)] +
                                            [f"b{i}" for i in range(100)])
        reader.close()


@pytest.mark.zookeeper
def test_a_topology_stops_while_zookeeper_is_away_and_says_what_it_could_not_commit(
        tmp_path, caplog):
    path = tmp_path / "log"
    log = make_log(path, 2, [f"a{i}" for i in range(100)])
    with ZooKeeperServer(tmp_path / "zk") as zk:
        spout = LogSpout(str(path), spout_id=SPOUT_ID, commit_interval=0.1,
                         offsets=ZooKeeperOffsetStore(zk.hosts, "/away"))
        with support.running(topology_over(spout, 1, 1), FAST) as cluster:
            cluster.wait_for(lambda: sum(seen(cluster).values()) == 100, timeout=20)
            zk.stop(hard=True)
            for i in range(10):
                log.append(f"b{i}", partition=i % 2)
            log.flush()
            cluster.wait_for(lambda: sum(seen(cluster).values()) == 110, timeout=20)
            # Killed while ZooKeeper stays down: the spout's last commit must not wait for it
            # (the test timeout would catch a hang here).
            cluster.kill("test", wait_secs=0)
    assert any("cannot commit" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_partition_paused_at_the_cap_resumes_after_a_reassignment_keeps_it(tmp_path):
    """The periodic re-listing reassigns the partitions a task already has; one paused at the
    uncommitted cap must still resume once acks bring it under the cap."""
    path = tmp_path / "log"
    make_log(path, 2, [f"m{i}" for i in range(40)])
    spout, emitted = opened_by_hand(path, commit_interval=60, max_uncommitted=5, fetch_max=1)
    for _ in range(30):
        spout.next_tuple()
    assert max(o for p, o in emitted if p == 0) < 10, "held at the cap"
    spout._reassign([0, 1])
    acked = 0
    for _ in range(20):   # ack what went out, then read on, as acks come back in a topology
        for msg_id in emitted[acked:]:
            spout.ack(msg_id)
        acked = len(emitted)
        for _ in range(10):
            spout.next_tuple()
    assert sorted(o for p, o in emitted if p == 0) == list(range(20)), \
        "partition 0 is read to its end once under the cap again"
    spout.close()


def test_a_damaged_frame_costs_only_its_records_and_shows_in_the_metrics(tmp_path):
    """Issue 50: damage inside a log is set aside, counted as lost in the spout's partition
    metrics, and neither stalls the partition's commits nor hides the records after it."""
    log = PartitionedLog.create(tmp_path / "log", 1)
    for i in range(0, 100, 10):
        log.append_many([f"m{j}" for j in range(i, i + 10)], partition=0)
    log.close()
    segment = tmp_path / "log" / "partition-0" / f"{0:020d}.seg"
    data = bytearray(segment.read_bytes())
    frame_starts, pos = [], 0
    while pos < len(data):
        frame_starts.append(pos)
        pos += int.from_bytes(data[pos:pos + 4], "little") + 12
    data[frame_starts[3] + 40] ^= 0x5A          # inside the frame of offsets 30-39
    segment.write_bytes(bytes(data))

    spout = LogSpout(str(tmp_path / "log"), spout_id=SPOUT_ID, commit_interval=0.2)
    intact = [f"m{i}" for i in [*range(30), *range(40, 100)]]
    with support.running(topology_over(spout, spout_tasks=1), FAST) as cluster:
        wait_committed(cluster, tmp_path / "log", {0: 100})
        assert seen(cluster) == Counter(intact)
        (metrics,) = [s.partition_metrics()[0] for s in cluster.instances("test", "source")]
        assert metrics["lost"] == 10 and metrics["lag"] == 0 and metrics["acked"] == 90


def test_a_call_held_up_by_a_slow_commit_emits_nothing(tmp_path, monkeypatch):
    # Issue 51: a worker's commit blocks when it is cut off from ZooKeeper; by the time it
    # gives up the worker may have been fenced and its task given to another. The call that
    # waited must not emit: the next comes only if its spouts are still active.
    make_log(tmp_path / "log", 1, [f"m{i}" for i in range(10)])
    spout, emitted = opened_by_hand(tmp_path / "log", commit_interval=0.05)
    spout.next_tuple()
    assert len(emitted) == 1
    time.sleep(0.1)   # a commit is due
    housekeeping = spout._housekeeping
    monkeypatch.setattr(spout, "_housekeeping",
                        lambda now: (time.sleep(0.6), housekeeping(now)))
    spout.next_tuple()
    assert len(emitted) == 1, "the call that waited on its commit emitted"
    monkeypatch.setattr(spout, "_housekeeping", housekeeping)
    spout.next_tuple()
    assert len(emitted) == 2
