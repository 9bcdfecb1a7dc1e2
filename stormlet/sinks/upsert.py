"""Idempotent upsert sinks that take part in effectively-once: each write is keyed, so a write
replayed after a rollback overwrites rather than adds, and a checkpoint's writes become visible
when it commits, in one atomic step with the writing task's mark (see ``checkpointed``).

    totals = RedisUpsertBolt(REDIS, "word-totals", key_fields=["word"], value_field="total")
    builder.set_bolt("to-redis", totals).fields_grouping("count", ["word"])

    table = EmbeddedUpsertBolt("word-totals", key_fields=["word"], value_field="total")
    builder.set_bolt("to-table", table).fields_grouping("count", ["word"])
    read_table(state_file(state_dir, "my-topology"), "word-totals")   # {"w1": 17, ...}

The key is the named fields' values joined by ``:`` (``str`` of each); the value is field
``value_field``'s. Within a checkpoint the last write to a key wins; across checkpoints, in
checkpoint order. Readers see whole checkpoints only: a checkpoint that is rolled back leaves
nothing behind. Send each key to one task (fields grouping on the key fields): two tasks writing
one key publish in no set order.

- ``RedisUpsertBolt``: a HASH at ``hash_key``; a checkpoint's writes and the task's mark (in
  the hash ``<hash_key>:stormlet-marks``, field ``<topology>.<component>.<task>``) go in one
  MULTI/EXEC, under WATCH of the marks, after reading the mark: a publish whose checkpoint is
  out already (a retried COMMIT, a zombie) writes nothing.
- ``EmbeddedUpsertBolt``: rows of the topology's embedded state file (or ``path``), namespace
  ``upsert:<table>``, keyed and valued as state is (msgpack); ``read_table`` reads them. The
  rows and the mark go in one SQLite transaction.

The marks follow the checkpoint txids of the topology's state: a topology whose state was wiped
starts its txids again, so wipe the marks with it (the ``...:stormlet-marks`` hash; the
embedded rows of ``txids`` whose ``ns`` starts with ``upsert:<table>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..state.embedded import EmbeddedStore
from ..state.store import decode_key, decode_value, encode_key, encode_value
from ..tuples import Tuple
from .checkpointed import CheckpointedSink

TABLE_PREFIX = "upsert:"      # an embedded table's namespace: upsert:<table>
MARKS_SUFFIX = ":stormlet-marks"


class UpsertBolt(CheckpointedSink):
    """What the upsert sinks share: a write is ``[key, value]`` from the input's fields."""

    def __init__(self, key_fields: Sequence[str], value_field: str):
        if isinstance(key_fields, str) or not key_fields:
            raise ValueError(f"key_fields must be a non-empty list of field names, got "
                             f"{key_fields!r}")
        self.key_fields = tuple(key_fields)
        self.value_field = value_field

    def key_of(self, tup: Tuple) -> str:
        return ":".join(str(tup[f]) for f in self.key_fields)

    def gather(self, tup: Tuple) -> Any:
        return [self.key_of(tup), tup[self.value_field]]

    def merge(self, writes: list[Any]) -> list[Any]:
        return [[key, value] for key, value in dict(writes).items()]   # the last per key

    def publish(self, txid: int, writes: list[Any], ahead: bool) -> None:
        self.upsert(self.writer, txid, writes)

    def publish_former(self, task: int, txid: int, writes: list[Any]) -> None:
        self.upsert(self.writer_of(task), txid, writes)

    def upsert(self, writer: str, txid: int, writes: list[Any]) -> None:
        """Upsert ``writes`` with ``writer``'s mark ``txid``, in one atomic step, unless that
        mark is ``txid`` or later already."""
        raise NotImplementedError


class RedisUpsertBolt(UpsertBolt):
    """Upserts ``key -> value`` into the Redis HASH ``hash_key``, a checkpoint at a time (see
    the module's docstring). ``config`` is the Redis state provider's."""

    def __init__(self, config: dict[str, Any], hash_key: str, key_fields: Sequence[str],
                 value_field: str):
        super().__init__(key_fields, value_field)
        self.config = dict(config)
        self.hash_key = hash_key

    def started(self) -> None:
        from ..state.redis_store import connect

        self._close_client()   # that of an INITSTATE that failed, if this one is tried again
        self.client = connect(self.config)

    def upsert(self, writer: str, txid: int, writes: list[Any]) -> None:
        marks = self.hash_key + MARKS_SUFFIX

        def write(pipe: Any) -> None:
            mark = pipe.hget(marks, writer)
            if mark is not None and int(mark) >= txid:
                return   # out already
            pipe.multi()
            if writes:
                pipe.hset(self.hash_key, mapping=dict(writes))
            pipe.hset(marks, writer, txid)

        self.client.transaction(write, marks)

    def cleanup(self) -> None:
        self._close_client()

    def _close_client(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()


class EmbeddedUpsertBolt(UpsertBolt):
    """Upserts ``key -> value`` into table ``table`` of the embedded store, a checkpoint at a
    time (see the module's docstring). ``path``: the SQLite file; by default the topology's
    embedded state file (``state_file(state dir, topology)``)."""

    def __init__(self, table: str, key_fields: Sequence[str], value_field: str,
                 path: str | Path | None = None):
        super().__init__(key_fields, value_field)
        self.table = table
        self.path = None if path is None else str(path)

    def started(self) -> None:
        from ..state.embedded import state_file
        from ..state.providers import state_dir

        path = self.path or state_file(state_dir(self.conf), self.topology)
        self._close_store()   # that of an INITSTATE that failed, if this one is tried again
        self.store = EmbeddedStore(path, TABLE_PREFIX + self.table)

    def upsert(self, writer: str, txid: int, writes: list[Any]) -> None:
        self.store.publish(writer, txid,
                           [(encode_key(key), encode_value(key, value)) for key, value in writes])

    def cleanup(self) -> None:
        self._close_store()

    def _close_store(self) -> None:
        store = getattr(self, "store", None)
        if store is not None:
            store.close()


def read_table(path: str | Path, table: str) -> dict[str, Any]:
    """The committed rows of an ``EmbeddedUpsertBolt``'s ``table`` in the SQLite file
    ``path``."""
    store = EmbeddedStore(path, TABLE_PREFIX + table)
    try:
        return {decode_key(k): decode_value(v) for k, v in store.scan()}
    finally:
        store.close()
