"""Values of registered types (stormlet/serializers.py) through a topology, for
tests/api/test_serializers.py: in local mode, on a cluster (across workers), into the failed-message
log, and in a Spark backfill.

The spout emits ``test.count`` tuples ``[i, SAMPLES[i % len(SAMPLES)]]``, tracked. ``enrich``
passes them on (a value of None, as a backfill's input has, becomes the sample); ``check``, two
tasks behind a fields grouping on the value (which hashes it), compares each value with its
sample, type and repr included, writes what it saw to ``check-<task>.json`` in ``test.dir``,
emits ``[i, value, verdict]`` and fails the tuples numbered below ``test.fail.below`` (acks
the rest).
With ``topology.spout.dead.letter.attempts`` 1, a failed tuple's values go to the log.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

from stormlet import Bolt, Spout, TopologyBuilder, register_serialization


@dataclasses.dataclass(frozen=True)
class Point:
    """A user's dataclass, registered without a serializer (field by field)."""

    x: int
    y: float


class Money:
    """A user's class, registered with its serializer."""

    def __init__(self, cents: int, currency: str):
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (other.cents,
                                                                            other.currency)

    def __hash__(self) -> int:
        return hash((self.cents, self.currency))

    def __repr__(self) -> str:
        return f"Money({self.cents}, {self.currency!r})"


class MoneySerializer:
    def encode(self, money: Money) -> list:
        return [money.cents, money.currency]

    def decode(self, data: list) -> Money:
        return Money(*data)


def samples() -> list:
    """One value of each default type (datetime naive, aware with a fixed offset and with a
    zone in its second 02:30 of a night the clocks go back), nested ones, and the user's."""
    return [
        dt.datetime(2026, 11, 29, 17, 5, 1, 250),
        dt.datetime(2026, 3, 29, 1, 30, tzinfo=dt.timezone.utc),
        dt.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Paris")),
        dt.date(2024, 2, 29),
        dt.time(23, 59, 59, 999999),
        dt.time(8, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        dt.timedelta(days=-1, seconds=3, microseconds=7),
        Decimal("3.14159265358979323846264338327950288"),
        Decimal("-0.00"),
        uuid.UUID("5c0f3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f60"),
        (1, "two", (3.0, None)),
        {3, 1, 2},
        frozenset({"a", "b"}),
        {"when": dt.date(2020, 1, 1), "amounts": [Decimal("1.5")]},
        Point(3, 4.5),
        Money(1999, "EUR"),
        [Point(-1, 2.0), Money(5, "USD"), {uuid.UUID(int=7)}],
    ]


SAMPLES = samples()


def same(got: object, expected: object) -> bool:
    """Equal and of the same type, all the way down; a datetime or time with the same wall
    time, zone and fold too (== compares instants)."""
    if type(got) is not type(expected):
        return False
    # Below, ``got`` is of ``expected``'s type (above), which mypy does not carry over.
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(expected) and all(map(same, got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(same(got[k], expected[k]) for k in expected)
    if isinstance(expected, (dt.datetime, dt.time)) and isinstance(got, (dt.datetime, dt.time)):
        return (got == expected and got.fold == expected.fold
                and repr(got.tzinfo) == repr(expected.tzinfo)
                and got.replace(tzinfo=None) == expected.replace(tzinfo=None))
    return got == expected


class TypedSpout(Spout):
    outputs = ["i", "value"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf["test.count"])
        self.next_i = 0

    def next_tuple(self):
        if self.next_i < self.count:
            i = self.next_i
            self.next_i += 1
            self.collector.emit([i, SAMPLES[i % len(SAMPLES)]], msg_id=i)


class Enrich(Bolt):
    outputs = ["i", "value"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        i, value = tup.values
        if value is None:
            value = SAMPLES[i % len(SAMPLES)]
        self.collector.emit([i, value], anchors=tup)
        self.collector.ack(tup)


class Check(Bolt):
    outputs = ["i", "value", "verdict"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.fail_below = int(conf.get("test.fail.below") or 0)
        self.directory = conf.get("test.dir")
        self.path = os.path.join(self.directory, f"check-{context.task_id}.json") \
            if self.directory else None
        self.seen: dict[str, str] = {}

    def execute(self, tup):
        i, value = tup.values
        expected = SAMPLES[i % len(SAMPLES)]
        verdict = "ok" if same(value, expected) else f"{value!r} is not {expected!r}"
        self.seen[str(i)] = verdict
        if self.path:
            aside = self.path + ".tmp"
            with open(aside, "w") as f:
                json.dump({"pid": os.getpid(), "seen": self.seen}, f)
            os.replace(aside, self.path)
        self.collector.emit([i, value, verdict], anchors=tup)
        if i < self.fail_below:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("numbers", TypedSpout(), 1)
builder.set_bolt("enrich", Enrich(), 1).shuffle_grouping("numbers")
builder.set_bolt("check", Check(), 2).fields_grouping("enrich", ["value"])
topology = builder.build()

config: dict = {}
register_serialization(config, Point)
register_serialization(config, Money, MoneySerializer)
