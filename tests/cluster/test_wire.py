"""The worker-to-worker wire format: round trips, and hostile frames refused with a clear error."""

from __future__ import annotations

import tracemalloc
from array import array

import msgpack
import pytest

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.cluster.wire import (
    WIRE_VERSION,
    EncodedBatch,
    FrameDecoder,
    WireError,
    encode_data,
    encode_frame,
    encode_records,
)
from stormlet.runtime.numbering import TopologyLayout
from stormlet.runtime.protocol import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    BACKPRESSURE,
    DATA,
    SPOUT_FAIL,
    Message,
)
from stormlet.serializers import DEFAULT_REGISTRY
from stormlet.tuples import StreamInfo, Tuple


class Words(Spout):
    outputs = {"default": ["word"], "pairs": ["word", "n"]}


class Sink(Bolt):
    def execute(self, tup):
        pass


@pytest.fixture(scope="module")
def decoder():
    b = TopologyBuilder()
    b.set_spout("words", Words())
    b.set_bolt("sink", Sink()).shuffle_grouping("words").shuffle_grouping("words", "pairs")
    return FrameDecoder(TopologyLayout("t", b.build(), 1), "t-1")


LAYOUT = r"not \[version, topology, sender, tenure, list of messages\]"


def frame(messages, topology="t-1", version=WIRE_VERSION, sender="s1:6700", tenure=1):
    return msgpack.packb([version, topology, sender, tenure, messages])


def spout_task(decoder):
    return decoder.layout.component_tasks["words"][0]


def data_frame(decoder, columns):
    """A frame of one data message, its payload ``columns`` packed as an executor packs it."""
    return frame([[DATA, 5, spout_task(decoder), msgpack.packb(columns)]])


def unpacked(message):
    """A decoded data message's tuples: the bolt it is for unpacks them (EncodedBatch)."""
    return message[3].tuples()


def test_tuples_and_control_messages_survive_a_round_trip(decoder):
    src = spout_task(decoder)
    default = StreamInfo("words", "default", ["word"])
    pairs = StreamInfo("words", "pairs", ["word", "n"])
    one_stream = [Tuple(["a"], default, src, (11, 12)), Tuple(["b"], default, src, None)]
    mixed = [Tuple(["c"], default, src, (1, 2, 3, 4)), Tuple(["d", 4], pairs, src, None)]
    messages = [(DATA, 9, src, one_stream), (DATA, 9, src, mixed),
                (ACK_INIT, 3, src, [5, 6, src]), (ACK_ACK, 3, src, array("Q", [2**64 - 1, 2**63])),
                (SPOUT_FAIL, src, 3, [5, "timeout", 2, None, 2**64 - 1, "exception", 0, "boom"]),
                (ACK_FAIL, 3, src, [7, "exception", "boom", 8, "timeout", None]),
                (ACK_RESET, 3, src, [2**64 - 1, 1]), (BACKPRESSURE, -1, -1, [src, 1, 3, 0])]
    decoded = decoder.decode(encode_frame(messages, "t-1"))
    assert [m[:3] for m in decoded] == [m[:3] for m in messages]
    got = [(t.values, t.stream, t.source_component, t.roots and list(t.roots)) for t in
           unpacked(decoded[0]) + unpacked(decoded[1])]
    assert got == [(["a"], "default", "words", [11, 12]), (["b"], "default", "words", None),
                   (["c"], "default", "words", [1, 2, 3, 4]), (["d", 4], "pairs", "words", None)]
    assert unpacked(decoded[1])[1]["n"] == 4
    assert decoded[2][3] == [5, 6, src]
    acks = decoded[3][3]   # packed pairs, as the acker reads them
    assert dict(zip(acks[::2], acks[1::2])) == {2**64 - 1: 2**63}
    assert [m[3] for m in decoded[4:]] == [m[3] for m in messages[4:]]


def test_decoded_messages_are_named_records(decoder):
    src = spout_task(decoder)
    (message,) = decoder.decode(encode_frame([(ACK_INIT, 3, src, [5, 6, src])], "t-1"))
    assert type(message) is Message
    assert (message.kind, message.dest_task, message.src_task, message.payload) == (
        ACK_INIT, 3, src, [5, 6, src])


def test_control_records_travel_as_packed_int_columns():
    # AckInit: root, xor, spout task, each as a column of unsigned 64-bit ints.
    ints, others = encode_records(ACK_INIT, [5, 6, 1, 2**64 - 1, 8, 1])
    assert ints == array("Q", [5, 2**64 - 1, 6, 8, 1, 1]).tobytes() and others == []
    # SpoutFail: root and component packed; kind and message one list each.
    ints, others = encode_records(SPOUT_FAIL, [5, "timeout", 2, None, 6, "exception", 0, "x"])
    assert ints == array("Q", [5, 6, 2, 0]).tobytes()
    assert others == [["timeout", "exception"], [None, "x"]]


@pytest.mark.parametrize("roots, problem", [
    (b"\x00" * 16, "name root 0"),
    (b"\x01" * 24, "columns of one length"),
    ([[1, -1]], "malformed roots"),
    ([[0, 1, 2]], "malformed roots"),
    ([[1.5, 2]], "malformed roots"),
    ([[1, 2.0]], "malformed roots"),
    ([[True, 2]], "malformed roots"),
    ([[0, 2, 3, 4]], "malformed roots"),
])
def test_malformed_roots_are_refused(decoder, roots, problem):
    (message,) = decoder.decode(data_frame(decoder, ["default", [["x"]], roots]))
    with pytest.raises(WireError, match=problem):
        unpacked(message)


def test_tuples_of_one_root_each_travel_as_a_blob_of_pairs(decoder):
    src = spout_task(decoder)
    default = StreamInfo("words", "default", ["word"])
    pairs = StreamInfo("words", "pairs", ["word", "n"])
    one_stream = [Tuple(["e"], default, src, (21, 2**64 - 1)), Tuple(["f"], default, src, (23, 0))]
    two_streams = [Tuple(["g"], default, src, (31, 32)), Tuple(["h", 5], pairs, src, (33, 34))]
    encoded = encode_frame([(DATA, 9, src, one_stream), (DATA, 9, src, two_streams)], "t-1")
    _version, _topology, _sender, _tenure, raw = msgpack.unpackb(encoded)
    assert [type(msgpack.unpackb(message[3])[2]) for message in raw] == [bytes, bytes]
    decoded = decoder.decode(encoded)
    got = [(t.values, t.stream, t.root, t.edge, t.roots)
           for t in unpacked(decoded[0]) + unpacked(decoded[1])]
    assert got == [(["e"], "default", 21, 2**64 - 1, (21, 2**64 - 1)),
                   (["f"], "default", 23, 0, (23, 0)),
                   (["g"], "default", 31, 32, (31, 32)), (["h", 5], "pairs", 33, 34, (33, 34))]


def test_a_batch_on_one_stream_travels_field_by_field(decoder):
    src = spout_task(decoder)
    pairs = StreamInfo("words", "pairs", ["word", "n"])
    batch = [Tuple(["i", 1], pairs, src, (41, 42)), Tuple(["j", None], pairs, src, (43, 44)),
             Tuple(["k", 3], pairs, src, None)]
    streams, columns, roots = msgpack.unpackb(encode_data(batch))
    assert (streams, columns, roots) == ("pairs", ["i\x1fj\x1fk", [1, None, 3]],
                                         [[41, 42], [43, 44], None])
    (message,) = decoder.decode(encode_frame([(DATA, 9, src, batch)], "t-1"))
    assert [(t.values, t.stream, t.roots) for t in unpacked(message)] == [
        (["i", 1], "pairs", (41, 42)), (["j", None], "pairs", (43, 44)), (["k", 3], "pairs", None)]


@pytest.mark.parametrize("words, travels_joined", [
    (["the", "cow", "", "jumped"], True),
    (["ünïcode", "snow\nwhite", "x"], True),
    (["one"], True),
    ([""], True),
    (["holds the \x1f separator", "b"], False),
    (["a", 7, "b"], False),
    (["a", None], False),
])
def test_a_column_of_strings_travels_as_one_string_when_it_can(decoder, words, travels_joined):
    src = spout_task(decoder)
    info = StreamInfo("words", "pairs", ["word", "n"])
    batch = [Tuple([word, i], info, src, (60 + i, 1)) for i, word in enumerate(words)]
    _streams, columns, _roots = msgpack.unpackb(encode_data(batch))
    assert (type(columns[0]) is str) == travels_joined and columns[1] == list(range(len(words)))
    (message,) = decoder.decode(encode_frame([(DATA, 9, src, batch)], "t-1"))
    assert [t.values for t in unpacked(message)] == [[word, i] for i, word in enumerate(words)]


@pytest.mark.parametrize("column", ["a\x1fb", "a\x1fb\x1fc\x1fd", 5])
def test_a_joined_column_that_does_not_split_into_the_batch_is_refused(decoder, column):
    (message,) = decoder.decode(data_frame(decoder, ["default", [column],
                                                     b"\x01" * 16 * 3]))
    with pytest.raises(WireError, match="columns of one length"):
        unpacked(message)


def test_a_value_list_changed_after_its_emit_travels_as_it_is_and_is_refused(decoder):
    # The emit checked the values; a bolt that then appends to the list it emitted must not
    # have the extra value dropped on the way, nor the others shifted between tuples.
    src = spout_task(decoder)
    default = StreamInfo("words", "default", ["word"])
    grown = ["m"]
    batch = [Tuple(["l"], default, src, (51, 52)), Tuple(grown, default, src, (53, 54))]
    grown.append("extra")
    streams, columns, _roots = msgpack.unpackb(encode_data(batch))
    assert (streams, columns) == (["default", "default"], [["l"], ["m", "extra"]])
    (message,) = decoder.decode(encode_frame([(DATA, 9, src, batch)], "t-1"))
    with pytest.raises(WireError, match="do not match the fields"):
        unpacked(message)


@pytest.mark.parametrize("frame, problem", [
    (b"\xc1garbage", "undecodable"),
    (msgpack.packb({"not": "a list"}), LAYOUT),
    (msgpack.packb([[0, 1, 1, []]]), LAYOUT),
    (frame({}), LAYOUT),
    (frame([], sender=7), LAYOUT),
    (frame([], tenure="1"), LAYOUT),
    (msgpack.packb([WIRE_VERSION, "t-1", []]), LAYOUT),
    # A worker of the release before versions, and one of a later release.
    (msgpack.packb(["t-1", []]), f"frame of wire version 1, but this worker reads version "
                                 f"{WIRE_VERSION}: a topology's workers must run one stormlet "
                                 f"release"),
    (frame([], version=2), f"frame of wire version 2, but this worker reads version "
                           f"{WIRE_VERSION}"),
    # The release before frames named their sender.
    (msgpack.packb([3, "t-1", []]), f"frame of wire version 3, but this worker reads version "
                                    f"{WIRE_VERSION}"),
    (frame([], version=WIRE_VERSION + 1), f"frame of wire version {WIRE_VERSION + 1}, but"),
    (frame([], topology="other-topology"), "for topology 'other-topology'"),
    (frame([[0, 1]]), r"is not \[kind, dest, src, payload\]"),
    (frame([[99, 1, 1, []]]), "not a known kind"),
    (frame([[0, 1, 4242, msgpack.packb(["default", [["x"]], [None]])]]), "unknown task"),
    (frame([[0, 1, 1, ["default", [["x"]], [None]]]]), "not packed columns"),
    (frame([[0, 1, "SRC", []]]), "not a known kind"),
    (frame([[11, 1, "SRC", {}]]), "not a known kind"),
    (msgpack.packb(list(range(3)))[:-1], "undecodable"),
])
def test_malformed_frames_are_refused(decoder, frame, problem):
    with pytest.raises(WireError, match=problem):
        decoder.decode(frame)


@pytest.mark.parametrize("payload, problem", [
    ("not columns", "columns"),
    (["default", [["x"]], []], "columns"),
    (["nope", [["x"]], [None]], "undeclared stream"),
    (["default", [["x"], ["extra"]], [None]], "match the fields"),
    (["default", [["x", "extra"]], [None]], "columns of one length"),
    (["default", [5], [None]], "columns of one length"),
    (["default", ["x\x1fy"], [None]], "columns of one length"),
    ([["default"], [["x", "extra"]], [None]], "match the fields"),
    ([["default"], ["x"], [None]], "match the fields"),
    (["default", [["x"]], ["roots"]], "malformed roots"),
    ([["default"], [["x"], ["y"]], [None, None]], "malformed stream names"),
])
def test_malformed_tuples_are_refused_by_the_bolt_that_unpacks_them(decoder, payload, problem):
    (message,) = decoder.decode(data_frame(decoder, payload))
    with pytest.raises(WireError, match=problem):
        unpacked(message)


def test_a_data_payload_that_does_not_unpack_is_refused(decoder):
    (message,) = decoder.decode(frame([[DATA, 5, spout_task(decoder), b"\xc1garbage"]]))
    with pytest.raises(WireError, match="undecodable data payload from 'words'"):
        unpacked(message)


def test_an_oversized_frame_is_refused_before_decoding(decoder, monkeypatch):
    monkeypatch.setattr("stormlet.cluster.wire.MAX_FRAME_BYTES", 100)
    with pytest.raises(WireError, match="over the 100 limit"):
        decoder.decode(b"\x90" * 101)


def packed(*ints):
    return array("Q", ints).tobytes()


@pytest.mark.parametrize("kind, payload", [
    (ACK_ACK, {1: 2}),
    (ACK_ACK, b"\x01" * 24),
    (ACK_ACK, [1, 2]),
    (ACK_INIT, [1, 2, 3]),   # a flat list: records travel packed
    (ACK_INIT, "x"),
    (ACK_INIT, [packed(1, 2), []]),   # not whole records
    (ACK_INIT, [packed(1, 2, 1), [], []]),
    (ACK_INIT, [packed(1, 2, 1), [["extra"]]]),
    (ACK_INIT, encode_records(ACK_INIT, [1, 2, 999])),   # not the sending spout task
    (SPOUT_FAIL, [packed(1, 2), [[5], [None]]]),   # a kind that is not a string
    (SPOUT_FAIL, [packed(1, 2), [["timeout", "x"], [None, None]]]),   # columns of two lengths
    (SPOUT_FAIL, [packed(1, 2), [["timeout"]]]),
    (SPOUT_FAIL, [packed(1, 2), ["t", [None]]]),   # a column that is not a list
    (SPOUT_FAIL, [packed(1, 2), [["timeout"], [b"message"]]]),
    (ACK_FAIL, [packed(1), [["error"], [7]]]),   # a message that is not a string
    (ACK_RESET, [[0] * 8, []]),   # ints that are not packed
    (ACK_RESET, ["x" * 8, []]),
    (ACK_RESET, [packed(1), "not columns"]),
    (BACKPRESSURE, [packed(1, 1, 2), []]),
    (BACKPRESSURE, encode_records(BACKPRESSURE, [10**6, 1])),
])
def test_control_records_with_wrong_fields_are_refused(decoder, kind, payload):
    with pytest.raises(WireError):
        decoder.decode(frame([[kind, 1, spout_task(decoder), payload]]))


# ----- a bolt unpacks what another worker sent it


class Recorder(Bolt):
    def prepare(self, conf, context, collector):
        self.seen = []

    def execute(self, tup):
        self.seen.append(tup.values[0])


def test_a_bolt_drops_and_reports_a_batch_that_does_not_unpack_and_runs_the_next():
    b = TopologyBuilder()
    b.set_spout("words", Words())
    b.set_bolt("sink", Recorder()).shuffle_grouping("words")
    with LocalCluster() as cluster:
        cluster.submit("t", {}, b.build())
        runtime = cluster.runtime("t")
        layout = runtime.layout
        (src,), (sink,) = layout.component_tasks["words"], layout.component_tasks["sink"]
        decoder = FrameDecoder(layout, "t-1")
        default = StreamInfo("words", "default", ["word"])
        good = encode_data([Tuple(["ok"], default, src, None)])
        inbox = runtime.routes[sink]
        inbox.put((DATA, sink, src, EncodedBatch(decoder, "words", src, b"\xc1garbage")))
        inbox.put((DATA, sink, src, EncodedBatch(decoder, "words", src, good)))
        (bolt,) = cluster.instances("t", "sink")
        cluster.wait_for(lambda: bolt.seen == ["ok"], timeout=10)
        (error,) = cluster.errors("t")
        assert error.component == "sink" and error.task == sink
        assert "dropped a malformed batch from another worker" in error.error
        assert "undecodable data payload from 'words'" in error.error


def test_packing_a_large_batch_or_frame_keeps_no_buffer_its_size_for_the_threads_life():
    # A packer's buffer grows to the largest value it packed and never shrinks: a thread that
    # once packed 5 MB would hold 10 MB from then on.
    registry = DEFAULT_REGISTRY
    big = b"x" * 5_000_000
    encode_frame([(DATA, 1, 0, registry.packb([1]))])   # this thread's packers made
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        payload = registry.packb([big])
        frame = encode_frame([(DATA, 1, 0, payload)])
        assert len(frame) > 5_000_000
        del payload, frame
        registry.packb([1])
        encode_frame([(DATA, 1, 0, registry.packb([1]))])
        assert tracemalloc.get_traced_memory()[0] - before < 1_000_000
    finally:
        tracemalloc.stop()
