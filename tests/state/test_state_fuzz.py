"""Fuzzing the state's reads: thousands of stored keys and values damaged (bit flips,
truncation, deep nesting, garbage, a row of the wrong type) in the memory and embedded stores.
A read either gives a value or raises ``UndecodableValue`` naming the namespace and the key;
no other key is lost; and a tuple's changes are all or nothing."""

from __future__ import annotations

import random
import sqlite3

import pytest

from stormlet.state import KeyValueState
from stormlet.state.embedded import EmbeddedStore
from stormlet.state.store import MemoryStore, UndecodableValue, encode_key, encode_value

NS = "t/b/1"
KEYS = ["word", ("tuple", 2), 7, b"\x00bytes", "h\u00e9llo \u2603", "", 2**63]
VALUES = [1, "text", b"\xff\x00", [1, [2, {"k": b"v"}]], {"a": None}, 1.5, 2**64 - 1, True]


def damaged(rng: random.Random, data: bytes) -> bytes | str:
    out = bytearray(data)
    how = rng.randrange(6)
    if how == 0:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
    elif how == 1:
        del out[rng.randrange(len(out)):]
    elif how == 2:
        out[:0] = rng.choice((b"\x91" * 100_000, b"\x81\xa1a" * 50_000, b"\xdd\xff\xff\xff\xff"))
    elif how == 3:
        out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif how == 4:
        out[:] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
    else:
        return out.hex()      # a row written by hand, as text: not bytes at all
    return bytes(out)


@pytest.fixture(params=["memory", "embedded"])
def raw_store(request, tmp_path):
    """(a store of NS, a function writing raw committed bytes into it)"""
    if request.param == "memory":
        store = MemoryStore(NS)
        return store, store._committed.__setitem__
    store = EmbeddedStore(tmp_path / "t.sqlite3", NS)
    db = sqlite3.connect(tmp_path / "t.sqlite3", isolation_level=None)

    def write(k, v):
        db.execute("INSERT OR REPLACE INTO kv (ns, k, v) VALUES (?, ?, ?)", (NS, k, v))
    return store, write


def test_a_damaged_value_is_named_by_namespace_and_key_and_no_other_is_lost(raw_store):
    store, write = raw_store
    rng = random.Random(50)
    good = {k: VALUES[i % len(VALUES)] for i, k in enumerate(KEYS)}
    for k, v in good.items():
        write(encode_key(k), encode_value(k, v))
    cases = 1500 if isinstance(store, MemoryStore) else 600
    for case in range(cases):
        victim = rng.choice(KEYS)
        raw = damaged(rng, encode_value(victim, good[victim]))
        write(encode_key(victim), raw)
        state = KeyValueState(store)
        try:
            state.get(victim)                           # a value, or the named error
        except UndecodableValue as exc:
            assert exc.namespace == NS and exc.key == victim, case
            assert f"state {NS}: the value of key {victim!r}" in str(exc)
        for k, v in good.items():                      # every other key still reads
            if k != victim:
                assert state.get(k) == (list(v) if isinstance(v, tuple) else v), case
        try:
            seen = dict(state.items())
        except UndecodableValue as exc:
            assert exc.key == victim
        else:
            assert set(seen) == set(good)
        state.put(victim, good[victim])                 # a put replaces it: the repair
        assert state.get(victim) == good[victim]
        write(encode_key(victim), encode_value(victim, good[victim]))


def test_a_damaged_stored_key_is_named_by_its_bytes(raw_store):
    store, write = raw_store
    rng = random.Random(51)
    write(encode_key("kept"), encode_value("kept", 1))
    for case in range(500):
        raw_key = damaged(rng, encode_key(rng.choice(KEYS)))
        if not isinstance(raw_key, bytes) or not raw_key:
            continue
        write(raw_key, encode_value(None, 1))
        try:
            keys = {k for k, _ in KeyValueState(store).items()}
        except UndecodableValue as exc:
            assert exc.namespace == NS and exc.raw_key == raw_key, case
            assert f"stored key {raw_key.hex()}" in str(exc)
        else:
            assert "kept" in keys
        if isinstance(store, MemoryStore):
            del store._committed[raw_key]
        else:
            store._db.execute("DELETE FROM kv WHERE k = ?", (raw_key,))


def test_a_tuples_changes_are_all_or_nothing():
    rng = random.Random(52)
    state = KeyValueState(MemoryStore(NS))
    model: dict = {}
    for case in range(3000):
        state.savepoint()
        before = dict(model)
        changes = [(rng.choice(KEYS[:4]), rng.choice((None, *VALUES[:3])))
                   for _ in range(rng.randint(1, 4))]
        for key, value in changes:
            if value is None:
                state.delete(key)
                model.pop(key, None)
            else:
                state.put(key, value)
                model[key] = value
        if rng.random() < 0.4:                      # the tuple raised: undone
            state.undo()
            model = before
        if rng.random() < 0.1:                      # a checkpoint between tuples
            state.commit()
        assert dict(state.items()) == model, case
