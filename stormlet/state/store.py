"""What a state backend keeps for one namespace, and how it is kept: encoded keys and values,
a committed set and at most one prepared checkpoint.

Every backend (memory, the embedded SQLite file, Redis) implements ``Store`` with the same
two-phase semantics, so ``KeyValueState`` above it is written once:

- ``prepare(txid, changes)`` replaces the prepared checkpoint, atomically, with ``changes``
  (encoded key to encoded value, or ``None`` to delete the key) under ``txid``;
- ``commit(txid)`` applies the prepared checkpoint to the committed set, atomically, and forgets
  it. With nothing prepared it does nothing (the checkpoint was committed already, or it was
  held in memory by a process that died); a prepared checkpoint of another txid is an error;
- ``rollback()`` forgets the prepared checkpoint.

A reader never sees half a checkpoint: what ``get`` and ``scan`` return is the committed set.
Keys and values are msgpack, as tuples are; a deleted key is ``None`` in a change set (and the
empty string where a backend needs bytes: msgpack never encodes anything to no bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import msgpack

Changes = dict[bytes, "bytes | None"]


class StateError(RuntimeError):
    """A state operation that cannot be done: a value that cannot be stored, a backend that is
    unreachable or inconsistent."""


class UndecodableValue(StateError):
    """A stored key or value that does not decode (a bit flip, a truncated write, a writer that
    is not stormlet): a poison key. Names the namespace, the key (as far as it is known) and
    the stored key's bytes, which a repair needs (README: "Repairing a state value").
    Every read of it raises this until the key is deleted or overwritten."""

    def __init__(self, namespace: str, key: Any, raw_key: bytes, problem: BaseException):
        self.namespace, self.key, self.raw_key = namespace, key, raw_key
        what = "a stored key" if key is _UNKNOWN else f"the value of key {key!r}"
        why = type(problem).__name__ + (f": {problem}" if str(problem) else "")
        super().__init__(f"state {namespace}: {what} (stored key {bytes(raw_key).hex()}) cannot "
                         f"be decoded ({why}); every tuple that reads it fails until the key is "
                         f"repaired")


_UNKNOWN = object()   # the key of an UndecodableValue whose key itself does not decode


class Store(Protocol):
    #: What the store's keys belong to (``providers.namespace``): named in errors.
    namespace: str

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None."""
        ...

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed key and value."""
        ...

    def prepare(self, txid: int, changes: Changes) -> None:
        ...

    def commit(self, txid: int) -> None:
        ...

    def rollback(self) -> None:
        ...

    def close(self) -> None:
        ...


def _packb(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def encode_key(key: Any, pack: Callable[[Any], bytes] = _packb) -> bytes:
    try:
        return pack(key)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateError(f"a state key must be msgpack-encodable (str, bytes, int, float, bool, "
                         f"None or a tuple of them); {key!r} is a {type(key).__name__}: "
                         f"{exc}") from None


def encode_value(key: Any, value: Any, pack: Callable[[Any], bytes] = _packb) -> bytes:
    try:
        return pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateError(f"the state value for key {key!r} cannot be stored: a "
                         f"{type(value).__name__} is not msgpack-encodable ({exc})") from None


def decode_key(raw: bytes) -> Any:
    # Arrays come back as tuples: a tuple key stays hashable and equal to what was put.
    return msgpack.unpackb(raw, raw=False, use_list=False, strict_map_key=False)


def decode_value(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def decoded_key(namespace: str, raw: bytes) -> Any:
    """``decode_key``, or ``UndecodableValue`` for stored bytes that are not a key (a key must
    also hash: a msgpack map would decode, as a dict)."""
    try:
        key = decode_key(raw)
        hash(key)
    except Exception as exc:   # whatever msgpack makes of damaged bytes: ValueError, TypeError
        raise UndecodableValue(namespace, _UNKNOWN, raw, exc) from None
    return key


def decoded_value(namespace: str, key: Any, raw_key: bytes, raw: bytes) -> Any:
    """``decode_value``, or ``UndecodableValue`` naming ``key``."""
    try:
        return decode_value(raw)
    except Exception as exc:   # msgpack's errors, or a TypeError for a row that is not bytes
        raise UndecodableValue(namespace, key, raw_key, exc) from None


class MemoryStore:
    """A ``Store`` in this process's memory: lost when the process ends (Storm's default
    provider; for tests)."""

    def __init__(self, namespace: str = "memory") -> None:
        self.namespace = namespace
        self._committed: dict[bytes, bytes] = {}
        self._prepared: Changes | None = None
        self._prepared_txid: int | None = None

    def get(self, key: bytes) -> bytes | None:
        return self._committed.get(key)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self._committed.items()))

    def prepare(self, txid: int, changes: Changes) -> None:
        self._prepared, self._prepared_txid = dict(changes), txid

    def commit(self, txid: int) -> None:
        if self._prepared_txid is None:
            return
        check_commit_txid(self._prepared_txid, txid)
        apply_changes(self._committed, self._prepared or {})
        self._prepared, self._prepared_txid = None, None

    def rollback(self) -> None:
        self._prepared, self._prepared_txid = None, None

    def close(self) -> None:
        pass


class OtherCheckpointPrepared(StateError):
    """A commit of checkpoint ``txid`` where the prepared checkpoint is ``prepared``."""

    def __init__(self, txid: int, prepared: int):
        super().__init__(f"cannot commit checkpoint {txid}: the prepared checkpoint is "
                         f"{prepared}")
        self.txid, self.prepared = txid, prepared


def check_commit_txid(prepared: int, txid: int) -> None:
    """How every backend refuses a commit of another checkpoint than the prepared one."""
    if prepared != txid:
        raise OtherCheckpointPrepared(txid, prepared)


def apply_changes(committed: dict[bytes, bytes], changes: Changes) -> None:
    for key, value in changes.items():
        if value is None:
            committed.pop(key, None)
        else:
            committed[key] = value
