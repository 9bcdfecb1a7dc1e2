"""`stormlet backfill`: a topology's bolts over a dataset in Spark give what streaming gives.

Each equality test runs the topology in a LocalCluster with a collecting bolt added after the
bolts whose output is compared, runs the backfill over the same messages in one shared local
Spark session, and compares what those bolts emitted, as multisets. The plan, the input checks,
the record formats and the runners are tested first without Spark (no SparkSession, no pyspark).
"""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from stormlet import Bolt, LocalCluster, TopologyBuilder
from stormlet.cli import main
from stormlet.loader import load_topology_file
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.spark.backfill import Backfill, BackfillError, InputOptions

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "topologies" / "word_count.py"
LOG_WORD_COUNT = ROOT / "topologies" / "log_word_count.py"


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from stormlet.spark.session import build_session

    existing = SparkSession.getActiveSession()
    session = existing or build_session("stormlet-backfill-tests", "local[2]",
                                        {"spark.ui.showConsoleProgress": "false"})
    yield session
    if existing is None:
        session.stop()


# ----- streaming, with what chosen bolts emit collected


class Collect(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = []

    def execute(self, tup):
        self.seen.append((tup.source_component, tup.stream, tuple(tup.values)))
        self.collector.ack(tup)


def with_collector(topology, taps):
    """The same topology plus a bolt collecting the (component, stream)s in ``taps``. Its id
    sorts last, so every other component keeps its task ids."""
    builder = TopologyBuilder()
    for spec in topology.components.values():
        add = builder.set_spout if spec.is_spout else builder.set_bolt
        declarer = add(spec.id, spec.obj, spec.parallelism).add_configurations(spec.config)
        if spec.num_tasks is not None:
            declarer.set_num_tasks(spec.num_tasks)
        for sub in spec.inputs:
            kind = sub.grouping.kind
            if kind in ("fields", "partial_key"):
                getattr(declarer, f"{kind}_grouping")(sub.source, list(sub.grouping.fields),
                                                      sub.stream)
            elif kind == "custom":
                declarer.custom_grouping(sub.source, sub.grouping.custom, sub.stream)
            else:
                getattr(declarer, f"{kind}_grouping")(sub.source, sub.stream)
    collect = builder.set_bolt("zz_collect", Collect())
    for component, stream in taps:
        collect.global_grouping(component, stream)
    return builder.build()


def stream_topology(file, conf, taps, spout, messages):
    """Run ``file`` until ``spout`` has had ``messages`` acked; what ``taps`` emitted, per
    (component, stream), as Counters of value tuples."""
    topology, file_conf = load_topology_file(file)
    conf = {**file_conf, **conf}
    with LocalCluster() as cluster:
        cluster.submit("stream", conf, with_collector(topology, taps))
        cluster.wait_for(lambda: cluster.metrics("stream")[spout]["acked"] >= messages,
                         timeout=60)
        seen = [item for bolt in cluster.instances("stream", "zz_collect") for item in bolt.seen]
        report = cluster.kill("stream", wait_secs=5)
    assert report.metrics[spout]["acked"] == messages
    assert report.metrics[spout]["failed"] == 0
    found = {tap: Counter() for tap in taps}
    for component, stream, values in seen:
        found[(component, stream)][values] += 1
    return found


def read_output(path, fields):
    """The JSON Lines under ``path`` as a Counter of value tuples in ``fields`` order."""
    found = Counter()
    for part in sorted(Path(path).glob("part-*")):
        for line in part.read_text().splitlines():
            obj = json.loads(line)
            assert list(obj) == fields
            found[tuple(obj[f] for f in fields)] += 1
    return found


def final_counts(pairs):
    counts = {}
    for (word, n), times in pairs.items():
        assert times == 1
        counts[word] = max(counts.get(word, 0), n)
    return counts


# ----- equality with streaming


def test_word_count_backfill_equals_streaming(spark, tmp_path):
    load_topology_file(WORD_COUNT)
    example = sys.modules["stormlet_topology_word_count"]
    CORPUS, expected_counts = example.CORPUS, example.expected_counts   # noqa: N806
    repeats = 500    # per spout task; the spout has 2
    stream_dir, batch_dir = tmp_path / "stream-counts", tmp_path / "batch-counts"
    streamed = stream_topology(WORD_COUNT, {"wordcount.repeats": repeats,
                                            "wordcount.output.dir": str(stream_dir)},
                               [("count", "default")], "sentences", 2 * repeats * len(CORPUS))

    lines = [CORPUS[i % len(CORPUS)] for i in range(2 * repeats * len(CORPUS))]
    random.Random(7).shuffle(lines)
    (tmp_path / "sentences.txt").write_text("\n".join(lines) + "\n")
    job = Backfill(WORD_COUNT, InputOptions(str(tmp_path / "sentences.txt")),
                   conf={"wordcount.output.dir": str(batch_dir)})
    result = job.run(spark, str(tmp_path / "out"))

    batch = read_output(tmp_path / "out", ["word", "count"])
    assert batch == streamed[("count", "default")]          # every (word, n) emitted, once
    assert final_counts(batch) == dict(expected_counts(2, repeats))
    # Each count task kept the same words as its streaming twin, under the same task id: the
    # fields grouping hashed each word to the same task index.
    stream_files = {p.name: json.loads(p.read_text()) for p in stream_dir.iterdir()}
    batch_files = {p.name: json.loads(p.read_text()) for p in batch_dir.iterdir()}
    assert len(stream_files) == 2 and batch_files == stream_files

    words = sum(expected_counts(2, repeats).values())
    assert result.messages == len(lines)
    assert result.components["split"]["executed"] == len(lines)
    assert result.components["split"]["acked"] == len(lines)
    assert result.components["count"]["executed"] == words
    assert result.components["count"]["tasks"] == 2
    assert result.errors == result.failed == result.bad_input == 0
    assert [(o.component, o.stream, o.tuples) for o in result.outputs] == \
        [("count", "default", words)]


def test_log_word_count_backfill_from_a_partitioned_log_equals_streaming(spark, tmp_path):
    rng = random.Random(3)
    vocabulary = ["Storm", "spark", "Bolt", "spout", "tuple", "ACK", "stream", "log", "word"]
    sentences = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 7)))
                 for _ in range(1500)]
    path = tmp_path / "sentences"
    with PartitionedLog.create(path, 4) as plog:
        plog.append_many(sentences)
    streamed = stream_topology(LOG_WORD_COUNT, {"sentences.log": str(path),
                                                "offsets.start.over": True},
                               [("count", "default")], "sentences", len(sentences))

    job = Backfill(LOG_WORD_COUNT, InputOptions(str(path)))
    assert job.input.kind == "log"
    result = job.run(spark, str(tmp_path / "out"))
    assert read_output(tmp_path / "out", ["word", "count"]) == streamed[("count", "default")]
    assert result.messages == len(sentences)
    assert result.components["sentences"]["partitions"] == 4   # one per log partition


STAGES = '''
"""Purchases: parse lines (rejecting bad ones), keep running totals per user, track each user's
best total in one task, and audit every reject in every audit task."""
from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder


class Lines(Spout):
    outputs = ["line"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.lines = [line for line in open(conf["purchases.file"]).read().splitlines()
                      if context.this_task_index == 0]
        self.next = 0

    def next_tuple(self):
        if self.next < len(self.lines):
            self.collector.emit([self.lines[self.next]], msg_id=self.next)
            self.next += 1


class Parse(BasicBolt):
    outputs = {"default": ["user", "amount"], "rejects": ["line"]}

    def execute(self, tup, collector):
        user, _, amount = tup["line"].partition(",")
        if amount.isdigit():
            collector.emit([user, int(amount)])
        else:
            collector.emit([tup["line"]], stream="rejects")


class Totals(Bolt):
    outputs = ["user", "total"]

    def prepare(self, conf, context, collector):
        self.collector, self.totals = collector, {}

    def execute(self, tup):
        user = tup["user"]
        self.totals[user] = self.totals.get(user, 0) + tup["amount"]
        self.collector.emit([user, self.totals[user]], anchors=[tup])
        self.collector.ack(tup)


class Best(Bolt):
    outputs = ["user", "total"]

    def prepare(self, conf, context, collector):
        self.collector, self.best = collector, {}

    def execute(self, tup):
        user, total = tup.values
        if total > self.best.get(user, 0):
            self.best[user] = total
            self.collector.emit([user, total], anchors=[tup])
        self.collector.ack(tup)


class Audit(Bolt):
    outputs = ["task_index", "line"]

    def prepare(self, conf, context, collector):
        self.collector, self.index = collector, context.this_task_index

    def execute(self, tup):
        self.collector.emit([self.index, tup["line"]], anchors=[tup])
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("lines", Lines(), parallelism=2)
builder.set_bolt("parse", Parse(), parallelism=3).shuffle_grouping("lines")
builder.set_bolt("totals", Totals(), parallelism=2).fields_grouping("parse", ["user"])
builder.set_bolt("best", Best()).global_grouping("totals")
builder.set_bolt("audit", Audit(), parallelism=2).all_grouping("parse", "rejects")
topology = builder.build()
'''


def test_two_stages_fields_after_shuffle_global_and_all_groupings(spark, tmp_path):
    rng = random.Random(5)
    lines = [f"user{rng.randint(1, 40)},{rng.randint(1, 99)}" if rng.random() > 0.05
             else f"garbage {i}" for i in range(3000)]
    (tmp_path / "purchases.txt").write_text("\n".join(lines) + "\n")
    file = tmp_path / "purchases.py"
    file.write_text(textwrap.dedent(STAGES))
    taps = [("best", "default"), ("audit", "default")]
    streamed = stream_topology(file, {"purchases.file": str(tmp_path / "purchases.txt")}, taps,
                               "lines", len(lines))

    (tmp_path / "purchases.jsonl").write_text(
        "".join(json.dumps({"line": line, "ignored": 1}) + "\n" for line in lines))
    result = Backfill(file, InputOptions(str(tmp_path / "purchases.jsonl"))).run(
        spark, str(tmp_path / "out"))
    # Two leaves: a directory each. A user's running totals depend on the order its purchases
    # reach `totals`, which the shuffle before it leaves open (in streaming too); how many there
    # are and the last one do not.
    best = read_output(tmp_path / "out" / "best" / "default", ["user", "total"])
    assert per_user(best) == per_user(streamed[("best", "default")])
    assert len(per_user(best)) == 40
    audited = read_output(tmp_path / "out" / "audit" / "default", ["task_index", "line"])
    assert audited == streamed[("audit", "default")]
    rejects = sum(not line.partition(",")[2].isdigit() for line in lines)
    assert sum(audited.values()) == 2 * rejects and {i for i, _ in audited} == {0, 1}
    assert result.components["parse"]["emitted"] == {"default": len(lines) - rejects,
                                                     "rejects": rejects}
    assert result.components["best"]["tasks"] == 1


def per_user(totals):
    found = {}
    for (user, total), times in totals.items():
        n, best = found.get(user, (0, 0))
        found[user] = (n + times, max(best, total))
    return found


# ----- what streaming does differently, counted: errors, fails, ticks; direct grouping

QUIRKS = '''
from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ["n"]


class Other(Spout):
    outputs = ["n"]


class ByParity:
    def prepare(self, context, stream, tasks):
        self.tasks = tasks

    def choose_tasks(self, task_id, values):
        return [self.tasks[values[0] % len(self.tasks)]]


class Where(Bolt):
    outputs = ["n", "task_index"]

    def prepare(self, conf, context, collector):
        self.collector, self.index = collector, context.this_task_index

    def execute(self, tup):
        self.collector.emit([tup["n"], self.index])
        self.collector.ack(tup)


class Check(Bolt):
    """Raises on multiples of 7, fails multiples of 5, and sends the rest straight to the task
    of `sink` numbered n mod 3 (a direct stream), and to `parity` and `spread`."""

    def declare_output_fields(self, declarer):
        declarer.declare(["n", "to_task"], stream="routed", direct=True)
        declarer.declare(["n"], stream="kept")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.sinks = context.get_component_tasks("sink")
        assert conf["stormlet.backfill"] is True

    def execute(self, tup):
        n = int(tup["n"])
        if n % 7 == 0:
            raise ValueError(f"seven divides {n}")
        if n % 5 == 0:
            self.collector.fail(tup)
            return
        task = self.sinks[n % 3]
        self.collector.emit_direct(task, [n, task], anchors=[tup], stream="routed")
        self.collector.emit([n], anchors=[tup], stream="kept")
        self.collector.ack(tup)


class Sink(Bolt):
    outputs = {"got": ["n", "to_task", "task"], "ticks": ["task", "seen"]}

    def prepare(self, conf, context, collector):
        self.collector, self.task, self.seen = collector, context.task_id, 0

    def execute(self, tup):
        if tup.is_tick():
            self.collector.emit([self.task, self.seen], stream="ticks")
            return
        self.seen += 1
        self.collector.emit([tup["n"], tup["to_task"], self.task], stream="got")
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_spout("other", Other())
builder.set_bolt("check", Check(), parallelism=2).shuffle_grouping("numbers")
builder.set_bolt("sink", Sink(), parallelism=3).direct_grouping("check", "routed") \\
    .shuffle_grouping("other").add_config("topology.tick.tuple.freq.secs", 1)
builder.set_bolt("parity", Where(), parallelism=2).custom_grouping("check", ByParity(), "kept")
builder.set_bolt("spread", Where(), parallelism=2).partial_key_grouping("check", ["n"], "kept")
topology = builder.build()
'''


def test_errors_fails_final_tick_and_direct_grouping(spark, tmp_path):
    file = tmp_path / "quirks.py"
    file.write_text(textwrap.dedent(QUIRKS))
    (tmp_path / "numbers.txt").write_text("".join(f"{n}\n" for n in range(1, 211)))
    job = Backfill(file, InputOptions(str(tmp_path / "numbers.txt")), spout="numbers")
    assert job.plan.notes == ["bolt 'sink' also reads 'other' stream 'default', which gets no "
                              "tuples in this backfill"]
    result = job.run(spark, str(tmp_path / "out"))

    sevens = 210 // 7
    fives = sum(1 for n in range(1, 211) if n % 5 == 0 and n % 7)
    assert result.components["check"]["errors"] == sevens == result.errors
    assert result.components["check"]["failed"] == fives == result.failed
    assert len(result.samples()) == 5
    assert all("check:" in s and "execute raised" in s and "ValueError: seven divides" in s
               for s in result.samples())
    got = read_output(tmp_path / "out" / "sink" / "got", ["n", "to_task", "task"])
    assert sum(got.values()) == 210 - sevens - fives
    assert all(to_task == task for _n, to_task, task in got)     # landed where it was sent
    ticks = read_output(tmp_path / "out" / "sink" / "ticks", ["task", "seen"])
    assert sorted(ticks) == sorted((task, sum(1 for _n, _t, k in got if k == task))
                                   for task in {k for _n, _t, k in got})   # one tick per task
    assert len(ticks) == 3
    kept = 210 - sevens - fives
    parity = read_output(tmp_path / "out" / "parity" / "default", ["n", "task_index"])
    assert sum(parity.values()) == kept and all(i == n % 2 for n, i in parity)
    spread = read_output(tmp_path / "out" / "spread" / "default", ["n", "task_index"])
    assert sorted(n for n, _ in spread) == sorted(n for n, _ in parity)
    assert {i for _, i in spread} == {0, 1}


SHIPPED = '''
import os
from helpers import Pid
from stormlet import Spout, TopologyBuilder


class Words(Spout):
    outputs = ["word"]


builder = TopologyBuilder()
builder.set_spout("words", Words())
builder.set_bolt("pid", Pid(), parallelism=2).fields_grouping("words", ["word"])
topology = builder.build()
'''

HELPERS = '''
import os
from stormlet import BasicBolt


class Pid(BasicBolt):
    outputs = ["word", "pid"]

    def execute(self, tup, collector):
        collector.emit([tup["word"], os.getpid()])
'''


def test_workers_load_the_shipped_code_in_their_own_processes(spark, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "shipped.py").write_text(textwrap.dedent(SHIPPED))
    (code / "helpers.py").write_text(textwrap.dedent(HELPERS))    # imported: shipped beside it
    (tmp_path / "words.txt").write_text("a\nb\nc\nd\n")
    Backfill(code / "shipped.py", InputOptions(str(tmp_path / "words.txt"))).run(
        spark, str(tmp_path / "out"))
    rows = read_output(tmp_path / "out", ["word", "pid"])
    assert sorted(word for word, _ in rows) == ["a", "b", "c", "d"]
    assert os.getpid() not in {pid for _, pid in rows}

    # Another topology with its own helpers.py, on the same (reused) Python workers.
    other = tmp_path / "other"
    other.mkdir()
    (other / "shipped.py").write_text(textwrap.dedent(SHIPPED))
    (other / "helpers.py").write_text(textwrap.dedent(HELPERS).replace("os.getpid()", "-1"))
    Backfill(other / "shipped.py", InputOptions(str(tmp_path / "words.txt")),
             name="other").run(spark, str(tmp_path / "out2"))
    assert {pid for _, pid in read_output(tmp_path / "out2", ["word", "pid"])} == {-1}


# ----- the command


def stormlet(*args):
    return CliRunner().invoke(main, ["backfill", *map(str, args)])


def error_line(result):
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: "), result.stderr
    return lines[-1]


def test_cli_runs_a_backfill_and_prints_counts(spark, tmp_path):
    (tmp_path / "in.txt").write_text("a b a\n\nb c\n")
    result = stormlet(WORD_COUNT, "--input", tmp_path / "in.txt", "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "backfill word_count: 2 messages from" in result.stdout
    assert any(line.split()[:5] == ["count", "2", "5", "5", "5"]
               for line in result.stdout.splitlines())
    assert f"wrote 5 tuples of count stream 'default' to {tmp_path / 'out'}" in result.stdout
    assert final_counts(read_output(tmp_path / "out", ["word", "count"])) == \
        {"a": 2, "b": 2, "c": 1}

    again = stormlet(WORD_COUNT, "--input", tmp_path / "in.txt", "--output", tmp_path / "out")
    assert "exists: choose another --output, or pass --overwrite" in error_line(again)
    assert stormlet(WORD_COUNT, "--input", tmp_path / "in.txt", "--output", tmp_path / "out",
                    "--overwrite").exit_code == 0

    # Only the chosen bolt and those it reads from run; its streams are written.
    split = stormlet(WORD_COUNT, "--input", tmp_path / "in.txt", "--output", tmp_path / "split",
                     "--component", "split")
    assert split.exit_code == 0, split.output
    assert [line.split()[0] for line in split.stdout.splitlines()[1:4]] == \
        ["component", "sentences", "split"]
    assert read_output(tmp_path / "split", ["word"]) == Counter({("a",): 2, ("b",): 2, ("c",): 1})


def test_cli_bad_input_records_are_counted_and_fail_the_exit_status(spark, tmp_path):
    (tmp_path / "in.jsonl").write_text('{"sentence": "a b"}\nnot json\n["c"]\n{"other": 1}\n')
    result = stormlet(WORD_COUNT, "--input", tmp_path / "in.jsonl", "--output", tmp_path / "out")
    assert "0 errors in bolts and 2 bad input records" in error_line(result)
    assert "a line is not JSON" in result.stderr
    assert "has no field 'sentence'" in result.stderr
    assert final_counts(read_output(tmp_path / "out", ["word", "count"])) == \
        {"a": 1, "b": 1, "c": 1}
    assert stormlet(WORD_COUNT, "--input", tmp_path / "in.jsonl", "--output", tmp_path / "out2",
                    "--allow-errors").exit_code == 0


def test_cli_refuses_bad_arguments_with_one_line(spark, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    out = tmp_path / "out"
    (tmp_path / "empty.py").write_text("x = 1\n")
    quirks = tmp_path / "quirks.py"
    quirks.write_text(textwrap.dedent(QUIRKS))
    direct = tmp_path / "direct.py"
    direct.write_text(textwrap.dedent(QUIRKS).replace(
        'direct_grouping("check", "routed")', 'direct_grouping("check", "routed")'
        '.direct_grouping("numbers")').replace(
        'outputs = ["n"]\n\n\nclass Other', 'def declare_output_fields(self, d):\n'
        '        d.declare(["n"], direct=True)\n\n\nclass Other').replace(
        '.shuffle_grouping("numbers")', '.shuffle_grouping("other")'))
    cases = [
        ((tmp_path / "nope.py", "--input", text), "nope.py: no such file"),
        ((tmp_path / "empty.py", "--input", text), "defines no module-level `topology`"),
        ((quirks, "--input", text), "has 2 spouts (numbers, other): choose the one the input "
                                    "replaces with --spout"),
        ((quirks, "--input", text, "--spout", "nope"), "--spout 'nope': no such component; the "
                                                       "topology's spouts are numbers, other"),
        ((quirks, "--input", text, "--spout", "check"), "--spout 'check': a bolt"),
        ((direct, "--input", text, "--spout", "numbers"),
         "bolt 'sink' subscribes to spout 'numbers' stream 'default' with a direct grouping"),
        ((WORD_COUNT, "--input", text, "--component", "sentences"),
         "--component 'sentences' is a spout"),
        ((WORD_COUNT, "--input", tmp_path / "missing.txt"), "missing.txt: no such file or "
                                                            "directory"),
        ((WORD_COUNT, "--input", tmp_path, "--format", "log"), "is not a stormlet log"),
        ((LOG_WORD_COUNT, "--input", text), "a text input fills exactly one field"),
    ]
    for args, expected in cases:
        result = stormlet(*args, "--output", out)
        assert expected in error_line(result), (args, result.stderr)
    assert "overlap: write the output somewhere else" in error_line(
        stormlet(WORD_COUNT, "--input", text, "--output", tmp_path))
    # A malformed option is a usage error, as for every command: exit status 2.
    result = stormlet(WORD_COUNT, "--input", text, "--output", out, "-c", "oops")
    assert result.exit_code == 2 and "is not of the form key=value" in result.stderr
    assert not out.exists()


WORKER_ONLY_FAILURE = '''
import sys
from stormlet import BasicBolt, Spout, TopologyBuilder

if "pyspark.worker" in sys.modules:
    raise RuntimeError("only on Spark's workers")


class Words(Spout):
    outputs = ["word"]


class Echo(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        collector.emit(tup.values)


builder = TopologyBuilder()
builder.set_spout("words", Words())
builder.set_bolt("echo", Echo()).shuffle_grouping("words")
topology = builder.build()
'''


def test_a_failure_on_the_workers_is_one_line(spark, tmp_path):
    (tmp_path / "failing.py").write_text(textwrap.dedent(WORKER_ONLY_FAILURE))
    (tmp_path / "words.txt").write_text("a\n")
    job = Backfill(tmp_path / "failing.py", InputOptions(str(tmp_path / "words.txt")))
    with pytest.raises(BackfillError) as caught:
        job.run(spark, str(tmp_path / "out"))
    message = str(caught.value)
    assert message == (f"cannot load the topology on a Spark worker: {tmp_path}/failing.py: "
                       f"importing it raised RuntimeError: only on Spark's workers (at "
                       f"{tmp_path}/failing.py:6)")
    assert not (tmp_path / "out").exists()      # nothing half-written left in the way


def test_an_input_spark_cannot_find_is_one_line(spark, tmp_path):
    job = Backfill(WORD_COUNT, InputOptions(str(tmp_path / "nothing-*.txt")))
    with pytest.raises(BackfillError) as caught:
        job.run(spark, str(tmp_path / "out"))
    message = str(caught.value)
    assert "\n" not in message and "nothing-*.txt" in message, message


# ----- without Spark: the plan, the input, the record formats, the runners


def test_a_config_value_stormlet_cannot_use_is_refused_before_spark(tmp_path):
    (tmp_path / "in.txt").write_text("a b\n")
    with pytest.raises(BackfillError) as caught:
        Backfill(WORD_COUNT, InputOptions(str(tmp_path / "in.txt")),
                 conf={"topology.acker.executors": "two", "topology.tick.tuple.freq.secs": -1})
    assert str(caught.value).startswith("topology 'word_count' cannot run with this config: "
                                        "topology.acker.executors must be ")
    assert "not 'two'" in str(caught.value) and "not -1" in str(caught.value)


def topology_of(tmp_path, source, name="t.py"):
    file = tmp_path / name
    file.write_text(textwrap.dedent(source))
    return load_topology_file(file)[0]


def test_the_plan_walks_the_graph_upstream_first_and_writes_the_leaves(tmp_path):
    from stormlet.spark.backfill import plan_backfill

    plan = plan_backfill(topology_of(tmp_path, STAGES))
    assert (plan.spout, plan.stream) == ("lines", "default")
    assert plan.order == ["parse", "audit", "totals", "best"]
    assert [(e.source, e.stream, e.consumer, e.grouping) for e in plan.edges] == [
        ("parse", "rejects", "audit", "all"), ("totals", "default", "best", "global"),
        ("lines", "default", "parse", "shuffle"), ("parse", "default", "totals", "fields")]
    assert plan.outputs == [("audit", "default"), ("best", "default")]
    assert plan.consumers("parse") == ["audit", "totals"]
    assert plan.uses("parse") == 2 and plan.uses("best") == 1 and plan.notes == []

    # A chosen bolt runs with the bolts it reads from, and all of its streams are written.
    chosen = plan_backfill(topology_of(tmp_path, STAGES), components=["totals"])
    assert chosen.order == ["parse", "totals"]
    assert chosen.outputs == [("totals", "default")]
    assert chosen.uses("parse") == 1


def test_the_plan_cuts_each_bolts_input_by_its_grouping(tmp_path):
    from stormlet.spark.backfill.plan import MERGE, NARROW, ROUTE, stage_specs

    topology = load_topology_file(WORD_COUNT)[0]
    job_plan = Backfill(WORD_COUNT, InputOptions(str(WORD_COUNT))).plan
    # split (2 tasks, shuffle from the input): kept in place, merged, or dealt out.
    assert stage_specs(job_plan, topology, 2)[1] == {"split": NARROW, "count": ROUTE}
    assert stage_specs(job_plan, topology, 5)[1] == {"split": MERGE, "count": ROUTE}
    assert stage_specs(job_plan, topology, 1)[1] == {"split": ROUTE, "count": ROUTE}

    stages, _ = stage_specs(job_plan, topology, 2)
    [to_split] = stages["sentences"].routes["default"]
    assert (to_split.slot, to_split.consumer, to_split.sub, to_split.mode) == \
        (0, "split", 0, NARROW)
    assert stages["sentences"].outputs == {} and stages["split"].outputs == {}
    assert stages["count"].routes == {} and stages["count"].outputs == {"default": 0}


def test_the_plan_notes_and_refusals_name_the_component(tmp_path):
    from stormlet.spark.backfill import plan_backfill

    quirks = topology_of(tmp_path, QUIRKS)
    plan = plan_backfill(quirks, spout="numbers")
    assert plan.order == ["check", "parity", "sink", "spread"]
    assert plan.outputs == [("parity", "default"), ("sink", "got"), ("sink", "ticks"),
                            ("spread", "default")]
    assert plan.notes == ["bolt 'sink' also reads 'other' stream 'default', which gets no "
                          "tuples in this backfill"]
    cases = [
        ({}, "has 2 spouts (numbers, other): choose the one the input replaces with --spout"),
        ({"spout": "check"}, "--spout 'check': a bolt"),
        ({"spout": "numbers", "stream": "nope"}, "spout 'numbers' declares no stream 'nope'"),
        ({"spout": "numbers", "components": ["nope"]}, "there is no component 'nope'"),
        ({"spout": "numbers", "components": ["other"]}, "--component 'other' is a spout"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(BackfillError) as caught:
            plan_backfill(quirks, **kwargs)
        assert expected in str(caught.value)

    cycle = topology_of(tmp_path, QUIRKS.replace(
        '.shuffle_grouping("numbers")',
        '.shuffle_grouping("numbers").shuffle_grouping("parity")'), "cycle.py")
    with pytest.raises(BackfillError) as caught:
        plan_backfill(cycle, spout="numbers")
    # Named: every bolt that cannot run, the cycle's and those downstream of it.
    assert str(caught.value).startswith("bolts ['check', 'parity', 'sink', 'spread'] feed each "
                                        "other in a cycle")


def test_the_input_is_checked_and_its_format_settled_before_spark(tmp_path):
    from stormlet.spark.backfill.inputs import check_input_fields, resolve_input

    (tmp_path / "in.txt").write_text("a\n")
    (tmp_path / "in.JSONL").write_text("{}\n")
    (tmp_path / "empty").mkdir()
    PartitionedLog.create(tmp_path / "log", 2).close()

    def kind(path, fmt="auto"):
        return resolve_input(InputOptions(str(path), fmt), "default").kind

    assert kind(tmp_path / "in.txt") == "text"
    assert kind(tmp_path / "in.JSONL") == "jsonl"
    assert kind(f"file://{tmp_path / 'in.txt'}") == "text"
    assert kind(tmp_path / "log") == "log"
    assert kind("hdfs://nn/data/*.json.gz") == "jsonl"      # left to Spark, named by its suffix
    assert kind(tmp_path / "in-*.txt") == "text"
    assert resolve_input(InputOptions(f"file://{tmp_path / 'in.txt'}"), "s").path == \
        str(tmp_path / "in.txt")
    for options, expected in [
        (InputOptions(str(tmp_path / "in.txt"), "csv"), "unknown input format 'csv'"),
        (InputOptions(str(tmp_path / "nope.txt")), "nope.txt: no such file or directory"),
        (InputOptions(str(tmp_path / "empty")), "the directory holds no files"),
        (InputOptions(str(tmp_path / "log"), "text"), "is a stormlet partitioned log, not text"),
        (InputOptions("s3a://bucket/log", "log"), "a partitioned log must be a local"),
    ]:
        with pytest.raises(BackfillError) as caught:
            resolve_input(options, "default")
        assert expected in str(caught.value)

    lines = load_topology_file(LOG_WORD_COUNT)[0]
    text = resolve_input(InputOptions(str(tmp_path / "in.txt")), "default")
    with pytest.raises(BackfillError, match="a text input fills exactly one field"):
        check_input_fields(lines.components["sentences"], "default", text)
    # A log spout translates the log's records itself: any fields will do.
    check_input_fields(lines.components["sentences"], "default",
                       resolve_input(InputOptions(str(tmp_path / "log")), "default"))


def test_record_formats_in_and_out():
    from stormlet.spark.backfill.chunks import encode_runs
    from stormlet.spark.backfill.formats import (
        JsonLines,
        default_translate,
        json_encoder,
        json_lines,
        read_values,
    )

    bad = []
    lines = ['{"word": "a", "n": 1}', "", "  ", "[\"b\", 2]", "nope", '{"n": 3}', "[1]"]
    got = list(read_values("jsonl", "in.jsonl", lines, ["word", "n"], default_translate,
                           bad.append))
    assert got == [["a", 1], ["b", 2]]
    assert [b.split(":")[0] for b in bad] == ["in.jsonl"] * 3
    assert "a line is not JSON" in bad[0] and "has no field 'word'" in bad[1]
    assert "neither an object with the fields ['word', 'n'] nor an array of 2 values" in bad[2]
    assert list(read_values("text", "in.txt", ["x y", "", "z"], ["line"], default_translate,
                            bad.append)) == [["x y"], ["z"]]

    chunk = [["é", b"\xff"], [b"ok", {b"key": 1}], ["%s", 2**70], [None, [1.5, True]]]
    expected = ('{"k":"é","v":{"base64":"/w=="}}\n{"k":"ok","v":{"key":1}}\n'
                '{"k":"%s","v":1180591620717411303424}\n{"k":null,"v":[1.5,true]}')
    # A record's runs as the emitter gathered them, or encoded as they cross a shuffle.
    written = list(JsonLines(["k", "v"])([(0, [(None, chunk[:1]), (None, chunk[1:])]),
                                          (1, encode_runs([(None, chunk)]))]))
    assert written == [expected.split("\n", 1)[0], expected.split("\n", 1)[1], expected]
    # Column by column, it writes what the encoder writes for each tuple's object.
    fields = ["word", "n%", "x"]
    rows = [["a", 1, 2.5], ["b", 2, None], ["c", 3, {"d": [float("nan"), -1]}]]
    assert json_lines(fields)(rows).split("\n") == \
        [json_encoder()(dict(zip(fields, r))) for r in rows]
    assert json_lines([])([[], []]) == "{}\n{}"


def test_chunks_keep_each_destinations_tuples_in_emit_order_across_subscriptions():
    from stormlet.spark.backfill.chunks import Chunks, decoded

    chunks = Chunks()
    # Consumer 0 reads two subscriptions (its task 1 gets both); consumer 1 one; output ~0.
    a = chunks.appender(0, 1, (0, 7), shared=True, encoded=True)
    b = chunks.appender(0, 1, (1, 7), shared=True, encoded=True)
    c = chunks.appender(1, 0, (0, 7), shared=False, encoded=False)
    out = chunks.appender(~0, 0, None, shared=False, encoded=False)
    for values, append in [(["x"], a), (["y"], a), (["z"], b), (["w"], a), ([1], c), ([2], out)]:
        append(values)
    records = chunks.flush()
    assert [(slot, index) for slot, (index, _) in records] == [(0, 1), (1, 0), (~0, 0)]
    assert type(records[0][1][1]) is bytes and type(records[1][1][1]) is list
    assert [decoded(runs) for _, (_, runs) in records] == [
        [((0, 7), [["x"], ["y"]]), ((1, 7), [["z"]]), ((0, 7), [["w"]])],
        [((0, 7), [[1]])],
        [(None, [[2]])]]
    assert chunks.flush() == []            # a flush hands over each tuple once
    b(["v"])
    c([3])
    assert [decoded(runs) for _, (_, runs) in chunks.flush()] == [[((1, 7), [["v"]])],
                                                                  [((0, 7), [[3]])]]


def test_paths_and_spark_failures_in_one_line(tmp_path):
    from stormlet.spark.backfill.errors import spark_failure_message
    from stormlet.spark.backfill.paths import output_paths
    from stormlet.spark.uri import spark_uri

    assert spark_uri("hdfs://nn/x") == "hdfs://nn/x"
    assert spark_uri("out") == f"file://{Path('out').absolute()}"
    assert output_paths("out/", [("count", "default")]) == ["out/"]
    assert output_paths("out/", [("a b", "x"), ("c", "y/z")]) == ["out/a%20b/x", "out/c/y%2Fz"]

    worker = Exception("py4j...\norg.apache.spark.api.python.PythonException: Traceback:\n"
                       "stormlet.spark.backfill.errors.BackfillWorkerError: cannot load it\n")
    assert spark_failure_message(worker, "in") == "cannot load it"
    raised = Exception("Traceback...\nValueError: bad value\n")
    assert spark_failure_message(raised, "in") == "a Spark task failed: ValueError: bad value"
    java = Exception(": org.apache.hadoop.fs.FileAlreadyExistsException: out exists; For more "
                     "details see x\n\tat org.apache...")
    assert spark_failure_message(java, "in") == \
        "Spark failed: FileAlreadyExistsException: out exists"
    missing = Exception("org.apache.hadoop.mapred.InvalidInputException: Input path does not "
                        "exist: file:/x")
    assert spark_failure_message(missing, "in/*.txt") == \
        "input in/*.txt: no such file or directory"


def test_the_runners_send_each_word_to_the_task_the_runtimes_chooser_picks(tmp_path,
                                                                           monkeypatch):
    """The input's and the bolts' partition functions, run in this process as Spark's workers
    run them, with the records moved between them as the job's RDDs move them."""
    from types import SimpleNamespace

    from stormlet.runtime.choosers import make_chooser
    from stormlet.spark.backfill import shipping
    from stormlet.spark.backfill.chunks import decoded
    from stormlet.spark.backfill.counts import Tally
    from stormlet.spark.backfill.emitter import has_slot, payload
    from stormlet.spark.backfill.plan import stage_specs
    from stormlet.spark.backfill.runner import BoltRunner, InputRunner
    from stormlet.spark.backfill.text_ranges import split_ranges

    # A worker's process-wide settings and caches stay out of the test's process.
    monkeypatch.setattr(shipping, "tune_for_streaming", lambda: None)
    monkeypatch.setattr(shipping, "_LOADED", {})
    monkeypatch.setattr(shipping, "CODE_DIR", tmp_path / "code")
    load_topology_file(WORD_COUNT)
    corpus = sys.modules["stormlet_topology_word_count"].CORPUS
    (tmp_path / "in.txt").write_text("\n".join(corpus) + "\n")
    job = Backfill(WORD_COUNT, InputOptions(str(tmp_path / "in.txt")))
    stages, _ = stage_specs(job.plan, job.topology, 2)
    code = shipping.TopologyCode(job.name, shipping.code_digest(job.package),
                                 SimpleNamespace(value=job.package), str(WORD_COUNT.parent), {},
                                 1, "wc-test")

    class Accumulator:
        def __init__(self):
            self.value = {}

        def add(self, more):
            Tally().addInPlace(self.value, more)

    tally = Accumulator()
    # The input's partitions: byte ranges of the file, as the job deals them.
    halves = split_ranges(list(job.input.files), 2)
    assert len(halves) == 2
    read = [list(InputRunner(code, stages["sentences"], job.input, tally)(j, [pieces]))
            for j, pieces in enumerate(halves)]
    # split's input is kept in place (NARROW): its partition j is the input's partition j.
    split = [list(BoltRunner(code, stages["split"], tally)(j, [payload(r) for r in records]))
             for j, records in enumerate(read)]
    # count's is repartitioned by the task index the fields grouping chose (ROUTE).
    chunks = [payload(r) for records in split for r in records if has_slot(0, r)]
    by_task = [[chunk for chunk in chunks if chunk[0] == i] for i in range(2)]
    counted = [list(BoltRunner(code, stages["count"], tally)(i, by_task[i])) for i in range(2)]

    layout = shipping.LoadedTopology(code, job.topology, {}).layout
    tasks = layout.component_tasks["count"]
    grouping = job.topology.components["count"].inputs[0].grouping
    chooser = make_chooser(grouping, ["word"], tasks,
                           source_task=layout.component_tasks["split"][0])
    split_tasks = layout.component_tasks["split"]
    for i, partition in enumerate(by_task):
        runs = [run for _index, encoded in partition for run in decoded(encoded)]
        assert {head for head, _ in runs} <= {(0, t) for t in split_tasks}
        words = [values[0] for _head, chunk in runs for values in chunk]
        assert words and all(chooser([w]) == [tasks[i]] for w in words)
    # What is written stays in its worker: not encoded.
    written = [tuple(values) for records in counted for r in records if has_slot(~0, r)
               for head, chunk in payload(r)[1] for values in chunk]
    assert sorted(written) == sorted(
        (w, n) for w, total in Counter(" ".join(corpus).split()).items()
        for n in range(1, total + 1))
    counts = tally.value
    assert counts["sentences"]["partitions"] == 2
    assert counts["sentences"]["emitted"] == {"default": len(corpus)}
    assert counts["split"]["executed"] == counts["split"]["acked"] == len(corpus)
    assert counts["count"]["executed"] == len(written) and counts["count"]["tasks"] == 2
