"""A bad topology is refused by ``TopologyBuilder.build()`` with a message naming the problem, and
a bad emit fails at the emit, in the component that made it, with the field and type named."""

from __future__ import annotations

import threading

import pytest

from stormlet import (
    BasicBolt,
    Bolt,
    FailReason,
    LocalCluster,
    SerializationError,
    Spout,
    TopologyBuilder,
    TopologyError,
)
from stormlet.topology import Topology
from stormlet.values import check_values

CONF = {"topology.message.timeout.secs": 10}
WAIT = 15


# --------------------------------------------------------------------------- components


class WordSpout(Spout):
    outputs = ["word", "count"]


class TwoStreamSpout(Spout):
    outputs = {"default": ["word"], "numbers": ["n"]}


class DirectStreamSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["word"])
        declarer.declare(["n"], stream="direct_out", direct=True)


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


class LockedBolt(Bolt):
    """Holds a lock from __init__: cannot be deep-copied for its tasks."""

    def __init__(self):
        self.lock = threading.Lock()

    def execute(self, tup):
        pass


class LockedSpout(Spout):
    outputs = ["x"]

    def __init__(self):
        self.lock = threading.Lock()


class RaisingDeclareBolt(Bolt):
    def declare_output_fields(self, declarer):
        raise RuntimeError("cannot decide my fields")

    def execute(self, tup):
        pass


class NoChooseTasks:
    def prepare(self, context, stream, target_tasks):
        pass


def build_error(builder: TopologyBuilder) -> str:
    with pytest.raises(TopologyError) as info:
        builder.build()
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.startswith("invalid topology: ")
    return message


# --------------------------------------------------------------------------- build() refusals


def test_a_valid_topology_builds_with_spouts_first():
    b = TopologyBuilder()
    b.set_bolt("a_bolt", Sink(), parallelism=2).shuffle_grouping("words")
    b.set_spout("words", WordSpout(), parallelism=3).set_num_tasks(6)
    b.set_bolt("count", Sink()).fields_grouping("words", ["word"])
    topology = b.build()
    assert isinstance(topology, Topology)
    assert list(topology.components) == ["words", "a_bolt", "count"]
    spout = topology.components["words"]
    assert (spout.tasks, spout.executors) == (6, 3)
    assert [spec.id for spec, _g in topology.subscribers("words", "default")] == ["a_bolt", "count"]


def test_unknown_component():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("count", Sink()).shuffle_grouping("wrods")
    message = build_error(b)
    assert "bolt 'count' subscribes to 'wrods'" in message
    assert "there is no component 'wrods'" in message


def test_unknown_stream():
    b = TopologyBuilder()
    b.set_spout("words", TwoStreamSpout())
    b.set_bolt("count", Sink()).shuffle_grouping("words", stream="letters")
    message = build_error(b)
    assert "'count'" in message and "stream 'letters'" in message
    assert "'words' declares no such stream" in message
    assert "numbers" in message and "default" in message  # it lists what is declared


def test_stream_of_a_component_that_declares_nothing():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("sink", Sink()).shuffle_grouping("words")
    b.set_bolt("after", Sink()).shuffle_grouping("sink")
    message = build_error(b)
    assert "bolt 'after' subscribes to 'sink' stream 'default'" in message
    assert "declares no such stream" in message


@pytest.mark.parametrize("method", ["fields_grouping", "partial_key_grouping"])
def test_grouping_on_an_undeclared_field(method):
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    getattr(b.set_bolt("count", Sink()), method)("words", ["word", "colour"])
    message = build_error(b)
    assert "grouped on field 'colour'" in message
    assert "['word', 'count']" in message  # the fields it does declare
    assert "'word'" not in message.split("grouped on field")[1].split(",")[0]


def test_grouping_on_a_bare_string_field_name_is_one_field():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("count", Sink()).fields_grouping("words", "wordz")
    assert "grouped on field 'wordz'" in build_error(b)
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("count", Sink()).fields_grouping("words", "word")
    b.build()


def test_fields_grouping_on_no_fields():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("count", Sink()).fields_grouping("words", [])
    assert "fields grouping on no fields" in build_error(b)


def test_duplicate_component_id():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("words", Sink()).shuffle_grouping("words")
    assert "component id 'words' is used twice" in build_error(b)


@pytest.mark.parametrize("parallelism", [0, -2])
def test_parallelism_below_one(parallelism):
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("count", Sink(), parallelism=parallelism).shuffle_grouping("words")
    message = build_error(b)
    assert f"bolt 'count': parallelism must be an integer >= 1, got {parallelism}" in message

    b = TopologyBuilder()
    b.set_spout("words", WordSpout(), parallelism=parallelism)
    assert (f"spout 'words': parallelism must be an integer >= 1, got {parallelism}"
            in build_error(b))


def test_non_integer_parallelism_and_zero_tasks():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout(), parallelism=1.5)
    b.set_bolt("count", Sink()).shuffle_grouping("words").set_num_tasks(0)
    message = build_error(b)
    assert "spout 'words': parallelism must be an integer >= 1, got 1.5" in message
    assert "bolt 'count': number of tasks must be an integer >= 1, got 0" in message


def test_spout_subscribed_to_something():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_spout("more", WordSpout()).shuffle_grouping("words")
    message = build_error(b)
    assert "spout 'more' cannot subscribe to streams" in message
    assert "'words'" in message


def test_direct_grouping_on_a_stream_that_is_not_direct():
    b = TopologyBuilder()
    b.set_spout("words", DirectStreamSpout())
    b.set_bolt("count", Sink()).direct_grouping("words")
    message = build_error(b)
    assert "bolt 'count' subscribes to 'words' stream 'default' with a direct grouping" in message
    assert "not declared direct" in message


@pytest.mark.parametrize("method", ["shuffle_grouping", "all_grouping", "global_grouping",
                                    "none_grouping", "local_or_shuffle_grouping"])
def test_non_direct_grouping_on_a_direct_stream(method):
    b = TopologyBuilder()
    b.set_spout("words", DirectStreamSpout())
    getattr(b.set_bolt("count", Sink()), method)("words", stream="direct_out")
    message = build_error(b)
    assert "stream 'direct_out'" in message
    assert "that stream is direct: use direct_grouping" in message


def test_direct_grouping_on_a_direct_stream_builds():
    b = TopologyBuilder()
    b.set_spout("words", DirectStreamSpout())
    b.set_bolt("count", Sink()).direct_grouping("words", stream="direct_out")
    b.set_bolt("other", Sink()).shuffle_grouping("words")
    b.build()


def test_wrong_object_types():
    b = TopologyBuilder()
    b.set_spout("words", Sink())
    b.set_bolt("count", WordSpout()).shuffle_grouping("words")
    b.set_bolt("thing", object()).shuffle_grouping("words")
    message = build_error(b)
    assert "spout 'words' must be an instance of Spout, got Sink" in message
    assert "bolt 'count' must be an instance of Bolt or BasicBolt, got WordSpout" in message
    assert "bolt 'thing' must be an instance of Bolt or BasicBolt, got object" in message


def test_component_that_cannot_be_deep_copied():
    b = TopologyBuilder()
    b.set_spout("words", LockedSpout())
    b.set_bolt("count", LockedBolt()).shuffle_grouping("words")
    message = build_error(b)
    assert "spout 'words' cannot be copied for its tasks" in message
    assert "bolt 'count' cannot be copied for its tasks" in message
    assert "lock" in message  # the underlying reason
    assert "open/prepare" in message  # and the advice


def test_declare_output_fields_that_raises_or_declares_badly():
    class DupFields(Bolt):
        outputs = ["a", "a"]

    class BareString(Bolt):
        outputs = "word"

    class TwiceSameStream(Bolt):
        def declare_output_fields(self, declarer):
            declarer.declare(["a"], stream="s")
            declarer.declare(["b"], stream="s")

    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("raiser", RaisingDeclareBolt()).shuffle_grouping("words")
    b.set_bolt("dup", DupFields()).shuffle_grouping("words")
    b.set_bolt("bare", BareString()).shuffle_grouping("words")
    b.set_bolt("twice", TwiceSameStream()).shuffle_grouping("words")
    message = build_error(b)
    assert "bolt 'raiser': declare_output_fields raised" in message
    assert "cannot decide my fields" in message
    assert "component 'dup' stream 'default': duplicate field in ['a', 'a']" in message
    assert ("component 'bare' stream 'default': fields must be a list of non-empty strings"
            in message)
    assert "component 'twice' declares stream 's' twice" in message


def test_no_spout_reserved_id_and_empty_id():
    b = TopologyBuilder()
    b.set_bolt("__acker", Sink())
    b.set_bolt("", Sink())
    message = build_error(b)
    assert "a topology needs at least one spout" in message
    assert "component id '__acker' is reserved" in message
    assert "component id '' must be a non-empty string" in message


def test_custom_grouping_without_choose_tasks():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("count", Sink()).custom_grouping("words", NoChooseTasks())
    assert "custom grouping that has no choose_tasks method" in build_error(b)


def test_every_problem_is_listed_at_once():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("a", Sink(), parallelism=0).shuffle_grouping("nowhere")
    b.set_bolt("b", Sink()).fields_grouping("words", ["nope"])
    b.set_bolt("b", Sink())
    message = build_error(b)
    for part in ("component id 'b' is used twice", "parallelism must be an integer >= 1",
                 "no component 'nowhere'", "grouped on field 'nope'"):
        assert part in message
    assert message.count("; ") >= 3


def test_submit_needs_a_built_topology():
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    with LocalCluster() as cluster:
        with pytest.raises(TopologyError, match="submit takes a built Topology"):
            cluster.submit("t", CONF, b)
        assert cluster.topologies() == []


# --------------------------------------------------------------------------- check_values


@pytest.mark.parametrize("value, type_name", [
    (object(), "object"),
    ({1, object()}, "set"),       # a set is a registered type, but not what it holds here
    (range(3), "range"),
    (2**64, "int"),
    (-(2**63) - 1, "int"),
    ([1, object()], "list"),
    ({"k": {1j}}, "dict"),
    (1j, "complex"),
])
def test_check_values_names_field_and_type(value, type_name):
    with pytest.raises(SerializationError) as info:
        check_values(["ok", value], "comp", "s", ["first", "second"])
    message = str(info.value)
    assert isinstance(info.value, TypeError)
    assert f"type {type_name} in field 'second'" in message
    assert "'comp'" in message and "stream 's'" in message


@pytest.mark.parametrize("value", [None, True, 1.5, float("nan"), 2**64 - 1, -(2**63), b"\x00",
                                   "text", [1, ["a", {"k": b"v"}]], {"k": [1, 2.0, None]},
                                   (1, 2), {1, 2}, frozenset(), {"k": {1}}])
def test_check_values_accepts_what_msgpack_encodes(value):
    check_values(["ok", value], "comp", "s", ["first", "second"])
    check_values(("ok", value), "comp", "s", ["first", "second"])


def test_check_values_count_and_container():
    with pytest.raises(SerializationError, match=r"emitted 1 values on stream 's', which "
                                                 r"declares 2 fields \['a', 'b'\]"):
        check_values([1], "comp", "s", ["a", "b"])
    with pytest.raises(SerializationError, match="emitted 3 values"):
        check_values([1, 2, 3], "comp", "s", ["a", "b"])
    with pytest.raises(SerializationError, match="emitted str on stream 's'"):
        check_values("ab", "comp", "s", ["a", "b"])
    with pytest.raises(SerializationError, match="emitted dict"):
        check_values({"a": 1, "b": 2}, "comp", "s", ["a", "b"])


# --------------------------------------------------------------------------- errors at emit


class CatchingSpout(Spout):
    """Emits one bad tuple (catching what emit raises) and then one good one, both tracked."""

    outputs = {"default": ["id", "payload"], "other": ["x"]}

    def __init__(self, make_bad):
        self.make_bad = make_bad

    def open(self, conf, context, collector):
        self.collector = collector
        self.caught = []
        self.done = False
        self.acked = []
        self.failed = []

    def next_tuple(self):
        if self.done:
            return
        self.done = True
        try:
            self.make_bad(self.collector)
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            self.caught.append(exc)
        self.collector.emit([2, "fine"], msg_id="good")

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append((msg_id, reason))


class RecordingSink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.got = []

    def execute(self, tup):
        self.got.append(list(tup.values))
        self.collector.ack(tup)


def run_catching(make_bad):
    b = TopologyBuilder()
    b.set_spout("spout", CatchingSpout(make_bad))
    b.set_bolt("sink", RecordingSink(), parallelism=2).shuffle_grouping("spout")
    with LocalCluster() as cluster:
        cluster.submit("emit-errors", CONF, b.build())
        (spout,) = cluster.instances("emit-errors", "spout")
        cluster.wait_for(lambda: "good" in spout.acked, timeout=WAIT)
        cluster.wait_for(lambda: cluster.in_flight("emit-errors") == 0, timeout=WAIT)
        assert len(spout.caught) == 1, "emit did not raise"
        assert spout.acked == ["good"]
        got = [v for s in cluster.instances("emit-errors", "sink") for v in s.got]
        assert got == [[2, "fine"]]  # the bad tuple went nowhere
        assert spout.failed == []     # and was never tracked
        metrics = cluster.metrics("emit-errors")
        assert metrics["spout"]["emitted"] == 1
        assert cluster.errors("emit-errors") == []  # caught by the spout: nothing to report
    assert len(spout.caught) == 1
    return spout.caught[0]


@pytest.mark.parametrize("make_value, type_name", [
    (lambda: object(), "object"),
    (lambda: range(3), "range"),
    (lambda: 2**70, "int"),
    (lambda: [1, 2j], "list"),
])
def test_unencodable_value_raises_serialization_error_at_spout_emit(make_value, type_name):
    exc = run_catching(lambda c: c.emit([1, make_value()], msg_id="bad"))
    assert type(exc) is SerializationError
    message = str(exc)
    assert f"type {type_name} in field 'payload'" in message
    assert "'spout'" in message and "stream 'default'" in message


def test_wrong_number_of_values_raises_at_emit():
    exc = run_catching(lambda c: c.emit([1], msg_id="bad"))
    assert type(exc) is SerializationError
    assert ("emitted 1 values on stream 'default', which declares 2 fields ['id', 'payload']"
            in str(exc))


def test_undeclared_stream_raises_at_emit():
    exc = run_catching(lambda c: c.emit([1, "x"], msg_id="bad", stream="nope"))
    assert isinstance(exc, ValueError)
    assert "emitted on stream 'nope', which it does not declare" in str(exc)
    assert "['default', 'other']" in str(exc)


def test_direct_and_non_direct_mixups_raise_at_emit():
    exc = run_catching(lambda c: c.emit_direct(1, [1, "x"], msg_id="bad"))
    assert isinstance(exc, ValueError)
    assert "emit_direct on stream 'default', which is not declared direct" in str(exc)


def test_lone_surrogate_string_raises_serialization_error_at_emit():
    exc = run_catching(lambda c: c.emit([1, "bad \ud800 text"], msg_id="bad"))
    assert type(exc) is SerializationError
    assert "field 'payload'" in str(exc)


def test_lone_surrogate_string_inside_a_list_is_refused():
    with pytest.raises(SerializationError, match="type list in field 'b'"):
        check_values([1, ["\ud800"]], "comp", "s", ["a", "b"])


class RaisingSpout(Spout):
    """Lets the emit error escape from next_tuple once; emits a good tuple on the next call."""

    outputs = ["id", "payload"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.calls = 0
        self.acked = []

    def next_tuple(self):
        self.calls += 1
        if self.calls == 1:
            self.collector.emit([1, 1j], msg_id="bad")
        elif self.calls == 2:
            self.collector.emit([2, "fine"], msg_id="good")

    def ack(self, msg_id):
        self.acked.append(msg_id)


def test_spout_emit_error_is_recorded_with_component_field_and_type():
    b = TopologyBuilder()
    b.set_spout("spout", RaisingSpout())
    b.set_bolt("sink", RecordingSink()).shuffle_grouping("spout")
    with LocalCluster() as cluster:
        cluster.submit("spout-errors", CONF, b.build())
        (spout,) = cluster.instances("spout-errors", "spout")
        cluster.wait_for(lambda: spout.acked == ["good"], timeout=WAIT)
        errors = cluster.errors("spout-errors")
        assert len(errors) == 1
        (error,) = errors
        assert error.component == "spout"
        assert error.task == cluster.instances("spout-errors", "spout")[0].collector.task
        assert "next_tuple raised" in error.error
        assert "SerializationError" in error.error
        assert "type complex in field 'payload'" in error.error
        assert cluster.metrics("spout-errors")["spout"]["errors"] == 1
        (sink,) = cluster.instances("spout-errors", "sink")
        assert sink.got == [[2, "fine"]]


class NumberSpout(Spout):
    outputs = ["n"]

    def __init__(self, count):
        self.count = count

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0
        self.acked = []
        self.failed = []

    def next_tuple(self):
        if self.i < self.count:
            self.collector.emit([self.i], msg_id=self.i)
            self.i += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append((msg_id, reason))


class BadEmitBolt(Bolt):
    """Odd inputs make it emit a value that cannot be encoded; even ones pass through."""

    outputs = ["n", "payload"]

    def execute(self, tup):
        n = tup["n"]
        payload = object() if n % 2 else "ok"
        self.collector.emit([n, payload], anchors=tup)
        self.collector.ack(tup)


class BadEmitBasicBolt(BasicBolt):
    outputs = ["n", "payload"]

    def execute(self, tup, collector):
        n = tup["n"]
        collector.emit([n, complex(n) if n % 2 else "ok"])


class WrongCountBolt(Bolt):
    outputs = ["n", "payload"]

    def execute(self, tup):
        if tup["n"] % 2:
            self.collector.emit([tup["n"]], anchors=tup)
        else:
            self.collector.emit([tup["n"], "ok"], anchors=tup)
        self.collector.ack(tup)


@pytest.mark.parametrize("bolt, type_text", [
    (BadEmitBolt(), "type object in field 'payload'"),
    (BadEmitBasicBolt(), "type complex in field 'payload'"),
    (WrongCountBolt(), "emitted 1 values on stream 'default', which declares 2 fields"),
])
def test_bolt_emit_error_is_recorded_and_fails_the_input(bolt, type_text):
    n = 10
    b = TopologyBuilder()
    b.set_spout("spout", NumberSpout(n))
    b.set_bolt("bolt", bolt).shuffle_grouping("spout")
    b.set_bolt("sink", RecordingSink()).shuffle_grouping("bolt")
    with LocalCluster() as cluster:
        cluster.submit("bolt-errors", CONF, b.build())
        (spout,) = cluster.instances("bolt-errors", "spout")
        cluster.wait_for(lambda: len(spout.acked) + len(spout.failed) == n, timeout=WAIT)
        assert sorted(spout.acked) == [0, 2, 4, 6, 8]
        assert sorted(m for m, _r in spout.failed) == [1, 3, 5, 7, 9]
        for _msg_id, reason in spout.failed:
            assert isinstance(reason, FailReason)
            assert reason.kind == "error"
            assert reason.component == "bolt"
            assert reason.message.startswith("SerializationError: ")
            assert type_text in reason.message
        errors = cluster.errors("bolt-errors")
        assert len(errors) == 5
        for error in errors:
            assert error.component == "bolt"
            assert "execute raised on" in error.error
            assert type_text in error.error
        (sink,) = cluster.instances("bolt-errors", "sink")
        assert sorted(v[0] for v in sink.got) == [0, 2, 4, 6, 8]
        assert all(v[1] == "ok" for v in sink.got)


# --------------------------------------------------------------------------- config at submit


def word_topology(sink: Bolt | None = None, **sink_config):
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    declarer = b.set_bolt("sink", sink or Sink()).shuffle_grouping("words")
    declarer.add_configurations(sink_config)
    return b.build()


def config_error(conf: dict, topology=None) -> str:
    """The message of the submit's refusal; nothing is left running."""
    with LocalCluster() as cluster:
        with pytest.raises(TopologyError) as refused:
            cluster.submit("refused", conf, topology or word_topology())
        assert cluster.topologies() == []
    return str(refused.value)


@pytest.mark.parametrize("key, value, wanted", [
    ("topology.workers", "two", "a whole number of workers, at least 1"),
    ("topology.acker.executors", -1, "a whole number of executors, at least 0"),
    ("topology.message.timeout.secs", 0, "a number above 0"),
    ("topology.message.timeout.secs", float("nan"), "a number above 0"),
    ("topology.max.spout.pending", -5, "a whole number of tuples, at least 0"),
    ("topology.max.spout.pending", 2.5, "a whole number of tuples, at least 0"),
    ("topology.tick.tuple.freq.secs", "abc", "a number at least 0 (or None for no ticks"),
    ("topology.debug", "yes", "true or false"),
    ("topology.executor.receive.buffer.size", 0, "a whole number of batches, at least 1"),
    ("topology.transfer.batch.size", True, "a whole number of tuples, at least 1"),
    ("topology.transfer.batch.size", 10**400, "a whole number of tuples, at least 1 and at most "
                                              "2**62"),
    ("topology.spout.wait.ms", "x", "a number at least 0"),
    ("topology.hang.warning.secs", -1, "a number at least 0"),
    ("topology.spout.dead.letter.attempts", -1, "a whole number of fails, at least 0"),
    ("topology.error.throttle.interval.secs", float("inf"), "a number at least 0"),
    ("topology.max.error.report.per.interval", 1.5, "a whole number of errors, at least 0"),
    ("topology.metrics.report.secs", None, "a number above 0"),
    ("stormlet.failed.dir", 3, "a path or None"),
    ("topology.state.checkpoint.interval.ms", float("nan"), "a number above 0"),
    ("offsets.start.over", 1, "true or false"),
    ("topology.environment", ["GREETING=hi"], "a map of environment variable names to strings"),
    ("topology.environment", {"GREETING": 1}, "a map of environment variable names to strings, "
                                              "or None (the value of GREETING is not a string)"),
    ("topology.worker.childopts", "-c 'import os'", "Python's options as a list of strings or "
                                                    "one string, or None (-c runs its own code"),
    ("topology.worker.max.heap.size.mb", 0, "a number above 0 (or None for no limit)"),
    ("topology.worker.max.heap.size.mb", "1g", "a number above 0"),
])
def test_a_config_value_stormlet_cannot_use_is_refused_at_submit_naming_the_key(key, value,
                                                                                 wanted):
    # Each of these failed inside an executor (a traceback, a silent stall or every tuple timing
    # out) instead of at submit.
    message = config_error({**CONF, key: value})
    assert f"{key} must be {wanted}" in message
    assert repr(value) in message


def test_a_components_own_config_is_checked_at_build_naming_the_component():
    class TickingSink(Sink):
        def get_component_configuration(self):
            return {"topology.tick.tuple.freq.secs": -1}

    class BrokenSink(Sink):
        def get_component_configuration(self):
            raise RuntimeError("no config today")

    with pytest.raises(TopologyError, match="bolt 'sink': topology.max.spout.pending must be a "
                                            "whole number"):
        word_topology(**{"topology.max.spout.pending": "many"})
    with pytest.raises(TopologyError, match="bolt 'sink': topology.tick.tuple.freq.secs must be "
                                            "a number at least 0"):
        word_topology(TickingSink())
    with pytest.raises(TopologyError, match="bolt 'sink': get_component_configuration failed "
                                            "\\(RuntimeError: no config today\\)"):
        word_topology(BrokenSink())


def test_a_windowed_bolts_own_timeout_that_is_no_number_is_refused_not_raised():
    from stormlet.windowing import Count, WindowedBolt

    class Window(WindowedBolt):
        def execute(self, window):
            pass

    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("window", Window().with_tumbling_window(Count(5))).shuffle_grouping(
        "words").add_config("topology.message.timeout.secs", "ten")
    with pytest.raises(TopologyError, match="bolt 'window': topology.message.timeout.secs must "
                                            "be a number above 0, not 'ten'"):
        b.build()


def test_every_config_problem_is_listed_at_once():
    message = config_error({"topology.workers": 0, "topology.debug": "no"})
    for part in ("topology.workers must be", "topology.debug must be"):
        assert part in message


def test_values_stormlet_can_use_run_and_keys_it_does_not_know_are_the_users(tmp_path):
    conf = {**CONF, "topology.max.spout.pending": 1000.0, "topology.tick.tuple.freq.secs": None,
            "topology.debug": False, "topology.hang.warning.secs": 0,
            "topology.transfer.batch.size": None, "stormlet.failed.dir": tmp_path,
            "my.own.setting": object()}
    with LocalCluster() as cluster:
        cluster.submit("runs", conf, word_topology(**{"my.sink.setting": [1, 2]}))
        assert cluster.topologies() == ["runs"]


def test_every_default_is_a_value_stormlet_can_use():
    from stormlet import config as cfg

    assert cfg.problems(cfg.default_config()) == []


def test_a_misspelt_or_unread_setting_is_named_at_submit_and_the_topology_runs(caplog):
    conf = {**CONF, "topology.max.spout.pendng": 10, "topology.kryo.register": ["Event"],
            "my.own.setting": 1, "topology.name": "set by Storm for components"}
    with caplog.at_level("WARNING", logger="stormlet.local"), LocalCluster() as cluster:
        cluster.submit("warned", conf, word_topology(**{"topology.tick.tuple.freq.sec": 1}))
        assert cluster.topologies() == ["warned"]
    warned = [r.getMessage() for r in caplog.records if r.name == "stormlet.local"]
    assert warned == [
        "topology warned: topology.max.spout.pendng is not a setting stormlet reads, so it "
        "changes nothing (did you mean topology.max.spout.pending?)",
        "topology warned: topology.kryo.register is not a setting stormlet reads, so it "
        "changes nothing",
        "topology warned: component 'sink': topology.tick.tuple.freq.sec is not a setting "
        "stormlet reads, so it changes nothing (did you mean topology.tick.tuple.freq.secs?)"]


def test_settings_stormlet_reads_and_the_users_own_keys_give_no_warning():
    from stormlet import config as cfg

    assert cfg.unread({**cfg.default_config(), "my.own.setting": 1, 7: "not a string"}) == []


class NeedsTable(Bolt):
    """Says at submit which setting it cannot run without."""

    outputs = ["word"]

    def config_problems(self, conf):
        return [] if conf.get("sink.table") else ["set sink.table to the table it writes to"]


def test_a_component_that_says_what_config_it_cannot_run_with_is_refused_at_submit():
    from stormlet.state import StatefulBolt
    from stormlet.windowing import Count, WindowedBolt

    class WindowNeedingTable(WindowedBolt):
        config_problems = NeedsTable.config_problems

        def execute(self, window):
            pass

    class StateNeedingTable(StatefulBolt):
        config_problems = NeedsTable.config_problems

        def init_state(self, state):
            pass

        def execute(self, tup):
            self.collector.ack(tup)

    # Plain, and wrapped by the runtime (a window, a stateful bolt, and the bolt before a
    # stateful one, which forwards its checkpoints): each asked with the config its tasks see.
    b = TopologyBuilder()
    b.set_spout("words", WordSpout())
    b.set_bolt("plain", NeedsTable()).shuffle_grouping("words")
    b.set_bolt("window", WindowNeedingTable().with_tumbling_window(Count(5))) \
        .shuffle_grouping("words")
    b.set_bolt("state", StateNeedingTable()).shuffle_grouping("plain")
    topology = b.build()
    message = config_error(CONF, topology)
    for bolt in ("plain", "window", "state"):
        assert f"bolt {bolt!r}: set sink.table to the table it writes to" in message
    assert topology.config_problems({**CONF, "sink.table": "words"}) == []
    own = word_topology(NeedsTable(), **{"sink.table": "words"})
    assert own.config_problems(CONF) == [], "a component's own config counts"


def test_a_config_check_that_raises_or_answers_junk_is_a_problem_not_a_crash():
    class Raising(Bolt):
        def config_problems(self, conf):
            raise KeyError("sink.table")

    class Junk(Bolt):
        def config_problems(self, conf):
            return "set sink.table"

    assert config_error(CONF, word_topology(Raising())) == (
        "topology 'refused' cannot run with this config: bolt 'sink': config_problems raised "
        "KeyError('sink.table')")
    assert "bolt 'sink': config_problems must return a list of strings, got 'set sink.table'" \
        in config_error(CONF, word_topology(Junk()))
