"""The Redis bolts against a real redis-server: each data type stored, looked up and filtered by
the commands storm-redis uses, and an outage failing inputs instead of acking them."""

from __future__ import annotations

import pickle

import pytest
from redis_server import RedisServer, redis_server  # noqa: F401

from stormlet import Spout, TopologyBuilder
from stormlet.sinks.redis import (
    FieldsFilterMapper,
    FieldsLookupMapper,
    FieldsStoreMapper,
    RedisDataType,
    RedisDataTypeDescription,
    RedisFilterBolt,
    RedisLookupBolt,
    RedisStoreBolt,
)
from stormlet.testing import (
    BoltHarness,
    CompleteTopologyParam,
    MockedSources,
    complete_topology,
    make_tuple,
    multiset_eq,
)

FIELDS = ["key", "value"]
T = RedisDataType


@pytest.fixture
def redis(redis_server):
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


def run(bolt, *rows) -> BoltHarness:
    harness = BoltHarness(bolt)
    for row in rows:
        harness.execute(make_tuple(list(row), FIELDS))
    assert harness.collector.failed == [] and len(harness.collector.acked) == len(rows)
    return harness


def store(server, kind, add, *rows) -> None:
    description = RedisDataTypeDescription(kind, add)
    run(RedisStoreBolt(server.provider_config, FieldsStoreMapper(description, "key", "value")),
        *rows).cleanup()


def lookup(server, kind, add, *keys) -> list:
    description = RedisDataTypeDescription(kind, add)
    harness = run(RedisLookupBolt(server.provider_config, FieldsLookupMapper(description, "key")),
                  *[(k, None) for k in keys])
    harness.cleanup()
    return harness.collector.emitted_values()


def passed(server, kind, add, *keys) -> list:
    mapper = FieldsFilterMapper(RedisDataTypeDescription(kind, add), "key", FIELDS)
    harness = run(RedisFilterBolt(server.provider_config, mapper), *[(k, 0) for k in keys])
    harness.cleanup()
    assert all(e.anchors for e in harness.collector.emitted)
    return [values[0] for values in harness.collector.emitted_values()]


def test_each_data_type_is_stored_looked_up_and_filtered(redis, redis_server):
    s = redis_server
    store(s, T.STRING, None, ("a", "1"), ("b", "2"))
    assert redis.get("a") == b"1"
    assert lookup(s, T.STRING, None, "a", "zz") == [["a", "1"], ["zz", None]]
    assert passed(s, T.STRING, None, "a", "zz", "b") == ["a", "b"]

    store(s, T.HASH, "counts", ("cow", 3), ("dog", 5))
    assert redis.hgetall("counts") == {b"cow": b"3", b"dog": b"5"}
    assert lookup(s, T.HASH, "counts", "dog", "cat") == [["dog", "5"], ["cat", None]]
    assert passed(s, T.HASH, "counts", "cat", "cow") == ["cow"]

    store(s, T.LIST, None, ("queue", "x"), ("queue", "y"))
    assert lookup(s, T.LIST, None, "queue", "queue", "queue") == [
        ["queue", "x"], ["queue", "y"], ["queue", None]]   # LPOP: first in, first out

    store(s, T.SET, None, ("tags", "red"), ("tags", "blue"), ("tags", "red"))
    assert redis.smembers("tags") == {b"red", b"blue"}
    assert lookup(s, T.SET, None, "tags") == [["tags", 2]]   # SCARD
    assert passed(s, T.SET, "tags", "red", "green") == ["red"]   # SISMEMBER tags key

    store(s, T.SORTED_SET, "scores", ("ann", 2.5), ("bob", "7"))
    assert redis.zrange("scores", 0, -1, withscores=True) == [(b"ann", 2.5), (b"bob", 7.0)]
    assert lookup(s, T.SORTED_SET, "scores", "bob", "cy") == [["bob", 7.0], ["cy", None]]
    assert passed(s, T.SORTED_SET, "scores", "cy", "ann") == ["ann"]

    store(s, T.HYPER_LOG_LOG, None, ("visitors", "u1"), ("visitors", "u2"), ("visitors", "u1"))
    assert lookup(s, T.HYPER_LOG_LOG, None, "visitors", "none") == [
        ["visitors", 2], ["none", 0]]
    assert passed(s, T.HYPER_LOG_LOG, None, "none", "visitors") == ["visitors"]

    store(s, T.GEO, "places", ("rome", "12.5:41.9"))
    (key, (lon, lat)), (missing, nothing) = lookup(s, T.GEO, "places", "rome", "oslo")
    assert key == "rome" and round(lon, 3) == 12.5 and round(lat, 3) == 41.9
    assert (missing, nothing) == ("oslo", None)
    assert passed(s, T.GEO, "places", "oslo", "rome") == ["rome"]


def test_bolts_pickle_for_workers_and_refusals_name_what_is_missing():
    mapper = FieldsLookupMapper(RedisDataTypeDescription(T.HASH, "h"), "key")
    copy = pickle.loads(pickle.dumps(RedisLookupBolt({"host": "h", "port": 1}, mapper)))
    assert copy.mapper == mapper and copy.config == {"host": "h", "port": 1}
    with pytest.raises(ValueError, match="HASH description needs an additional_key"):
        RedisDataTypeDescription(T.HASH)
    set_without_key = FieldsFilterMapper(RedisDataTypeDescription(T.SET), "key", FIELDS)
    with pytest.raises(ValueError, match="SET needs the description's additional_key"):
        RedisFilterBolt({}, set_without_key)
    with pytest.raises(ValueError, match="cannot filter by a LIST"):
        RedisFilterBolt({}, FieldsFilterMapper(RedisDataTypeDescription(T.LIST), "key", FIELDS))


def test_redis_errors_fail_the_input_with_the_error(redis, redis_server, tmp_path):
    redis.set("plain", "text")
    mapper = FieldsStoreMapper(RedisDataTypeDescription(T.HASH, "plain"), "key", "value")
    harness = BoltHarness(RedisStoreBolt(redis_server.provider_config, mapper))
    wrong_type = make_tuple(["k", "v"], FIELDS)
    harness.execute(wrong_type)   # HSET on a string key: WRONGTYPE
    (failed, reason), = harness.collector.failed
    assert failed is wrong_type and reason.startswith("redis: ResponseError: WRONGTYPE")

    with RedisServer(tmp_path / "down") as down:   # one to take down: an outage
        config = down.provider_config
        harness = BoltHarness(RedisStoreBolt(config, FieldsStoreMapper(
            RedisDataTypeDescription(T.STRING), "key", "value")))
        harness.execute(make_tuple(["k", "1"], FIELDS))
        down.kill()
        lost = make_tuple(["k", "2"], FIELDS)
        harness.execute(lost)   # failed at once, not after redis-py's backoff
        down.start()            # back: the next input reconnects
        harness.execute(make_tuple(["k", "3"], FIELDS))
        assert down.client().get("k") == b"3"
    assert len(harness.collector.acked) == 2
    (failed, reason), = harness.collector.failed
    assert failed is lost and reason.startswith("redis: ConnectionError")
    assert len(harness.collector.errors) == 1


class Words(Spout):
    outputs = ["word", "count"]


def test_store_lookup_filter_in_a_topology(redis, redis_server):
    """Storm's storm-redis examples in one topology: counts stored in a hash, a blacklist
    filtered by a set, and lookups of what was stored."""
    config = redis_server.provider_config
    redis.sadd("allowed", "cow", "dog")
    counts = RedisDataTypeDescription(T.HASH, "counts")
    builder = TopologyBuilder()
    builder.set_spout("words", Words())
    builder.set_bolt("allowed", RedisFilterBolt(config, FieldsFilterMapper(
        RedisDataTypeDescription(T.SET, "allowed"), "word", ["word", "count"])), parallelism=2) \
        .shuffle_grouping("words")
    builder.set_bolt("store", RedisStoreBolt(config, FieldsStoreMapper(counts, "word", "count"))) \
        .shuffle_grouping("allowed")
    rows = [["cow", 1], ["cat", 2], ["dog", 3], ["emu", 4]]
    result = complete_topology(builder.build(), CompleteTopologyParam(
        MockedSources().add_mock_data("words", *rows)))
    assert multiset_eq(result.read_tuples("allowed"), [["cow", 1], ["dog", 3]])
    assert sorted(result.acked["words"]) == [0, 1, 2, 3] and not result.failed
    assert redis.hgetall("counts") == {b"cow": b"1", b"dog": b"3"}
