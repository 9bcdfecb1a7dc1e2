"""A real Kafka-protocol cluster for tests: librdkafka's mock cluster, driven through ctypes.

The library is the one bundled in the confluent-kafka wheel. The cluster runs in threads of this
test process and listens on random 127.0.0.1 ports, so any Kafka client in any process (a spout in
a worker subprocess too) can connect to ``bootstrap_servers`` over TCP.

Usage::

    from kafka_mock import MockKafkaCluster, mock_kafka   # mock_kafka: a module-scoped fixture

    def test_something(mock_kafka):
        mock_kafka.create_topic("events", partitions=4)
        mock_kafka.produce("events", [b"a", b"b"], partition=0)
        mock_kafka.delete_records("events", 0, before_offset=1)  # readers below 1 get out-of-range
        mock_kafka.broker_down(1)                                 # broker ids are 1..n_brokers
        mock_kafka.broker_up(1)

The mock API is experimental in librdkafka (no ABI promise), which is why pyproject.toml pins
confluent-kafka. Limits seen with 2.16: no admin API (topics come from ``create_topic`` or
auto-creation), no timestamp lookup, random ports only.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

log = logging.getLogger(__name__)

_RD_KAFKA_PRODUCER = 0
_RD_KAFKA_CONF_OK = 0
_PRODUCE_API_KEY = 0   # Kafka's request type number for Produce


class MockKafkaError(RuntimeError):
    """The mock cluster or its library failed; the message says which call and why."""


def _library_path() -> Path:
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        raise MockKafkaError("confluent-kafka is not installed: pip install -e '.[test]'")
    libs = Path(spec.origin).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise MockKafkaError(
            f"no librdkafka*.so* in {libs}: the mock cluster needs the confluent-kafka wheel's "
            "bundled librdkafka (a confluent-kafka built against a system librdkafka does not "
            "ship it)")
    return found[0]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give every function we call its C signature, so ctypes neither truncates pointers to int
    nor passes a Python int where an int64_t is expected."""
    vp, cp, i32, i64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64
    err = ctypes.c_int  # rd_kafka_resp_err_t
    signatures = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, cp, cp, cp, ctypes.c_size_t], ctypes.c_int),
        "rd_kafka_conf_destroy": ([vp], None),
        "rd_kafka_new": ([ctypes.c_int, vp, cp, ctypes.c_size_t], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_err2str": ([err], cp),
        "rd_kafka_mock_cluster_new": ([vp, ctypes.c_int], vp),
        "rd_kafka_mock_cluster_destroy": ([vp], None),
        "rd_kafka_mock_cluster_bootstraps": ([vp], cp),
        "rd_kafka_mock_topic_create": ([vp, cp, ctypes.c_int, ctypes.c_int], err),
        "rd_kafka_mock_partition_delete_records": ([vp, cp, i32, i64], err),
        "rd_kafka_mock_broker_set_down": ([vp, i32], err),
        "rd_kafka_mock_broker_set_up": ([vp, i32], err),
        "rd_kafka_mock_push_request_errors_array": (
            [vp, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(err)], None),
        "rd_kafka_mock_clear_request_errors": ([vp, ctypes.c_int16], None),
    }
    for name, (argtypes, restype) in signatures.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise MockKafkaError(f"{lib._name} has no {name}: the mock API changed; use the "
                                 "confluent-kafka version pinned in pyproject.toml") from None
        fn.argtypes, fn.restype = argtypes, restype
    return lib


_lib: ctypes.CDLL | None = None


def _rdkafka() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        path = _library_path()
        try:
            # Same path as confluent_kafka's own import, so the dynamic loader shares one copy.
            _lib = _declare(ctypes.CDLL(str(path)))
        except OSError as e:
            raise MockKafkaError(f"cannot load {path}: {e}") from e
    return _lib


class MockKafkaCluster:
    """``n_brokers`` mock Kafka brokers (ids 1..n) on 127.0.0.1, alive until ``close()``."""

    def __init__(self, n_brokers: int = 1) -> None:
        lib = _rdkafka()
        self._lib = lib
        self._producer: Producer | None = None
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        # The handle only hosts the cluster; it never connects anywhere, so keep its own
        # "no bootstrap.servers" notice and connection chatter out of the test output.
        set_level = lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        if set_level != _RD_KAFKA_CONF_OK:
            lib.rd_kafka_conf_destroy(conf)
            raise MockKafkaError(f"rd_kafka_conf_set(log_level): {errstr.value.decode()}")
        rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not rk:
            lib.rd_kafka_conf_destroy(conf)  # rd_kafka_new owns conf only when it succeeds
            raise MockKafkaError(f"rd_kafka_new: {errstr.value.decode()}")
        self._rk = rk
        self._mc = lib.rd_kafka_mock_cluster_new(rk, n_brokers)
        if not self._mc:
            lib.rd_kafka_destroy(rk)
            raise MockKafkaError(f"rd_kafka_mock_cluster_new({n_brokers}) failed "
                                 "(see librdkafka's log above)")
        self.n_brokers = n_brokers
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        log.info("mock Kafka cluster with %d broker(s) at %s", n_brokers, self.bootstrap_servers)

    def _check(self, err: int, what: str) -> None:
        if err:
            text = self._lib.rd_kafka_err2str(err).decode()
            raise MockKafkaError(f"{what}: {text} (error {err})")

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        self._check(self._lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions,
                                                          replication_factor),
                    f"create topic {name!r} with {partitions} partitions")

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Drop the records below ``before_offset`` (the partition's low watermark becomes it), as
        retention would; a consumer positioned below it then gets OFFSET_OUT_OF_RANGE."""
        self._check(self._lib.rd_kafka_mock_partition_delete_records(
            self._mc, topic.encode(), partition, before_offset),
            f"delete records of {topic!r} partition {partition} before offset {before_offset}")

    def broker_down(self, broker_id: int) -> None:
        """Disconnect the broker's clients and refuse new connections (no leader change)."""
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._mc, broker_id),
                    f"broker {broker_id} down")

    def broker_up(self, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._mc, broker_id),
                    f"broker {broker_id} up")

    def fail_produce_requests(self, *errors: int) -> None:
        """Answer the next ``len(errors)`` produce requests (to any broker) with these error
        codes (``KafkaError.MSG_SIZE_TOO_LARGE``, say), in order: a delivery failure injected."""
        codes = (ctypes.c_int * len(errors))(*errors)
        self._lib.rd_kafka_mock_push_request_errors_array(self._mc, _PRODUCE_API_KEY,
                                                          len(errors), codes)

    def clear_produce_errors(self) -> None:
        """Forget the errors ``fail_produce_requests`` queued that no request has met yet."""
        self._lib.rd_kafka_mock_clear_request_errors(self._mc, _PRODUCE_API_KEY)

    def produce(self, topic: str, values: Iterable[bytes | str], partition: int | None = None,
                key: bytes | str | None = None, timeout: float = 30.0) -> int:
        """Append ``values`` (to ``partition``, or spread by key or at random) and wait until all
        are acknowledged; returns how many were written."""
        if self._producer is None:
            self._producer = Producer({
                "bootstrap.servers": self.bootstrap_servers,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                "logger": log,
            })
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failures.append(err)

        kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
        count = 0
        for value in values:
            while True:
                try:
                    self._producer.produce(topic, value, key, on_delivery=on_delivery, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self._producer.poll(0.05)
            count += 1
        left = self._producer.flush(timeout)
        if left or failures:
            raise MockKafkaError(f"produce to {topic!r}: {left} message(s) undelivered after "
                                 f"{timeout}s, "
                                 f"{len(failures)} failed (first: {failures[:1]})")
        return count

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> MockKafkaCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def mock_kafka() -> Iterator[MockKafkaCluster]:
    """A one-broker mock cluster shared by a test module; tests use their own topic names."""
    with MockKafkaCluster(n_brokers=1) as cluster:
        yield cluster
