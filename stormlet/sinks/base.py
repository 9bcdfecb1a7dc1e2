"""What marks a bolt as a sink, and whether it can take part in effectively-once.

A bolt that writes to a system outside the topology (Kafka, Redis, a file, a database) says so
by subclassing ``Sink``. In ``topology.guarantee: effectively-once`` the topology is refused at
submit unless each sink *takes part*: its writes of a checkpoint become visible only when the
checkpoint commits, and a write replayed after a rollback leaves no second copy. The sinks that
take part are stateful bolts (they get the checkpoint actions) with ``takes_part = True``:
``TransactionalKafkaBolt`` (``stormlet.sinks.kafka``), ``RedisUpsertBolt`` and
``EmbeddedUpsertBolt`` (``stormlet.sinks.upsert``).

Kept free of imports: ``stormlet.state.exactly`` reads it at submit.
"""

from __future__ import annotations


class Sink:
    """Mixed into a bolt that writes outside the topology.

    ``takes_part``: True when the bolt's writes are committed with the checkpoint (it must then
    be a ``StatefulBolt``, which gets the checkpoint's PREPARE, COMMIT and ROLLBACK).
    ``why_not``: for one that does not, why, as the refusal at submit says it."""

    takes_part: bool = False
    why_not: str = ("it writes each input as it comes, outside the checkpoints, so a replay "
                    "after a rollback writes it again")
