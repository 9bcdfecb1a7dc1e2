"""The chaos suite's stateful topology with a sink of effectively-once: what the harness runs
for a stateful run in that mode (``ChaosRun(..., redis=..., guarantee="effectively-once")``).

``committed``, a ``RedisUpsertBolt`` fed by ``tally`` (fields grouping on the id), upserts each
message's id -> its count into the hash ``SINK_HASH`` of the Redis that serves the state (its
server from ``topology.state.provider.config``, so workers on any host reach it as the state's
store does). A failure-free run writes every message's id once, with 1: the harness's checker
requires exactly that of the committed hash after the faults.
"""

from __future__ import annotations

from chaos_stateful_topology import config, stateful_builder  # noqa: F401

from stormlet.sinks.upsert import RedisUpsertBolt
from stormlet.state.providers import provider_config

SINK_HASH = "chaos-sink"


class StateRedisUpsertBolt(RedisUpsertBolt):
    """A ``RedisUpsertBolt`` on the Redis of the topology's state (its provider config, read
    at prepare: the harness's server)."""

    def __init__(self) -> None:
        super().__init__({}, SINK_HASH, key_fields=["id"], value_field="count")

    def prepare(self, conf, context, collector):
        self.config = provider_config(conf)
        super().prepare(conf, context, collector)


builder = stateful_builder()
builder.set_bolt("committed", StateRedisUpsertBolt(), parallelism=2).fields_grouping(
    "tally", ["id"])
topology = builder.build()
