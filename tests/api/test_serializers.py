"""Registered types (stormlet/serializers.py): each default type and a user's own round-trip
through the wire's packing, local mode, the failed-message log and (test_serializers_cluster.py)
a cluster and a Spark backfill; what is not registered, or whose serializer fails, is refused at
emit with the field, the type and the way out named."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest
from cluster_topologies import typed_values
from support import running, wait_until

from stormlet import SerializationError, register_serialization
from stormlet.cluster.wire import FrameDecoder, encode_data, encode_frame
from stormlet.failed import read_failed
from stormlet.loader import load_topology_file
from stormlet.runtime.choosers import stable_hash
from stormlet.runtime.numbering import TopologyLayout
from stormlet.runtime.protocol import DATA
from stormlet.runtime.serialization import checked
from stormlet.serializers import (
    DEFAULT_REGISTRY,
    TOPOLOGY_SERIALIZATION_REGISTER,
    RegistrationError,
    registry_for,
)
from stormlet.tuples import StreamInfo, untracked

TYPED = Path(typed_values.__file__)


def loaded():
    """The typed-values topology as a worker loads it (its classes named by the module
    ``load_topology_file`` gives it), with its registry."""
    topology, conf = load_topology_file(TYPED)
    module = __import__("stormlet_topology_typed_values")
    return topology, conf, registry_for(conf), module


def test_each_sample_round_trips_through_the_wire_packing_with_its_type():
    topology, conf, registry, module = loaded()
    layout = TopologyLayout("typed", topology, 1)
    src = layout.component_tasks["numbers"][0]
    info = StreamInfo("numbers", "default", ["i", "value"])
    tuples = [untracked([i, value], info, src) for i, value in enumerate(module.SAMPLES)]
    frame = encode_frame([(DATA, 1, src, encode_data(tuples, registry))], "typed")
    (message,) = FrameDecoder(layout, "typed", registry=registry).decode(frame)
    got = [t.values for t in message[3].tuples()]
    assert [i for i, _ in got] == list(range(len(module.SAMPLES)))
    for (_i, value), expected in zip(got, module.SAMPLES):
        assert module.same(value, expected), (value, expected)


def test_a_tuple_stays_a_tuple_and_a_set_travels_where_it_was_refused_or_became_a_list():
    for value in [(1, (2, 3)), {1, 2}, frozenset(), {(1, 2): "key"}]:
        back = DEFAULT_REGISTRY.unpackb(DEFAULT_REGISTRY.packb([value]))[0]
        assert type(back) is type(value) and back == value


def test_a_set_packs_the_same_in_every_process_so_a_fields_grouping_hashes_it_alike():
    # Iteration order of a set of strs changes with each process's hash seed: sorted first.
    assert stable_hash([{"b", "a", "c"}]) == stable_hash([{"c", "a", "b"}])
    assert DEFAULT_REGISTRY.packb({"b", "a"}) == DEFAULT_REGISTRY.packb({"a", "b"})


def test_subclasses_of_msgpack_s_types_still_pack_as_their_base_type():
    import collections
    import enum

    class Level(enum.IntEnum):
        HIGH = 3
    pair = collections.namedtuple("Pair", "a b")
    back = DEFAULT_REGISTRY.unpackb(DEFAULT_REGISTRY.packb(
        [Level.HIGH, collections.OrderedDict(a=1), pair(1, 2)]))
    assert back == [3, {"a": 1}, (1, 2)] and type(back[2]) is tuple


def test_every_sample_and_the_user_s_types_run_through_local_mode(tmp_path):
    topology, conf, _registry, module = loaded()
    n = 2 * len(module.SAMPLES)
    conf = {**conf, "test.count": n, "test.dir": str(tmp_path)}
    with running(topology, conf):
        wait_until(lambda: len(_seen(tmp_path)) == n, 30, "every tuple checked")
    assert set(_seen(tmp_path).values()) == {"ok"}


def _seen(directory: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    for path in directory.glob("check-*.json"):
        try:
            seen.update(json.loads(path.read_text())["seen"])
        except (OSError, ValueError):
            continue
    return seen


def test_dead_lettered_values_of_registered_types_come_back_from_the_failed_log(tmp_path):
    topology, conf, registry, module = loaded()
    n = len(module.SAMPLES)
    conf = {**conf, "test.count": n, "test.fail.below": n,
            "topology.spout.dead.letter.attempts": 1, "stormlet.failed.dir": str(tmp_path)}
    with running(topology, conf, name="typed"):
        wait_until(lambda: len(list(read_failed(tmp_path, registry=registry))) == n, 30,
                   "every tuple dead-lettered")
    records = sorted(read_failed(tmp_path, registry=registry), key=lambda r: r["message_id"])
    for record, expected in zip(records, module.SAMPLES):
        i, value = record["payload"]["value"]
        assert module.same(value, expected), (value, expected)
    # Without the topology's registry: the default types decoded, the user's left as written.
    plain = sorted(read_failed(tmp_path), key=lambda r: r["message_id"])
    assert plain[0]["payload"]["value"][1] == module.SAMPLES[0]
    point = plain[module.SAMPLES.index(module.Point(3, 4.5))]["payload"]["value"][1]
    assert point == {"ext": {"type": "stormlet_topology_typed_values.Point", "data": [3, 4.5]}}


# ----- refused at emit


class Unregistered:
    pass


class NeedsArgs:
    def __init__(self, given):
        self.given = given


class Refuses:
    def encode(self, value):
        raise ValueError("no, thanks")

    def decode(self, data):
        return Unregistered()


def test_an_unregistered_type_is_refused_at_emit_naming_field_type_and_how_to_register():
    info = StreamInfo("source", "default", ["word", "when"])
    with pytest.raises(SerializationError) as caught:
        checked(["w", Unregistered()], info, "source")
    message = str(caught.value)
    assert "'source' emitted a value of type Unregistered in field 'when'" in message
    assert TOPOLOGY_SERIALIZATION_REGISTER in message and "register_serialization" in message
    with pytest.raises(SerializationError, match=r"in field 'when'.*holds a Unregistered"):
        checked(["w", [1, {"k": Unregistered()}]], info, "source")


def test_a_serializer_that_fails_is_named_at_emit():
    conf: dict = {}
    register_serialization(conf, Unregistered, Refuses)
    info = StreamInfo("source", "default", ["word", "when"], registry_for(conf))
    with pytest.raises(SerializationError, match=r"field 'when'.*serializer "
                       r"test_serializers\.Refuses failed on a Unregistered: ValueError: no, "
                       r"thanks"):
        checked(["w", Unregistered()], info, "source")


def test_registrations_that_cannot_be_used_are_refused_by_name():
    with pytest.raises(RegistrationError, match="not a dataclass, so it needs a serializer"):
        register_serialization({}, Unregistered)
    for entries, message in [
            (["no_such_module.Thing"], "cannot load class 'no_such_module.Thing'"),
            (["test_serializers.Nothing"], "has no Nothing"),
            ([{"test_serializers.Unregistered": "test_serializers.NeedsArgs"}],
             "cannot be made with no arguments"),
            (["test_serializers.Point", "test_serializers.Point"], "registered twice")]:
        with pytest.raises(RegistrationError, match=message):
            registry_for({TOPOLOGY_SERIALIZATION_REGISTER: entries})


@dataclasses.dataclass
class Point:
    x: int


def test_a_user_serializer_replaces_a_default_one_keeping_its_code():
    class AsEpoch:
        def encode(self, value):
            return value.timestamp()

        def decode(self, data):
            return dt.datetime.fromtimestamp(data, dt.timezone.utc)
    AsEpoch.__module__, AsEpoch.__qualname__ = __name__, "AsEpoch"
    globals()["AsEpoch"] = AsEpoch
    registry = registry_for({TOPOLOGY_SERIALIZATION_REGISTER: [
        {"datetime.datetime": "test_serializers.AsEpoch"}]})
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    assert registry.by_type[dt.datetime].code == DEFAULT_REGISTRY.by_type[dt.datetime].code
    assert registry.unpackb(registry.packb(when)) == when
    assert registry.by_type[Decimal] is not None
