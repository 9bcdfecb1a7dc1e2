"""Bolts that store to, look up in and filter by Redis: storm-redis's ``RedisStoreBolt``,
``RedisLookupBolt`` and ``RedisFilterBolt``.

    counts = RedisDataTypeDescription(RedisDataType.HASH, "word-counts")
    builder.set_bolt("store", RedisStoreBolt(REDIS, FieldsStoreMapper(counts, "word", "count")))
    builder.set_bolt("lookup", RedisLookupBolt(REDIS, FieldsLookupMapper(counts, "word")))
    builder.set_bolt("filter", RedisFilterBolt(REDIS, FieldsFilterMapper(
        RedisDataTypeDescription(RedisDataType.SET, "blacklist"), "word", ["word", "count"])))

``REDIS`` is the same dict as the Redis state provider's config (``host``, ``port``, ``db``,
``password``, ``timeout``, or Storm's ``{"jedisPoolConfig": {...}}``); each task connects in
``prepare``. A mapper says which data type and key a tuple maps to, as in Storm:

============  ======================  ============================  ==========================
data type     store (key, value)      lookup (key) gives            filter (key) passes if
============  ======================  ============================  ==========================
STRING        SET key value           GET key                       EXISTS key
LIST          RPUSH key value         LPOP key                      (not supported)
HASH          HSET add key value      HGET add key                  HEXISTS add key
SET           SADD key value          SCARD key                     SISMEMBER add key
SORTED_SET    ZADD add value key      ZSCORE add key                ZRANK add key is not nil
HYPER_LOG_LOG PFADD key value         PFCOUNT key                   PFCOUNT key > 0
GEO           GEOADD add lon lat key  GEOPOS add key                GEOPOS add key is a point
============  ======================  ============================  ==========================

``add`` is the description's ``additional_key`` (required for HASH, SORTED_SET and GEO, and
by the filter for SET); a SORTED_SET's value is the score, a GEO's is ``"lon:lat"``. Each bolt
acks its input once Redis answered; if Redis fails (unreachable, a wrong type at the key) or
the mapper does, the input is failed with the error as the reason, and the error reported.
The lookup bolt emits, anchored, each of the mapper's ``to_tuple(input, value)`` (values read
back as ``str``, as Storm's Jedis string API gives them); the filter bolt emits the input's
values when the key is found.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from ..components import Bolt, OutputFieldsDeclarer
from ..state.redis_store import connect
from ..tuples import Tuple
from .base import Sink


class RedisDataType(enum.Enum):
    """The Redis data types the bolts handle (storm-redis's ``RedisDataType``)."""

    STRING = "string"
    LIST = "list"
    HASH = "hash"
    SET = "set"
    SORTED_SET = "sorted_set"
    HYPER_LOG_LOG = "hyper_log_log"
    GEO = "geo"


# Retries of a call on a new connection: one, for a connection Redis dropped while idle.
DEFAULT_RETRIES = 1

# Data types whose key is a field of one Redis key, the additional key.
_NEEDS_ADDITIONAL_KEY = frozenset({RedisDataType.HASH, RedisDataType.SORTED_SET,
                                   RedisDataType.GEO})


@dataclass(frozen=True)
class RedisDataTypeDescription:
    """A data type and, for HASH, SORTED_SET and GEO, the Redis key holding the structure
    (``additional_key``)."""

    data_type: RedisDataType
    additional_key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data_type, RedisDataType):
            raise ValueError(f"data_type must be a RedisDataType, got {self.data_type!r}")
        if self.data_type in _NEEDS_ADDITIONAL_KEY and not self.additional_key:
            raise ValueError(f"a {self.data_type.name} description needs an additional_key "
                             f"(the Redis key of the {self.data_type.name.lower()})")


class RedisMapper(Protocol):
    def get_data_type_description(self) -> RedisDataTypeDescription: ...

    def get_key_from_tuple(self, tup: Tuple) -> str: ...


class RedisStoreMapper(RedisMapper, Protocol):
    """Storm's ``RedisStoreMapper``: a tuple's key and value."""

    def get_value_from_tuple(self, tup: Tuple) -> Any: ...


class RedisLookupMapper(RedisMapper, Protocol):
    """Storm's ``RedisLookupMapper``: a tuple's key, and the tuples to emit for what Redis
    holds there (``value`` None if nothing)."""

    def to_tuple(self, tup: Tuple, value: Any) -> list[list[Any]]: ...

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None: ...


class RedisFilterMapper(RedisMapper, Protocol):
    """Storm's ``RedisFilterMapper``: a tuple's key; its output fields are the input's."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None: ...


@dataclass(frozen=True)
class FieldsStoreMapper:
    """Key from field ``key_field``, value from field ``value_field``."""

    description: RedisDataTypeDescription
    key_field: str
    value_field: str

    def get_data_type_description(self) -> RedisDataTypeDescription:
        return self.description

    def get_key_from_tuple(self, tup: Tuple) -> str:
        return tup[self.key_field]

    def get_value_from_tuple(self, tup: Tuple) -> Any:
        return tup[self.value_field]


@dataclass(frozen=True)
class FieldsLookupMapper:
    """Key from field ``key_field``; emits ``[key, value]`` on ``output_fields``."""

    description: RedisDataTypeDescription
    key_field: str
    output_fields: tuple[str, ...] = ("key", "value")

    def get_data_type_description(self) -> RedisDataTypeDescription:
        return self.description

    def get_key_from_tuple(self, tup: Tuple) -> str:
        return tup[self.key_field]

    def to_tuple(self, tup: Tuple, value: Any) -> list[list[Any]]:
        return [[self.get_key_from_tuple(tup), value]]

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.output_fields))


@dataclass(frozen=True)
class FieldsFilterMapper:
    """Key from field ``key_field``; passes tuples whose fields are ``fields``."""

    description: RedisDataTypeDescription
    key_field: str
    fields: tuple[str, ...] | list[str]

    def get_data_type_description(self) -> RedisDataTypeDescription:
        return self.description

    def get_key_from_tuple(self, tup: Tuple) -> str:
        return tup[self.key_field]

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.fields))


def _text(value: Any) -> Any:
    """What Redis answered, with bytes read as UTF-8 text (Jedis's string API)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_text(v) for v in value]
    return value


def _lon_lat(key: str, value: Any) -> tuple[float, float]:
    parts = str(_text(value)).split(":")
    if len(parts) != 2:
        raise ValueError(f"a GEO value is 'longitude:latitude', got {value!r} for {key!r}")
    return float(parts[0]), float(parts[1])


class _RedisBolt(Bolt):
    """What the three share: the connection, made in ``prepare``, and the ack-or-fail of each
    input around one Redis call."""

    what = "redis bolt"

    def __init__(self, config: dict[str, Any], mapper: RedisMapper,
                 retries: int = DEFAULT_RETRIES):
        self.config = dict(config)
        self.mapper = mapper
        self.description = mapper.get_data_type_description()
        self.retries = retries

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.collector = collector
        self.component = context.component_id
        self.client = connect(self.config)
        # redis-py's default retries back off for seconds, per call: a bolt would stall that
        # long on every input while Redis is down, where failing it at once lets the spout
        # replay it (as Storm's Jedis does).
        self.client.set_retry(Retry(NoBackoff(), self.retries))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declare = getattr(self.mapper, "declare_output_fields", None)
        if declare is not None:   # a lookup's or filter's mapper; a store emits nothing
            declare(declarer)

    def execute(self, tup: Tuple) -> None:
        try:
            self.process(tup, self.mapper.get_key_from_tuple(tup),
                         self.description.additional_key)
        except Exception as exc:   # redis.RedisError, or a mapper's
            self.collector.report_error(exc)
            self.collector.fail(tup, f"redis: {type(exc).__name__}: {exc}")
            return
        self.collector.ack(tup)

    def process(self, tup: Tuple, key: str, add: str | None) -> None:
        """One input's Redis call (``add``: the description's additional key)."""
        raise NotImplementedError

    def cleanup(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()


class RedisStoreBolt(_RedisBolt, Sink):
    """Stores each input's value at its key (storm-redis's ``RedisStoreBolt``; see the module
    doc for the command per data type). Emits nothing. Effectively-once refuses it: use
    ``stormlet.sinks.upsert.RedisUpsertBolt``."""

    why_not = ("it writes each input as it comes, outside the checkpoints (a LIST, SET or "
               "counter gains a replayed input twice; a value rolled back stays written)")

    def process(self, tup: Tuple, key: str, add: str | None) -> None:
        value = self.mapper.get_value_from_tuple(tup)   # type: ignore[attr-defined]
        kind, redis = self.description.data_type, self.client
        if kind is RedisDataType.STRING:
            redis.set(key, value)
        elif kind is RedisDataType.LIST:
            redis.rpush(key, value)
        elif kind is RedisDataType.HASH:
            redis.hset(add, key, value)
        elif kind is RedisDataType.SET:
            redis.sadd(key, value)
        elif kind is RedisDataType.SORTED_SET:
            redis.zadd(add, {key: float(value)})
        elif kind is RedisDataType.HYPER_LOG_LOG:
            redis.pfadd(key, value)
        else:   # GEO
            lon, lat = _lon_lat(key, value)
            redis.geoadd(add, (lon, lat, key))


class RedisLookupBolt(_RedisBolt):
    """Looks each input's key up and emits the mapper's ``to_tuple(input, value)``, anchored
    (storm-redis's ``RedisLookupBolt``)."""

    def __init__(self, config: dict[str, Any], mapper: RedisLookupMapper,
                 retries: int = DEFAULT_RETRIES):
        super().__init__(config, mapper, retries)

    def process(self, tup: Tuple, key: str, add: str | None) -> None:
        kind, redis = self.description.data_type, self.client
        if kind is RedisDataType.STRING:
            value = redis.get(key)
        elif kind is RedisDataType.LIST:
            value = redis.lpop(key)
        elif kind is RedisDataType.HASH:
            value = redis.hget(add, key)
        elif kind is RedisDataType.SET:
            value = redis.scard(key)
        elif kind is RedisDataType.SORTED_SET:
            value = redis.zscore(add, key)
        elif kind is RedisDataType.HYPER_LOG_LOG:
            value = redis.pfcount(key)
        else:   # GEO
            value = redis.geopos(add, key)[0]
        for values in self.mapper.to_tuple(tup, _text(value)):   # type: ignore[attr-defined]
            self.collector.emit(values, tup)


class RedisFilterBolt(_RedisBolt):
    """Passes on (emits, anchored) the inputs whose key Redis holds, and acks every input
    (storm-redis's ``RedisFilterBolt``). LIST is refused: Storm's filter has no LIST test."""

    def __init__(self, config: dict[str, Any], mapper: RedisFilterMapper,
                 retries: int = DEFAULT_RETRIES):
        description = mapper.get_data_type_description()
        if description.data_type is RedisDataType.LIST:
            raise ValueError("RedisFilterBolt cannot filter by a LIST (no membership test): "
                             "use a SET")
        if description.data_type is RedisDataType.SET and not description.additional_key:
            raise ValueError("RedisFilterBolt with a SET needs the description's "
                             "additional_key: the set the keys are looked up in")
        super().__init__(config, mapper, retries)

    def process(self, tup: Tuple, key: str, add: str | None) -> None:
        kind, redis = self.description.data_type, self.client
        if kind is RedisDataType.STRING:
            found = bool(redis.exists(key))
        elif kind is RedisDataType.HASH:
            found = bool(redis.hexists(add, key))
        elif kind is RedisDataType.SET:
            found = bool(redis.sismember(add, key))
        elif kind is RedisDataType.SORTED_SET:
            found = redis.zrank(add, key) is not None
        elif kind is RedisDataType.HYPER_LOG_LOG:
            found = redis.pfcount(key) > 0
        else:   # GEO
            found = redis.geopos(add, key)[0] is not None
        if found:
            self.collector.emit(list(tup.values), tup)

