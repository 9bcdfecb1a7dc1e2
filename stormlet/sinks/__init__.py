"""Bolts that write to other systems, as Storm keeps in its ``external/`` tree: the writing side
of ``stormlet.sources``.

- ``stormlet.sinks.kafka``: ``KafkaBolt`` (storm-kafka-client's), acking an input once the
  broker has its record.
- ``stormlet.sinks.redis``: ``RedisStoreBolt``, ``RedisLookupBolt`` and ``RedisFilterBolt``
  (storm-redis's), with their mappers.

Import them from their modules: each needs its client library (confluent-kafka, redis) only
when used.
"""
