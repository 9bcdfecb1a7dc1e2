"""IntMap: a dict for 64-bit int keys and int values up to 96 bits, stored in flat arrays.

The acker keeps one entry per pending tuple tree: a random 64-bit root mapped to a packed int
(the tree's XOR above its component and task, see stormlet.runtime.acker). As a dict, each entry
costs a hash slot plus an int object for the value, about 82 bytes; here it is 20 bytes of arrays
per slot (key, the value's high 64 bits, its low 32) at a load between 0.35 and 0.7, so 29 to 57
bytes, with no object per entry. Anything else (a key out of range, a value that is not such an
int) goes to a small side dict, so the map behaves as a dict for every key and value.

Open addressing with linear probing; a removal shifts the entries after it back (no tombstones),
so a map that sees a put and a pop per key stays as fast as an empty one. Keys are spread by a
multiplicative hash, so ids chosen to collide cost more probes, never a wrong answer.

Compiled (see runtime/build_mode.py), the arrays are read through typed memoryviews and an
operation is a few machine instructions; interpreted, the same code runs, slower than a dict.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any, TypeGuard

KEY_LIMIT = 1 << 64
LOW_BITS = 32                    # a value splits into its high 64 bits and its low 32
LOW_MASK = (1 << LOW_BITS) - 1
VALUE_LIMIT = 1 << 96
EMPTY = 0                        # a free slot's key; key 0 lives in the side dict
GOLDEN = 0x9E3779B97F4A7C15      # Fibonacci hashing: the key times 2^64 / phi
MASK64 = (1 << 64) - 1
MIN_BITS = 3                     # 8 slots
# Grow past 7 entries in 10 slots (to a load of 0.35): linear probing stays short.
MAX_LOAD_TENTHS = 7

_MISSING = object()


def _is_array_key(key: Any) -> bool:
    """Whether ``key`` can live in the arrays (any other key lives in the side dict)."""
    return type(key) is int and EMPTY < key < KEY_LIMIT


def _packable(key: Any, value: Any) -> bool:
    return _is_array_key(key) and _packable_value(value)


def _packable_value(value: Any) -> TypeGuard[int]:
    return type(value) is int and 0 <= value < VALUE_LIMIT


class IntMap:
    """The dict methods a RotatingMap bucket needs, over packed arrays (see the module doc)."""

    def __init__(self) -> None:
        self._others: dict = {}
        self._reset(MIN_BITS)

    def _reset(self, bits: int) -> None:
        size = 1 << bits
        self._bits = bits
        self._shift = 64 - bits   # a key's home slot is the top bits of its hash
        self._mask = size - 1
        self._count = 0
        self._keys = array("Q", bytes(8 * size))
        self._high = array("Q", bytes(8 * size))
        self._low = array("I", bytes(4 * size))

    def _probe(self, key: int) -> int:
        """The slot holding ``key``, or the free slot where it would go."""
        slot = ((key * GOLDEN) & MASK64) >> self._shift   # key's home slot
        while True:
            found = self._keys[slot]
            if found == key or found == EMPTY:
                return slot
            slot = (slot + 1) & self._mask

    def _slot_of(self, key: Any) -> int:
        """The slot holding ``key``, or -1 (as for any key that is not an array key)."""
        if not _is_array_key(key):
            return -1
        k = key   # a C integer, compiled (runtime/int_map.pxd)
        slot = self._probe(k)
        return slot if self._keys[slot] == k else -1

    def _value_at(self, slot: int) -> int:
        high = self._high[slot]   # a Python int (typed so in runtime/int_map.pxd): shifted, not cut
        return (high << LOW_BITS) | self._low[slot]

    def _remove_at(self, i: int) -> None:
        """Empty slot ``i``, moving back each later entry of its run that may live there: one
        whose home is at least as far behind it as ``i`` is (cyclically)."""
        mask = self._mask
        j = i
        while True:
            j = (j + 1) & mask
            key = self._keys[j]
            if key == EMPTY:
                break
            home = ((key * GOLDEN) & MASK64) >> self._shift
            if ((j - home) & mask) >= ((j - i) & mask):
                self._keys[i] = key
                self._high[i] = self._high[j]
                self._low[i] = self._low[j]
                i = j
        self._keys[i] = EMPTY
        self._count -= 1

    def _put(self, key: int, high: int, low: int) -> None:
        """Set ``key`` to the value whose high 64 and low 32 bits are given."""
        slot = self._probe(key)
        self._high[slot] = high
        self._low[slot] = low
        if self._keys[slot] == EMPTY:
            self._keys[slot] = key
            self._count += 1
            if self._count * 10 > (self._mask + 1) * MAX_LOAD_TENTHS:
                self._grow()

    def _grow(self) -> None:
        keys, high, low = self._keys, self._high, self._low   # hold the old arrays
        self._reset(self._bits + 1)
        for slot in range(len(keys)):
            if keys[slot] != EMPTY:
                self._put(keys[slot], high[slot], low[slot])

    # ----- the dict methods

    def __setitem__(self, key: Any, value: Any) -> None:
        if _packable(key, value):
            if self._others:
                self._others.pop(key, None)
            high = value >> LOW_BITS
            self._put(key, high, value ^ (high << LOW_BITS))
        else:
            self._discard(key)
            self._others[key] = value

    # ----- the acker's entries as two parts, with no int made for the whole value

    def take_parts(self, key: Any) -> tuple[bool, int, int]:
        """``(True, high 64 bits, low 32 bits)`` of ``key``'s value, removing it, when that
        value is an int of at most 96 bits; ``(False, 0, 0)`` when there is none, or another
        value (left in place). Compiled, a C struct: no object made."""
        if _is_array_key(key):
            return self.take_u64(key)
        return self._take_other(key)

    def take_u64(self, key: int) -> tuple[bool, int, int]:
        """``take_parts`` for a key known to be an int of 0 to 2**64 - 1 (the acker's roots):
        compiled, the key is a C integer, so the caller makes no int object for it."""
        if key != EMPTY:
            # _probe's loop, written out: this is the acker's most frequent call, and
            # interpreted, the call saved is a good part of its cost.
            slot = ((key * GOLDEN) & MASK64) >> self._shift
            found = self._keys[slot]
            while found != key:
                if found == EMPTY:
                    break
                slot = (slot + 1) & self._mask
                found = self._keys[slot]
            else:
                high = self._high[slot]
                low = self._low[slot]
                self._remove_at(slot)
                return True, high, low
        if self._others:   # checked here: compiled, the call makes an int of the key
            return self._take_other(key)
        return False, 0, 0

    def _take_other(self, key: Any) -> tuple[bool, int, int]:
        """``take_parts`` from the side dict."""
        if self._others:
            value = self._others.get(key)
            if _packable_value(value):
                del self._others[key]
                return True, value >> LOW_BITS, value & LOW_MASK
        return False, 0, 0

    def put_parts(self, key: Any, high: int, low: int) -> None:
        """``self[key] = high << 32 | low``, for ``high`` < 2**64 and ``low`` < 2**32."""
        if _is_array_key(key):
            self.put_u64(key, high, low)
        else:
            self._put_other(key, high, low)

    def put_u64(self, key: int, high: int, low: int) -> None:
        """``put_parts`` for a key known to be an int of 0 to 2**64 - 1 (see ``take_u64``)."""
        if key == EMPTY:
            self._put_other(key, high, low)
            return
        if self._others:
            self._others.pop(key, None)
        self._put(key, high, low)

    def _put_other(self, key: Any, high: int, low: int) -> None:
        packed = high   # a Python int (typed so in runtime/int_map.pxd): shifted, not cut
        self._others[key] = (packed << LOW_BITS) | low

    def _discard(self, key: Any) -> None:
        slot = self._slot_of(key)
        if slot >= 0:
            self._remove_at(slot)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        slot = self._slot_of(key)
        if slot >= 0:
            value = self._value_at(slot)
            self._remove_at(slot)
            return value
        if self._others:
            value = self._others.pop(key, _MISSING)
            if value is not _MISSING:
                return value
        if default is _MISSING:
            raise KeyError(key)
        return default

    def get(self, key: Any, default: Any = None) -> Any:
        slot = self._slot_of(key)
        if slot >= 0:
            return self._value_at(slot)
        return self._others.get(key, default) if self._others else default

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return self._count + len(self._others)

    def items(self) -> Iterator[tuple[Any, Any]]:
        keys = self._keys
        for slot in range(self._mask + 1):
            if keys[slot] != EMPTY:
                yield keys[slot], self._value_at(slot)
        yield from self._others.items()

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _value in self.items())

    def keys(self) -> Iterator[Any]:
        return iter(self)

    def values(self) -> Iterator[Any]:
        return (value for _key, value in self.items())

    def clear(self) -> None:
        """Empty the map and give its arrays back."""
        self._others.clear()
        self._reset(MIN_BITS)

    def nbytes(self) -> int:
        """The arrays' size in bytes (the side dict not counted)."""
        return (self._mask + 1) * 20
