"""The replay job of the failed-message log (``stormlet replay``), on a real local Spark session.

End to end: a topology whose bolt fails a known subset of messages dead-letters them with their
reasons; replay pushes them back into the local log (or the Kafka topic) the spout reads; the
"fixed" topology, resuming from its commits, processes exactly those messages once; a second
replay writes nothing. Then: de-duplication and payload types, partitioning, a replay killed with
SIGKILL part-way and re-run, and the errors a user sees.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import support
from click.testing import CliRunner
from zookeeper_server import free_port

from stormlet import Bolt, FailReason, TopologyBuilder
from stormlet.cli import main
from stormlet.cli.replay import parse_time
from stormlet.failed import FailedMessageWriter, FailedRecord, SourceRef, final_files, read_failed
from stormlet.sources import KafkaSpout, LogSpout, RetryPolicy
from stormlet.sources.offset_store import FileOffsetStore
from stormlet.sources.partitioned_log import PartitionedLog, partition_for_key
from stormlet.spark.replay import (
    HEADER_KEY,
    HEADER_RUN,
    REPLAYS_DIR,
    ReplayError,
    parse_target,
    replay,
)
from stormlet.spark.session import build_session

ROOT = Path(__file__).resolve().parents[2]
SPOUT_ID = "reader"
FAST = {"topology.message.timeout.secs": 5}
RETRY = RetryPolicy(initial_delay=0.05, max_attempts=2)


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every test here (starting one costs ~5 s); ``replay`` uses
    the active session."""
    session = build_session("stormlet-replay-tests", "local[2]")
    yield session
    session.stop()


def test_the_jobs_python_workers_run_the_installed_pyspark_not_sparks_zip(spark):
    def where(_):
        import pyspark.worker
        return [pyspark.worker.__file__]

    files = spark.sparkContext.parallelize([0, 1], 2).flatMap(where).collect()
    assert files and all(".zip" not in f and f.endswith("worker.py") for f in files), files


# ----- a topology whose bolt fails a known subset, until it is "fixed"


def number(value) -> int:
    return int((value.decode() if isinstance(value, bytes) else value)[1:])


class Flaky(Bolt):
    """Raises on m3, m13, ... (reason ``error``) and fails m7, m17, ... (reason ``fail``), unless
    the topology config says ``test.fixed``; records each value it acks."""

    outputs = ["value"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.fixed = conf.get("test.fixed", False)
        self.processed: list = []

    def execute(self, tup):
        value = tup["value"]
        if not self.fixed and number(value) % 10 == 3:
            raise ValueError(f"cannot parse {value!r}")
        if not self.fixed and number(value) % 10 == 7:
            self.collector.fail(tup, "rejected")
            return
        self.processed.append(value)
        self.collector.ack(tup)


def flaky_topology(spout):
    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=2)
    builder.set_bolt("sink", Flaky(), parallelism=2).shuffle_grouping("source")
    return builder.build()


def processed(cluster) -> Counter:
    return Counter(v for sink in cluster.instances("test", "sink") for v in sink.processed)


def bad(values) -> list:
    return [v for v in values if number(v) % 10 in (3, 7)]


def part(value) -> int:
    """The partition a test message is written to: blocks of ten, so each holds bad ones."""
    return number(value) // 10 % 2


def log_commits(log_path: Path) -> dict[int, int]:
    return {p: r["offset"] for p, r in FileOffsetStore(log_path / "_offsets").all()
            .get(SPOUT_ID, {}).items()}


def ends(log: PartitionedLog) -> dict[int, int]:
    return {p: log.end_offset(p) for p in range(log.partitions)}


def run_log_topology(log_path: Path, log: PartitionedLog, fixed: bool) -> Counter:
    spout = LogSpout(str(log_path), spout_id=SPOUT_ID, retry=RETRY, commit_interval=0.2)
    with support.running(flaky_topology(spout), {**FAST, "test.fixed": fixed}) as cluster:
        cluster.wait_for(lambda: log_commits(log_path) == ends(log), timeout=30)
        return processed(cluster)


def test_end_to_end_through_the_local_log(spark, tmp_path):
    path = tmp_path / "events"
    values = [f"m{i}" for i in range(200)]
    log = PartitionedLog.create(path, 2)
    for i, value in enumerate(values):
        log.append(value, key=f"k{i}", partition=part(value))
    log.flush()
    failed_dir = path / "_failed"

    first = run_log_topology(path, log, fixed=False)
    assert first == Counter(v for v in values if v not in bad(values))
    records = list(read_failed(failed_dir))
    assert sorted(r["payload"]["value"] for r in records) == sorted(bad(values))
    reasons = {r["payload"]["value"]: r["reason"] for r in records}
    assert reasons["m3"]["kind"] == "error" and "cannot parse 'm3'" in reasons["m3"]["message"]
    assert reasons["m7"] == {"kind": "fail", "component": "sink", "message": "rejected"}

    # Dry run, through the CLI: counts by reason and component, nothing written.
    before = ends(log)
    result = CliRunner().invoke(main, ["replay", "--failed-dir", str(failed_dir), "--to",
                                       f"log:{path}", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "dry run: would replay 40 messages" in result.output
    # What it did, stage by stage (on stderr, which the runner mixes in).
    assert re.search(r"^planning: reading \d+ files \([\d.]+ MB\) of the failed-message log$",
                     result.output, re.M), result.output
    assert "planned: 40 messages to write, of 40 matching records, in " in result.output
    # Counted by topology and component: the spout's 40, 20 failed and 20 errors ("test" alone
    # is in any output here: it is in the temporary directory's name).
    rows = [line.split() for line in result.output.splitlines()]
    header = next(row for row in rows if row[:2] == ["topology", "component"])
    counts = [dict(zip(header, row)) for row in rows if row[:2] == ["test", "source"]]
    assert [(c["fail"], c["error"], c["total"]) for c in counts] == [("20", "20", "40")], \
        result.output
    assert ends(log) == before and not (failed_dir / REPLAYS_DIR).exists()

    summary = replay(failed_dir, f"log:{path}", chunk_size=15)
    assert summary.planned == summary.written == 40
    assert summary.by_reason() == {"error": 20, "fail": 20}
    assert summary.by_component() == {("test", "source"): 40}
    # Each message went back to the partition it came from, with its key.
    for p in range(2):
        again = log.read(p, before[p], 100)
        assert [(r.key, r.value) for r in again] == [
            (f"k{number(v)}", v) for v in bad(values) if part(v) == p]

    second = run_log_topology(path, log, fixed=True)
    assert second == Counter(bad(values))                      # exactly the replayed ones, once
    assert first + second == Counter(values)                   # every message processed once
    assert len(list(read_failed(failed_dir))) == 40            # nothing failed again

    # Nothing new: the files the first run planned from are not read again (no Spark job).
    again = replay(failed_dir, f"log:{path}")
    assert again.planned == again.written == 0 and again.matched == 0
    assert (again.files, again.skipped_files) == (0, len(final_files(failed_dir)))
    assert again.run is None and ends(log) == {0: 120, 1: 120}

    # A new file is read, and a message in it that the first run replayed is not replayed again.
    old = next(read_failed(failed_dir))
    with FailedMessageWriter(failed_dir, "test", "source", 9) as writer:
        writer.write(FailedRecord(message_id=old["message_id"], reason=FailReason("fail"),
                                  attempts=1, first_failed_at=1.0, last_failed_at=2.0,
                                  key=old["payload"]["key"], value=old["payload"]["value"],
                                  source=old["source"]))
    again = replay(failed_dir, f"log:{path}")
    assert (again.files, again.matched, again.replayed_before, again.planned) == (1, 1, 1, 0)
    assert ends(log) == {0: 120, 1: 120}


def test_end_to_end_through_kafka(spark, mock_kafka, tmp_path):
    topic = "replay-e2e"
    mock_kafka.create_topic(topic, 2)
    values = [f"m{i}" for i in range(100)]
    for p in range(2):
        mock_kafka.produce(topic, [v for v in values if part(v) == p], partition=p)
    store = FileOffsetStore(tmp_path / "offsets")
    failed_dir = tmp_path / "failed"

    def run(fixed: bool, expected_commits: dict[int, int]) -> Counter:
        spout = KafkaSpout(mock_kafka.bootstrap_servers, topic, spout_id=SPOUT_ID, offsets=store,
                           retry=RETRY, commit_interval=0.2, failed_dir=str(failed_dir))
        with support.running(flaky_topology(spout), {**FAST, "test.fixed": fixed}) as cluster:
            cluster.wait_for(lambda: {p: r["offset"] for p, r in
                                      store.all().get(SPOUT_ID, {}).items()} == expected_commits,
                             timeout=30)
            return processed(cluster)

    first = run(False, {0: 50, 1: 50})
    encoded = [v.encode() for v in values]
    assert first == Counter(v for v in encoded if v not in bad(encoded))
    records = list(read_failed(failed_dir))
    assert sorted(r["payload"]["value"] for r in records) == sorted(bad(encoded))
    assert {r["source"]["kind"] for r in records} == {"kafka"}

    target = f"kafka://{mock_kafka.bootstrap_servers}/{topic}"
    summary = replay(failed_dir, target, reason="error")
    assert summary.written == 10 and summary.by_reason() == {"error": 10}
    summary = replay(failed_dir, target)
    assert summary.written == 10 and summary.replayed_before == 10
    assert summary.by_reason() == {"fail": 10}

    second = run(True, {0: 60, 1: 60})   # 10 replayed messages came back to each partition
    assert second == Counter(bad(encoded))
    assert first + second == Counter(encoded)
    assert replay(failed_dir, target).written == 0


# ----- which record wins, what is written


def write_records(failed_dir: Path, records: list[FailedRecord], topology="t",
                  component="source") -> None:
    with FailedMessageWriter(failed_dir, topology, component, 1) as writer:
        for record in records:
            writer.write(record)


def rec(message_id, value, *, key=None, source=None, last=10.0, kind="error",
        first=1.0) -> FailedRecord:
    return FailedRecord(message_id=message_id, reason=FailReason(kind, "sink", "x"), attempts=2,
                        first_failed_at=first, last_failed_at=last, key=key, value=value,
                        source=source)


def test_planning_reports_its_spark_stages_as_it_goes(spark, tmp_path, monkeypatch):
    from stormlet.spark.replay import PlanProgress
    from stormlet.spark.replay import job as replay_job

    monkeypatch.setattr(replay_job, "PROGRESS_INTERVAL", 0.02)
    write_records(tmp_path / "failed", [rec(i, f"v{i}") for i in range(50)])
    PartitionedLog.create(tmp_path / "log", 2)
    seen: list = []
    summary = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}", progress=seen.append)
    stages = [p.stage for p in seen if isinstance(p, PlanProgress)]
    assert stages[0] == "planning" and stages[-1] == "planned" and "running" in stages
    running = [p.detail for p in seen if isinstance(p, PlanProgress) and p.stage == "running"]
    assert all(f"planning run {summary.run.run_id}" in d for d in running), running
    assert any("Spark stage" in d and "partitions done" in d for d in running), running


def test_the_planning_tally_counts_what_the_tasks_read_matched_and_planned(spark, tmp_path):
    from stormlet.spark.replay.plan import PlanTally, plan
    from stormlet.spark.replay.targets import parse_target

    write_records(tmp_path / "failed", [rec(i, f"v{i}", kind="error" if i % 3 else "timeout")
                                        for i in range(30)])
    write_records(tmp_path / "failed", [rec(i, f"v{i} again", last=20) for i in range(5)])
    tally = PlanTally(spark)
    assert tally.so_far() == ""
    counts = plan(spark, final_files(tmp_path / "failed"), {"reason": "error"}, [],
                  parse_target(f"log:{tmp_path}"), 2, "source", tmp_path / "plan", tally)
    # 35 records, 25 of reason error: 20 of the first 30 and the 5 later copies, of which
    # those of ids 0 and 3 are the only ones of their message that match: 22 messages.
    assert (counts.matched, counts.status["replay"]) == (25, 22)
    assert tally.so_far() == "records read 35, matched 25; messages planned 22"


def test_latest_attempt_wins_types_are_kept_and_ids_compare_as_json(spark, tmp_path):
    log = PartitionedLog.create(tmp_path / "log", 3)
    name = str(log.path.resolve())

    def src(p, o):
        return SourceRef(kind="log", name=name, partition=p, offset=o)

    write_records(tmp_path / "failed", [
        rec([0, 5], "old", key="k", source=src(0, 5), last=10),
        rec([0, 5], b"newer", key=b"k", source=src(0, 5), last=20),     # same offset: wins
        rec([2, 1], b"\x00\xffraw", key=None, source=src(2, 1)),
        rec([1, 9], '{"base64": "aGk="}', key='{"base64": "aGk="}', source=src(1, 9)),
        rec("42", "str id"), rec(42, "int id", last=5), rec(42, "int id later", last=6),
        rec([1, 2], {"not": "replayable"}, source=src(1, 2)),
    ])
    write_records(tmp_path / "failed", [rec([0, 5], "other topology, same message", last=15,
                                            source=src(0, 5))], topology="u")
    summary = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}", chunk_size=2)
    assert (summary.matched, summary.duplicates, summary.unreplayable) == (9, 3, 1)
    assert summary.planned == summary.written == 5
    found = {(p, r.key, r.value) for p in range(3) for r in log.read(p, 0)}
    assert {(0, b"k", b"newer"), (2, None, b"\x00\xffraw"),
            (1, '{"base64": "aGk="}', '{"base64": "aGk="}')} <= found
    assert {v for _, _, v in found if isinstance(v, str)} == {
        '{"base64": "aGk="}', "int id later", "str id"}
    assert len(found) == 5


def test_a_later_write_breaks_a_tie_and_messages_without_a_source_go_first(spark, tmp_path):
    log = PartitionedLog.create(tmp_path / "log", 1)
    name = str(log.path.resolve())

    def src(o):
        return SourceRef(kind="log", name=name, partition=0, offset=o)

    write_records(tmp_path / "failed", [
        rec([0, 2], "older write", source=src(2), last=7), rec([0, 0], "offset 0", source=src(0)),
        rec("m-b", "id m-b"), rec([0, 1], "offset 1", source=src(1))])
    write_records(tmp_path / "failed", [
        rec([0, 2], "newer write", source=src(2), last=7), rec("m-a", "id m-a")])
    summary = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}")
    assert (summary.matched, summary.duplicates, summary.planned) == (6, 1, 5)
    # In the plan's order: messages without a source (by id's JSON), then by source offset.
    assert [r.value for r in log.read(0, 0)] == [
        "id m-a", "id m-b", "offset 0", "offset 1", "newer write"]


def test_a_target_of_more_partitions_than_planning_tasks_gets_each_in_order(spark, tmp_path):
    log = PartitionedLog.create(tmp_path / "log", 21)       # local[2]: 8 planning tasks
    name = str(log.path.resolve())
    write_records(tmp_path / "failed", [
        rec([o % 21, o], f"p{o % 21} o{o}", source=SourceRef(kind="log", name=name,
                                                            partition=o % 21, offset=o))
        for o in reversed(range(105))])
    assert replay(tmp_path / "failed", f"log:{tmp_path / 'log'}").written == 105
    for p in range(21):
        assert [r.value for r in log.read(p, 0)] == [f"p{p} o{o}" for o in range(p, 105, 21)]


def test_plans_of_the_json_lines_era_still_count_as_replayed(spark, tmp_path):
    import pyarrow.parquet as pq

    log = PartitionedLog.create(tmp_path / "log", 2)
    name = str(log.path.resolve())
    src = SourceRef(kind="log", name=name, partition=1, offset=4)
    write_records(tmp_path / "failed", [rec([1, 4], "once", source=src), rec("x", "x")])
    first = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}")
    assert first.written == 2
    # Rewrite its plan as replays wrote it before the log was Parquet: Spark's JSON lines, in
    # files named by Spark, and a run.json that does not say how many partitions it went to.
    run_dir = tmp_path / "failed" / REPLAYS_DIR / first.run.run_id
    meta = json.loads((run_dir / "run.json").read_text())
    del meta["partitions"]
    (run_dir / "run.json").write_text(json.dumps(meta))
    plan_dir = run_dir / "plan"
    rows = [row for f in sorted(plan_dir.glob("part-*.parquet"))
            for row in pq.read_table(f).to_pylist()]
    for f in plan_dir.glob("part-*.parquet"):
        f.unlink()
    (plan_dir / "part-00000-legacy.json").write_text("".join(
        json.dumps({k: v for k, v in row.items() if v is not None}) + "\n" for row in rows))
    write_records(tmp_path / "failed", [rec([1, 4], "again", source=src, last=50),
                                        rec("y", "new")])
    again = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}")
    assert (again.matched, again.replayed_before, again.written) == (2, 1, 1)


def test_a_message_identity_reads_as_spark_to_json_wrote_it(spark):
    """Plans written by earlier versions hold identities made by Spark's ``to_json``; the text
    made now must be the same, byte for byte, for strings JSON must escape."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from stormlet.spark.replay.plan_tasks import dedup_keys

    names = ["plain", 'quo"te', "back\\slash", "new\nline\ttab", "ctl\x01\x1f\x7f",
             "ünïcödé ✓ 𝄞", "sl/ash", "\\u0041 not an escape", ""]
    rows = [(n, n[::-1], i, 10 ** 12 + i) for i, n in enumerate(names)]
    df = spark.createDataFrame(rows, "kind STRING, name STRING, p INT, o BIGINT")

    def spark_json(*cols):  # what replays before Arrow planning did: to_json, then the numbers
        text = F.to_json(F.array(*cols))
        return F.left(text, F.length(text) - 1)

    spark_source = [r[0] + f",{p},{o}]" for r, (_, _, p, o) in zip(
        df.select(spark_json(F.lit("source"), "kind", "name")).collect(), rows)]
    spark_message = [r[0] + ',"id"]' for r in
                     df.select(spark_json(F.lit("message"), "kind", "name")).collect()]
    none = pa.nulls(len(rows), pa.string())
    by_source = pa.table({
        "src_kind": [r[0] for r in rows], "src_name": [r[1] for r in rows],
        "src_partition": pa.array([r[2] for r in rows], pa.int32()),
        "src_offset": pa.array([r[3] for r in rows], pa.int64()),
        "msg_topology": none, "msg_component": none, "msg_id": none})
    by_message = pa.table({
        "src_kind": none, "src_name": none, "src_partition": pa.nulls(len(rows), pa.int32()),
        "src_offset": pa.nulls(len(rows), pa.int64()),
        "msg_topology": [r[0] for r in rows], "msg_component": [r[1] for r in rows],
        "msg_id": ['"id"'] * len(rows)})
    assert dedup_keys(by_source).to_pylist() == spark_source
    assert dedup_keys(by_message).to_pylist() == spark_message


def test_filters_and_partitioning_by_key(spark, tmp_path):
    other = SourceRef(kind="log", name="/elsewhere", partition=7, offset=0)
    write_records(tmp_path / "failed", [
        rec(i, f"v{i}", key=f"user-{i}", last=100.0 + i, kind="error" if i % 2 else "timeout",
            source={**other, "offset": i})
        for i in range(20)])
    write_records(tmp_path / "failed", [rec(99, "other component")], component="other")
    log = PartitionedLog.create(tmp_path / "log", 4)
    preview = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}", reason="error",
                     since=105, until=115, dry_run=True)
    assert preview.planned == 5 and preview.by_reason() == {"error": 5}      # 105 .. 113, odd
    assert not (tmp_path / "failed" / REPLAYS_DIR).exists()
    summary = replay(tmp_path / "failed", f"log:{tmp_path / 'log'}", component="source")
    assert summary.written == 20
    # Not from this log: partition 7 means nothing here, so each goes by its key.
    for p in range(4):
        for r in log.read(p, 0):
            assert partition_for_key(r.key, 4) == p
    assert replay(tmp_path / "failed", f"log:{tmp_path / 'log'}").written == 1


# ----- crash safety


CRASHING_REPLAY = """
import os, signal, sys
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.spark.replay import replay

original = PartitionedLog.append_many
calls = 0

def append_then_die(self, values, keys=None, partition=None):
    # The fourth chunk (the first of the second partition written): another writer slips a
    # message in, half the chunk lands, then kill -9.
    global calls
    calls += 1
    if calls < 4:
        return original(self, values, keys, partition)
    original(PartitionedLog(self.path), ["foreign before"], None, partition)
    half = len(values) // 2
    original(self, values[:half], keys[:half] if keys else None, partition)
    self.flush()
    os.kill(os.getpid(), signal.SIGKILL)

PartitionedLog.append_many = append_then_die
replay(sys.argv[1], sys.argv[2])
"""


class Died(Exception):
    """Stands for a crash of the replaying process."""


def die(*args, **kwargs):
    raise Died()


def test_a_replay_killed_part_way_finishes_on_rerun_without_duplicates(spark, tmp_path,
                                                                        monkeypatch):
    from stormlet.spark.replay import job as replay_job

    log = PartitionedLog.create(tmp_path / "log", 2)
    name = str(log.path.resolve())
    write_records(tmp_path / "failed", [
        rec([i % 2, i], f"m{i}", key=f"k{i}",
            source=SourceRef(kind="log", name=name, partition=i % 2, offset=i))
        for i in range(3000)])
    target = f"log:{tmp_path / 'log'}"
    # First attempt: dies once its plan is complete, before writing anything.
    with monkeypatch.context() as patch:
        patch.setattr(replay_job, "write_run", die)
        with pytest.raises(Died):
            replay(tmp_path / "failed", target, chunk_size=500)
    assert ends(log) == {0: 0, 1: 0}
    # Second attempt, in a process killed with SIGKILL half-way through its fourth chunk. (It
    # finishes the planned run first, so it never needs a Spark session of its own.)
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(CRASHING_REPLAY))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "failed"), target],
                          check=False, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    [run_dir] = [p for p in (tmp_path / "failed" / REPLAYS_DIR).iterdir() if p.is_dir()]
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert [(e["chunk"], e["state"]) for e in journal][-2:] == [(2, "done"), (3, "start")]
    assert not (run_dir / "summary.json").exists()
    # One partition's 1500 messages were chunks 0-2; chunk 3, the other's first, half landed.
    [half] = [p for p, end in ends(log).items() if end == 251]
    assert ends(log)[1 - half] == 1500
    log.append("foreign after", partition=half)
    # A third attempt dies too, after 100 more messages of that chunk landed, and another
    # writer appends again: the landed part no longer adjoins the rest.
    from stormlet.spark.replay import targets
    original_write = targets.LogTarget.write

    def write_some_then_die(self, partition, messages, run_id):
        original_write(self, partition, messages[:100], run_id)
        self.flush()
        raise Died()

    with monkeypatch.context() as patch:
        patch.setattr(targets.LogTarget, "write", write_some_then_die)
        with pytest.raises(Died):
            replay(tmp_path / "failed", target)
    log.append("foreign again", partition=half)
    # And a run that died while Spark wrote its plan: no run.json, so it wrote nothing.
    debris = tmp_path / "failed" / REPLAYS_DIR / "20000101T000000Z-000000"
    (debris / "plan").mkdir(parents=True)
    (debris / "plan" / "part-00000.json").write_text('{"partition": 0}\n')

    summary = replay(tmp_path / "failed", target)
    assert not debris.exists()
    assert summary.planned == 0 and summary.run is None
    [resumed] = summary.resumed
    assert (resumed.planned, resumed.written, resumed.already_landed) == (3000, 1150, 350)
    values = Counter(r.value for p in range(2) for r in log.read(p, 0, 10_000))
    assert values == Counter([f"m{i}" for i in range(3000)] +
                             ["foreign before", "foreign after", "foreign again"])
    # Each partition holds its messages in their source order.
    for p in range(2):
        order = [r.value for r in log.read(p, 0, 10_000) if r.value.startswith("m")]
        assert order == [f"m{i}" for i in range(p, 3000, 2)]
    assert (run_dir / "summary.json").exists()
    assert replay(tmp_path / "failed", target).written == 0


def test_a_kafka_replay_interrupted_part_way_finishes_by_its_headers(spark, mock_kafka, tmp_path,
                                                                      monkeypatch):
    from confluent_kafka import Consumer, TopicPartition

    from stormlet.spark.replay.targets import KafkaTarget

    topic = "replay-crash"
    mock_kafka.create_topic(topic, 1)
    write_records(tmp_path / "failed", [
        rec([0, i], f"m{i}".encode(), source=SourceRef(kind="kafka", name=topic, partition=0,
                                                       offset=i))
        for i in range(300)])
    original = KafkaTarget.write
    calls = []

    def write_half_then_crash(self, partition, messages, run_id):
        calls.append(len(messages))
        if len(calls) == 2:
            original(self, partition, messages[:40], run_id)
            self.flush()
            raise KeyboardInterrupt("simulated crash")
        original(self, partition, messages, run_id)

    monkeypatch.setattr(KafkaTarget, "write", write_half_then_crash)
    target = f"kafka://{mock_kafka.bootstrap_servers}/{topic}"
    with pytest.raises(KeyboardInterrupt):
        replay(tmp_path / "failed", target, chunk_size=100)
    monkeypatch.setattr(KafkaTarget, "write", original)
    summary = replay(tmp_path / "failed", target)
    [resumed] = summary.resumed
    assert (resumed.written, resumed.already_landed) == (160, 40)

    consumer = Consumer({"bootstrap.servers": mock_kafka.bootstrap_servers, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    while len(got) < 300:
        got += [m for m in consumer.consume(500, 1.0) if m.error() is None]
    consumer.close()
    assert Counter(m.value() for m in got) == Counter(f"m{i}".encode() for i in range(300))
    headers = dict(got[0].headers())
    assert headers[HEADER_RUN] == resumed.run_id.encode()
    assert json.loads(headers[HEADER_KEY]) == ["source", "kafka", topic, 0, 0]


# ----- what the user sees when something is wrong


@pytest.mark.parametrize("args, message", [
    (["--failed-dir", "{tmp}/nowhere", "--to", "log:{tmp}/log"], "does not exist"),
    (["--failed-dir", "{tmp}/file", "--to", "log:{tmp}/log"], "is not a directory"),
    (["--failed-dir", "{tmp}/failed", "--to", "log:{tmp}/missing"], "no log at"),
    (["--failed-dir", "{tmp}/failed", "--to", "kafka://127.0.0.1:{port}/t", "--timeout", "1"],
     "is the broker running and reachable?"),
])
def test_errors_exit_non_zero_with_one_clear_line_and_write_nothing(tmp_path, args, message):
    write_records(tmp_path / "failed", [rec(1, "v")])
    PartitionedLog.create(tmp_path / "log", 1)
    (tmp_path / "file").write_text("")
    args = [a.format(tmp=tmp_path, port=free_port()) for a in args]
    result = CliRunner().invoke(main, ["replay", *args])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], lines
    assert not (tmp_path / "failed" / REPLAYS_DIR).exists()
    assert PartitionedLog(tmp_path / "log").end_offset(0) == 0


def test_files_of_the_first_format_are_refused_until_converted(tmp_path):
    write_records(tmp_path / "failed", [rec(1, "v")])
    (parquet,) = final_files(tmp_path / "failed")
    legacy = parquet.with_name("old-1-20240101T000000.000Z-abcdef-000001.jsonl")
    legacy.write_bytes(b"")
    PartitionedLog.create(tmp_path / "log", 1)
    args = ["replay", "--failed-dir", str(tmp_path / "failed"), "--to", f"log:{tmp_path}/log"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "1 files of the failed-message log are in the JSON Lines format" in result.output
    assert f"stormlet failed convert --failed-dir {tmp_path / 'failed'}" in result.output
    assert not (tmp_path / "failed" / REPLAYS_DIR).exists()


@pytest.mark.parametrize("args, message", [
    (["--to", "logs:/x"], "is not a target"),
    (["--to", "kafka://broker/topic"], "expected kafka://HOST:PORT"),
    (["--to", "log:/x", "--since", "yesterday"], "is not a time"),
])
def test_bad_arguments_are_usage_errors(tmp_path, args, message):
    result = CliRunner().invoke(main, ["replay", "--failed-dir", str(tmp_path), *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_targets_and_times_parse():
    assert str(parse_target("log:data/x")) == f"log:{os.path.abspath('data/x')}"
    spec = parse_target("kafka://a:9092,b:9093/orders.v1")
    assert (spec.location, spec.topic) == ("a:9092,b:9093", "orders.v1")
    assert parse_time("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_time("1970-01-02") == 86400.0
    assert parse_time("1970-01-01T01:00:00+01:00") == 0.0
    assert parse_time("12.5") == 12.5


def test_an_unfinished_run_to_another_target_must_be_finished_first(tmp_path):
    run = tmp_path / "failed" / REPLAYS_DIR / "20240101T000000Z-abcdef"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"target": "log:/somewhere/else", "planned": 1}))
    write_records(tmp_path / "failed", [rec(1, "v")])
    PartitionedLog.create(tmp_path / "log", 1)
    with pytest.raises(ReplayError, match="did not finish; finish it first.*log:/somewhere/else"):
        replay(tmp_path / "failed", f"log:{tmp_path / 'log'}")
