"""Bolts that write to other systems, as Storm keeps in its ``external/`` tree: the writing side
of ``stormlet.sources``.

- ``stormlet.sinks.kafka``: ``KafkaBolt`` (storm-kafka-client's), acking an input once the
  broker has its record.
- ``stormlet.sinks.redis``: ``RedisStoreBolt``, ``RedisLookupBolt`` and ``RedisFilterBolt``
  (storm-redis's), with their mappers.
- Effectively-once (``topology.guarantee``) refuses a sink that cannot take part
  (``base.Sink``) and takes those that commit their writes with the checkpoint
  (``checkpointed``): ``kafka.TransactionalKafkaBolt``, ``upsert.RedisUpsertBolt`` and
  ``upsert.EmbeddedUpsertBolt``.

Import them from their modules: each needs its client library (confluent-kafka, redis) only
when used.
"""
