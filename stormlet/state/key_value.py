"""``KeyValueState``: what a stateful bolt's ``init_state`` receives.

    n = state.get("word", 0) + 1
    state.put("word", n)
    state.delete("stale")
    for key, value in state.items(): ...

Reads see every ``put`` and ``delete`` at once; the backend (a ``Store``) sees them only at
checkpoints: ``prepare_commit`` stages the changes since the last checkpoint, ``commit`` makes
them the committed state, ``rollback`` drops every change not committed. Keys and values must be
msgpack-encodable (a ``put`` of anything else raises ``StateError`` naming the key and type);
tuple keys come back from ``items()`` as tuples.

Values read are kept in memory (this task is the only writer of its namespace, so they never
go stale); put a changed value back with ``put``: a value changed in place is checkpointed only
if it was put since the last checkpoint.

A stored value that does not decode raises ``UndecodableValue`` (naming the namespace and key)
from every ``get`` of it, and is not kept: it is read again, so a repair of the stored value
(README: "Repairing a state value") is seen at once. A ``put`` or ``delete`` of the key
replaces it.

``savepoint`` and ``undo`` make one tuple's changes all or nothing: the stateful runner takes a
savepoint before each tuple and undoes to it if the tuple raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack

from ..values import plainly_encodable
from .store import Changes, Store, decoded_key, decoded_value, encode_key, encode_value

_ABSENT = object()   # cached: the key has no value; pending: the key is deleted
_NOTHING = object()  # in an undo entry: the key was not in that dict


class KeyValueState:
    """A key-value state over ``store``, checkpointed in two phases."""

    def __init__(self, store: Store, namespace: str | None = None):
        self._store = store
        #: Named in errors: ``<topology>/<component>/<task>`` for a stateful bolt's task.
        self.namespace = namespace or store.namespace
        self._values: dict[Any, Any] = {}    # key -> value or _ABSENT, as reads must see it
        self._pending: dict[Any, Any] = {}   # key -> value or _ABSENT, since the last prepare
        self._prepared: Changes = {}         # in the prepared checkpoint, not yet committed
        self._prepared_keys: list[Any] = []
        # This task's own packer: packb would make one per call (a quarter of a stateful
        # word count's time, profiled).
        self._pack = msgpack.Packer(use_bin_type=True).pack
        # key -> (its _values entry, its _pending entry) before the savepoint; None: no savepoint
        self._undo: dict[Any, tuple[Any, Any]] | None = None

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``, or ``default``. Raises ``UndecodableValue`` if its stored value
        does not decode."""
        try:
            value = self._values[key]
        except KeyError:
            raw_key = encode_key(key, self._pack)
            raw = self._store.get(raw_key)
            value = (_ABSENT if raw is None
                     else decoded_value(self.namespace, key, raw_key, raw))
            self._values[key] = value
        return default if value is _ABSENT else value

    def savepoint(self) -> None:
        """Remember the state as it is, for ``undo``; forgets the previous savepoint."""
        if self._undo:
            self._undo.clear()
        elif self._undo is None:
            self._undo = {}

    def undo(self) -> None:
        """Undo every ``put`` and ``delete`` since the last ``savepoint``."""
        if not self._undo:
            return
        for key, (value, pending) in self._undo.items():
            for entries, before in ((self._values, value), (self._pending, pending)):
                if before is _NOTHING:
                    entries.pop(key, None)
                else:
                    entries[key] = before
        self._undo.clear()

    def _changing(self, key: Any) -> None:
        # The first change of a key since the savepoint keeps what undo restores.
        undo = self._undo
        if undo is not None and key not in undo:
            undo[key] = (self._values.get(key, _NOTHING), self._pending.get(key, _NOTHING))

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``; both must be msgpack-encodable (``StateError`` if not).
        Encoded at the next checkpoint: a value changed in place after ``put`` is stored as it
        is then."""
        # Checked now, so the error comes from the put that caused it; a plain scalar surely
        # encodes and is left for the checkpoint.
        if not plainly_encodable(key):
            encode_key(key, self._pack)
        if not plainly_encodable(value):
            encode_value(key, value, self._pack)
        if self._undo is not None:
            self._changing(key)
        self._pending[key] = value
        self._values[key] = value

    def delete(self, key: Any) -> None:
        if not plainly_encodable(key):
            encode_key(key, self._pack)
        if self._undo is not None:
            self._changing(key)
        self._pending[key] = _ABSENT
        self._values[key] = _ABSENT

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every key and value, changes not yet checkpointed included. Raises
        ``UndecodableValue`` at a stored key or value that does not decode."""
        seen = set()
        for key, value in list(self._values.items()):
            seen.add(key)
            if value is not _ABSENT:
                yield key, value
        ns = self.namespace
        for raw_key, raw_value in self._store.scan():
            key = decoded_key(ns, raw_key)
            if key not in seen:
                yield key, decoded_value(ns, key, raw_key, raw_value)

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    def prepare_commit(self, txid: int) -> None:
        """Stage every change since the last commit as checkpoint ``txid``. A second prepare
        before the commit stages the first one's changes again, with the new ones."""
        pack = self._pack
        changes = dict(self._prepared)
        for key, value in self._pending.items():
            changes[encode_key(key, pack)] = (None if value is _ABSENT
                                              else encode_value(key, value, pack))
        self._store.prepare(txid, changes)
        self._undo = None   # a savepoint is for one tuple: none spans a checkpoint
        self._prepared = changes
        self._prepared_keys += self._pending
        self._pending = {}

    def commit(self, txid: int | None = None) -> None:
        """Make checkpoint ``txid`` the committed state. Without a ``txid``, prepare and commit
        every change at once (for state a component checkpoints itself)."""
        if txid is None:
            txid = 0
            self.prepare_commit(txid)
        self._store.commit(txid)
        self._prepared, self._prepared_keys = {}, []

    def rollback(self) -> None:
        """Drop every change not committed; reads see the committed state again."""
        for key in [*self._prepared_keys, *self._pending]:
            self._values.pop(key, None)
        self._prepared, self._prepared_keys, self._pending = {}, [], {}
        self._undo = None
        self._store.rollback()

    def close(self) -> None:
        self._store.close()
