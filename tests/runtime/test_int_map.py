"""IntMap behaves as a dict for every key and value, packing 64-bit keys and 96-bit values, and
gives and takes values of at most 96 bits as two parts (the acker's entries)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stormlet.runtime.int_map import IntMap

KEYS = st.one_of(st.integers(0, 40), st.integers(1, 2**64 - 1), st.integers(2**64, 2**70),
                 st.integers(-5, -1), st.sampled_from(["a", None, 1.5]))
VALUES = st.one_of(st.integers(0, 2**96 - 1), st.integers(2**96, 2**100), st.integers(-3, -1),
                   st.sampled_from(["x", None, (1, 2)]))
OPS = st.lists(st.tuples(st.sampled_from(["set", "pop", "pop_default", "get", "contains",
                                          "take_parts", "put_parts", "take_u64", "put_u64"]),
                         KEYS, VALUES), max_size=300)


def _in_parts(value):
    """What take_parts gives for ``value``: its high 64 and low 32 bits, if it has at most 96."""
    if type(value) is int and 0 <= value < 2**96:
        return True, value >> 32, value & (2**32 - 1)
    return False, 0, 0


def _is_u64(key):
    """Whether ``key`` is one take_u64 and put_u64 take: an int of 0 to 2**64 - 1."""
    return type(key) is int and 0 <= key < 2**64


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_every_operation_answers_as_a_dict_does(ops):
    table, model = IntMap(), {}
    for op, key, value in ops:
        if op == "set":
            table[key] = value
            model[key] = value
        elif op in ("put_parts", "put_u64"):
            found, high, low = _in_parts(value)
            if found and (op == "put_parts" or _is_u64(key)):
                getattr(table, op)(key, high, low)
                model[key] = value
        elif op in ("take_parts", "take_u64"):
            if op == "take_u64" and not _is_u64(key):
                continue
            expected = _in_parts(model[key]) if key in model else (False, 0, 0)
            assert tuple(getattr(table, op)(key)) == expected
            if expected[0]:
                del model[key]
        elif op == "pop":
            if key in model:
                assert table.pop(key) == model.pop(key)
            else:
                with pytest.raises(KeyError):
                    table.pop(key)
        elif op == "pop_default":
            assert table.pop(key, "absent") == model.pop(key, "absent")
        elif op == "get":
            assert table.get(key) == model.get(key)
        else:
            assert (key in table) == (key in model)
        assert len(table) == len(model)
    assert dict(table.items()) == model
    assert sorted(map(repr, table)) == sorted(map(repr, model))


@pytest.mark.parametrize("value", [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, 2**64 + 5,
                                   (2**64 - 1) << 32 | 5, 2**95, 2**96 - 1])
def test_values_at_each_edge_of_the_packing_come_back_whole(value):
    table = IntMap()
    for key in (1, 2**63, 2**64 - 1):
        table[key] = value
        assert table.get(key) == value and dict(table.items())[key] == value
        assert table.pop(key) == value and key not in table


def test_many_colliding_runs_survive_removal_in_any_order():
    # Keys whose homes crowd a few slots make long runs that wrap around the table's end; each
    # removal shifts entries back, and every other key must still be found afterwards.
    rng = random.Random(3)
    table, model = IntMap(), {}
    keys = [rng.getrandbits(64) or 1 for _ in range(5000)]
    for i, key in enumerate(keys):
        table[key] = i << 40 | i
        model[key] = i << 40 | i
    rng.shuffle(keys)
    for n, key in enumerate(keys):
        assert table.pop(key) == model.pop(key)
        if n % 250 == 0:
            assert all(table.get(k) == v for k, v in model.items())
    assert len(table) == 0 and list(table.items()) == []


def test_clear_gives_the_arrays_back():
    table = IntMap()
    small = table.nbytes()
    for key in range(1, 100_001):
        table[key] = key
    assert table.nbytes() > 1000 * small
    table.clear()
    assert len(table) == 0 and table.nbytes() == small and table.get(5) is None


def test_a_million_entries_cost_at_most_64_bytes_each():
    table = IntMap()
    rng = random.Random(1)
    for _ in range(1_000_000):
        table[rng.getrandbits(64) or 1] = rng.getrandbits(96)
    assert len(table) == 1_000_000
    assert table.nbytes() / len(table) <= 64


@pytest.mark.parametrize("key", [0, 2**64, -3, "a"])
def test_parts_of_a_key_outside_the_arrays_come_back_whole(key):
    table = IntMap()
    high, low = 2**64 - 1, 2**32 - 1
    table.put_parts(key, high, low)
    assert table.get(key) == (high << 32) | low
    assert tuple(table.take_parts(key)) == (True, high, low) and key not in table
