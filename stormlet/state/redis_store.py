"""The Redis state backend: a namespace is three hashes on a Redis server.

    stormlet:<namespace>           the committed state (encoded key -> encoded value)
    stormlet:<namespace>$prepare   the prepared checkpoint (an empty value deletes its key)
    stormlet:<namespace>$txid      "prepared" and "committed": checkpoint ids; "owner" and
                                   "epoch": who writes the namespace now (below)

A prepare is one MULTI/EXEC transaction and a commit one Lua script, so Redis applies each
whole or not at all and a reader never sees half a checkpoint. While Redis is unreachable every
call raises ``StateError``: the checkpoint fails, its tuples are replayed, and what was
committed stays as it was.

Writers are fenced (issue 51): a store opened for a task's worker claims the namespace with its
owner (the topology instance) and epoch (the assignment version at which that worker took the
task on). A prepare, commit or rollback is refused, with ``FencedState``, unless the claim is
still its own: once a newer worker of the task opened it (its tasks moved while this one was cut
off from ZooKeeper) or a newer instance of the topology did, the old one writes nothing more.
Opening with an older epoch than the claim of the same owner is refused too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .store import Changes, StateError, check_commit_txid

KEY_PREFIX = "stormlet:"
# Seconds a command waits for Redis before the call fails.
SOCKET_TIMEOUT_SECS = 5.0
# Encoded keys fetched per HSCAN round trip.
SCAN_COUNT = 1000

_DELETED = b""

# Each write checks, first: KEYS[3] is the txids hash, ARGV[1] and ARGV[2] the writer's owner and
# epoch. Refused with "fenced <owner> <epoch>" naming the claim that holds.
_FENCE = """
local owner = redis.call('HGET', KEYS[3], 'owner')
local epoch = redis.call('HGET', KEYS[3], 'epoch')
if owner ~= ARGV[1] or epoch ~= ARGV[2] then
  return redis.error_reply('fenced ' .. tostring(owner) .. ' ' .. tostring(epoch))
end
"""
# KEYS: committed, prepared, txids; ARGV: owner, epoch. Claims the namespace unless the same owner
# holds it at a newer epoch.
_CLAIM = """
local owner = redis.call('HGET', KEYS[3], 'owner')
local epoch = tonumber(redis.call('HGET', KEYS[3], 'epoch') or '-1')
if owner == ARGV[1] and epoch > tonumber(ARGV[2]) then
  return redis.error_reply('fenced ' .. owner .. ' ' .. epoch)
end
redis.call('HSET', KEYS[3], 'owner', ARGV[1], 'epoch', ARGV[2])
return 1
"""
# KEYS: committed, prepared, txids; ARGV: owner, epoch, txid, then encoded keys and values.
_PREPARE = _FENCE + """
redis.call('DEL', KEYS[2])
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[3], 'prepared', ARGV[3])
return 1
"""
# KEYS: committed, prepared, txids; ARGV: owner, epoch.
_ROLLBACK = _FENCE + """
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[3], 'prepared')
return 1
"""

# KEYS: committed, prepared, txids; ARGV: owner, epoch, txid. Returns 1 if it committed, 0 if
# nothing was prepared, and {prepared txid} if another checkpoint is prepared.
_COMMIT = _FENCE + """
local prepared = redis.call('HGET', KEYS[3], 'prepared')
if not prepared then return 0 end
if prepared ~= ARGV[3] then return {prepared} end
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
redis.call('HSET', KEYS[3], 'committed', ARGV[3])
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
    options: dict[str, Any] = dict(config.get("jedisPoolConfig") or config)
    return redis.Redis(host=options.get("host", "127.0.0.1"), port=int(options.get("port", 6379)),
                       db=int(options.get("db", options.get("database", 0))),
                       password=options.get("password"),
                       socket_timeout=float(options.get("timeout", SOCKET_TIMEOUT_SECS)),
                       socket_connect_timeout=SOCKET_TIMEOUT_SECS)


class FencedState(StateError):
    """A write by a worker that no longer owns the namespace (see the module's docstring)."""


class RedisStore:
    """A ``Store`` for ``namespace`` on the server ``client`` talks to, written by ``owner``
    (a topology instance's id) at ``epoch`` (see the module's docstring), which it claims."""

    def __init__(self, client: Any, namespace: str, owner: str = "", epoch: int = 0):
        self._client = client
        self.namespace = namespace
        self.owner = owner
        self.epoch = epoch
        self.committed_key = f"{KEY_PREFIX}{namespace}"
        self.prepared_key = f"{self.committed_key}$prepare"
        self.txid_key = f"{self.committed_key}$txid"
        self._keys = [self.committed_key, self.prepared_key, self.txid_key]
        self._commit_script = client.register_script(_COMMIT)
        self._prepare_script = client.register_script(_PREPARE)
        self._rollback_script = client.register_script(_ROLLBACK)
        self._call(client.register_script(_CLAIM), keys=self._keys, args=self._writer())

    def get(self, key: bytes) -> bytes | None:
        return self._call(self._client.hget, self.committed_key, key)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._call(lambda: list(self._client.hscan_iter(self.committed_key,
                                                                     count=SCAN_COUNT))))

    def prepare(self, txid: int, changes: Changes) -> None:
        flat: list[Any] = []
        for key, value in changes.items():
            flat += [key, _DELETED if value is None else value]
        self._call(self._prepare_script, keys=self._keys, args=[*self._writer(), txid, *flat])

    def commit(self, txid: int) -> None:
        done = self._call(self._commit_script, keys=self._keys, args=[*self._writer(), txid])
        if type(done) is list:
            check_commit_txid(int(done[0]), txid)

    def rollback(self) -> None:
        self._call(self._rollback_script, keys=self._keys, args=self._writer())

    def close(self) -> None:
        self._client.close()

    def _writer(self) -> list[Any]:
        return [self.owner, str(self.epoch)]

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import redis
        try:
            return fn(*args, **kwargs)
        except redis.ResponseError as exc:
            text = str(exc)
            if not text.startswith("fenced "):
                raise StateError(f"redis state {self.committed_key}: {exc}") from None
            _fenced, owner, epoch = text.split(" ", 2)
            who = ("a newer worker of this task (epoch " + epoch + ")" if owner == self.owner
                   else f"topology instance {owner}")
            raise FencedState(
                f"redis state {self.committed_key}: {who} writes it now, not this worker "
                f"({self.owner}, epoch {self.epoch}): its task moved while this worker was cut "
                f"off, so its writes are refused") from None
        except redis.RedisError as exc:
            raise StateError(f"redis state {self.committed_key}: {exc}") from None
