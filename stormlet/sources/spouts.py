"""The offset-tracking spout over each backend: stormlet's local partitioned log and Kafka.

    builder.set_spout("events", LogSpout("data/events", spout_id="events-reader"), parallelism=2)
    builder.set_spout("orders", KafkaSpout("broker:9092", "orders", spout_id="orders-reader"))
    # or the brokers from the topology config (-c kafka.spout.bootstrap.servers=broker:9092):
    builder.set_spout("orders", KafkaSpout(topic="orders", spout_id="orders-reader"))

Both take every option of ``OffsetSpout``.
"""

from __future__ import annotations

import os
from typing import Any

from .. import config as cfg
from .offset_spout import OffsetSpout
from .offset_store import FileOffsetStore, MemoryOffsetStore, OffsetStore
from .partitioned_log import failed_dir, offsets_dir


class LogSpout(OffsetSpout):
    """Reads a local partitioned log, at ``path`` or at the path the topology config gives under
    ``path_config`` (so ``stormlet submit ... -c words.log=/data/words`` can choose it). In local
    mode its commits sit beside the log, in ``<log>/_offsets`` (where ``stormlet log describe``
    shows them), and dead letters in ``<log>/_failed``."""

    def __init__(self, path: str | None = None, *, spout_id: str,
                 path_config: str | None = None, **options: Any):
        if (path is None) == (path_config is None):
            raise ValueError("LogSpout needs exactly one of path and path_config")
        self.path_config = path_config
        self.path = os.path.abspath(path) if path is not None else None
        super().__init__(self._source(), spout_id=spout_id, **options)

    def _source(self) -> Any:
        from .log_source import LogSource

        return LogSource(self.path) if self.path is not None else None

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        if self.path_config is not None:
            path = conf.get(self.path_config)
            if not path:
                raise ValueError(f"{context.component_id}: the log path comes from topology "
                                 f"config {self.path_config!r}, which is not set")
            self.path = os.path.abspath(str(path))
            self.source = self._source()
        super().open(conf, context, collector)

    def local_offset_store(self) -> OffsetStore:
        assert self.path is not None   # given, or set by open from the topology config
        return FileOffsetStore(offsets_dir(self.path))

    def default_failed_dir(self) -> str:
        assert self.path is not None
        return str(failed_dir(self.path))


class KafkaSpout(OffsetSpout):
    """Reads a Kafka topic with manual partition assignment (no consumer group rebalancing, no
    Kafka-side commits: offsets are kept by stormlet). Needs ``pip install stormlet[kafka]``.

    ``bootstrap_servers``: the brokers; None takes them at ``open`` from the topology config,
    under ``servers_config`` (by default ``kafka.spout.bootstrap.servers``), so a worker that
    imports the topology file needs no broker address in it. ``topic``, or ``topic_config``:
    the config key that names it. ``consumer_config``: librdkafka settings, over those of the
    topology config's ``kafka.spout.consumer.config``."""

    def __init__(self, bootstrap_servers: str | None = None, topic: str | None = None, *,
                 spout_id: str, consumer_config: dict[str, Any] | None = None,
                 servers_config: str = cfg.KAFKA_SPOUT_BOOTSTRAP_SERVERS,
                 topic_config: str | None = None, **options: Any):
        if (topic is None) == (topic_config is None):
            raise ValueError("KafkaSpout needs exactly one of topic and topic_config")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.consumer_config = dict(consumer_config or {})
        self.servers_config = servers_config
        self.topic_config = topic_config
        source = None
        if bootstrap_servers is not None and topic is not None:
            source = self._source(bootstrap_servers, topic, self.consumer_config)
        else:   # its source is made at open: a setting it cannot take is refused now all the same
            wrong = cfg.kafka_consumer_config_problem(self.consumer_config)
            if wrong is not None:
                raise ValueError(f"KafkaSpout (spout_id {spout_id!r}): {wrong}")
        super().__init__(source, spout_id=spout_id, **options)

    @staticmethod
    def _source(servers: str, topic: str, consumer_config: dict[str, Any]) -> Any:
        from .kafka import KafkaSource

        return KafkaSource(servers, topic, consumer_config)

    def config_problems(self, conf: dict[str, Any]) -> list[str]:
        """Its brokers, its topic and its consumer settings, where ``conf`` gives them."""
        problems = []
        if not (self.bootstrap_servers or conf.get(self.servers_config)):
            problems.append(f"a KafkaSpout with no bootstrap servers: give bootstrap_servers, "
                            f"or set {self.servers_config!r} in the topology config")
        if self.topic is None and not conf.get(str(self.topic_config)):
            problems.append(f"a KafkaSpout whose topic comes from topology config "
                            f"{self.topic_config!r}, which is not set")
        try:
            self._consumer_config(conf)
        except ValueError as exc:
            problems.append(f"a KafkaSpout's consumer config: {exc}")
        return problems

    def _consumer_config(self, conf: dict[str, Any]) -> dict[str, Any]:
        """The librdkafka settings: the topology config's, then its own; ValueError if
        they cannot be used."""
        consumer = {**cfg.json_dict(conf.get(cfg.KAFKA_SPOUT_CONSUMER_CONFIG)),
                    **self.consumer_config}
        wrong = cfg.kafka_consumer_config_problem(consumer)
        if wrong is not None:
            raise ValueError(wrong)
        return consumer

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        problems = self.config_problems(conf)
        if problems:   # submitted without the check: a LocalCluster's own runtime, say
            raise ValueError(f"spout {context.component_id!r}: {'; '.join(problems)}")
        servers = self.bootstrap_servers or conf[self.servers_config]
        topic = self.topic if self.topic is not None else conf[str(self.topic_config)]
        self.source = self._source(str(servers), str(topic), self._consumer_config(conf))
        super().open(conf, context, collector)

    def local_offset_store(self) -> OffsetStore:
        return MemoryOffsetStore(f"kafka:{self.source.name}")

    def source_kind(self) -> str:
        return "kafka"
