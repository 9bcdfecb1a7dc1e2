"""The Redis state backend: a namespace is three hashes on a Redis server.

    stormlet:<namespace>           the committed state (encoded key -> encoded value)
    stormlet:<namespace>$prepare   the prepared checkpoint (an empty value deletes its key)
    stormlet:<namespace>$txid      "prepared" and "committed": checkpoint ids

A prepare is one MULTI/EXEC transaction and a commit one Lua script, so Redis applies each
whole or not at all and a reader never sees half a checkpoint. While Redis is unreachable every
call raises ``StateError``: the checkpoint fails, its tuples are replayed, and what was
committed stays as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .store import Changes, StateError

KEY_PREFIX = "stormlet:"
# Seconds a command waits for Redis before the call fails.
SOCKET_TIMEOUT_SECS = 5.0
# Encoded keys fetched per HSCAN round trip.
SCAN_COUNT = 1000

_DELETED = b""

# KEYS: committed, prepared, txids; ARGV: txid. Returns 1 if it committed, 0 if nothing was
# prepared.
_COMMIT = """
local prepared = redis.call('HGET', KEYS[3], 'prepared')
if not prepared then return 0 end
if prepared ~= ARGV[1] then
  return redis.error_reply('cannot commit checkpoint ' .. ARGV[1] ..
                           ': the prepared checkpoint is ' .. prepared)
end
local changes = redis.call('HGETALL', KEYS[2])
for i = 1, #changes, 2 do
  if changes[i + 1] == '' then
    redis.call('HDEL', KEYS[1], changes[i])
  else
    redis.call('HSET', KEYS[1], changes[i], changes[i + 1])
  end
end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[3], 'prepared')
redis.call('HSET', KEYS[3], 'committed', ARGV[1])
return 1
"""


def connect(config: dict[str, Any]) -> Any:
    """A Redis client from ``topology.state.provider.config``: ``host``, ``port``, ``db``,
    ``password`` (or Storm's ``{"jedisPoolConfig": {"host": ..., "port": ..., "database": ...,
    "password": ...}}``)."""
    try:
        import redis
    except ImportError:
        raise StateError("the redis state provider needs the redis package: "
                         "pip install 'stormlet[redis]'") from None
    options = dict(config.get("jedisPoolConfig") or config)
    return redis.Redis(host=options.get("host", "127.0.0.1"), port=int(options.get("port", 6379)),
                       db=int(options.get("db", options.get("database", 0))),
                       password=options.get("password"),
                       socket_timeout=float(options.get("timeout", SOCKET_TIMEOUT_SECS)),
                       socket_connect_timeout=SOCKET_TIMEOUT_SECS)


class RedisStore:
    """A ``Store`` for ``namespace`` on the server ``client`` talks to."""

    def __init__(self, client: Any, namespace: str):
        self._client = client
        self.namespace = namespace
        self.committed_key = f"{KEY_PREFIX}{namespace}"
        self.prepared_key = f"{self.committed_key}$prepare"
        self.txid_key = f"{self.committed_key}$txid"
        self._commit_script = client.register_script(_COMMIT)

    def get(self, key: bytes) -> bytes | None:
        return self._call(self._client.hget, self.committed_key, key)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._call(lambda: list(self._client.hscan_iter(self.committed_key,
                                                                     count=SCAN_COUNT))))

    def prepare(self, txid: int, changes: Changes) -> None:
        def staged() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self.prepared_key)
            if changes:
                pipe.hset(self.prepared_key, mapping={
                    k: _DELETED if v is None else v for k, v in changes.items()})
            pipe.hset(self.txid_key, "prepared", txid)
            pipe.execute()
        self._call(staged)

    def commit(self, txid: int) -> None:
        self._call(self._commit_script,
                   keys=[self.committed_key, self.prepared_key, self.txid_key], args=[txid])

    def rollback(self) -> None:
        def dropped() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self.prepared_key)
            pipe.hdel(self.txid_key, "prepared")
            pipe.execute()
        self._call(dropped)

    def close(self) -> None:
        self._client.close()

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import redis
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StateError(f"redis state {self.committed_key}: {exc}") from None
