"""A map whose entries expire in bulk, without timestamps per entry.

Entries live in a fixed number of buckets, newest first. ``rotate()`` drops the oldest bucket
(returning what it held) and opens a new one; ``put``, ``put_new`` and ``touch`` place an entry
in the newest bucket. So if ``rotate`` is called every T seconds, an entry untouched since time t
expires between t + T·(buckets − 1) and t + T·buckets: with 2 buckets, between T and 2T; with
3, between 2T and 3T. That is the whole expiry invariant; callers only choose T and the number
of buckets (the acker 3, a spout task 2).

Not thread-safe: each map belongs to one executor thread. The acker and spout executors touch
it once or twice per root, so ``take`` and ``put_new`` are a dict operation or two, and the
acker's batches work on ``buckets()`` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import cython

_MISSING = object()


class RotatingMap:
    """``new_bucket`` makes a bucket: ``dict``, or a class with the dict methods used here
    (the acker's ``IntMap``). Keys and values are any objects; ``take`` needs values that are
    never None."""

    def __init__(self, buckets: int = 3, new_bucket: Callable[[], Any] = dict):
        if buckets < 2:
            raise ValueError("a rotating map needs at least 2 buckets")
        self._new_bucket = new_bucket
        # _buckets[0] is the newest.
        self._buckets: list[Any] = [new_bucket() for _ in range(buckets)]

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` in the newest bucket, removing it from any older one."""
        buckets = self._buckets
        for older in buckets[1:]:
            older.pop(key, None)
        buckets[0][key] = value

    def put_new(self, key: Any, value: Any) -> None:
        """``put`` for a key the caller knows is absent (a fresh root, or one just taken)."""
        self._buckets[0][key] = value

    def buckets(self) -> list[Any]:
        """Every bucket, newest first, for a caller that reads and writes many entries by its
        buckets' own methods (the acker's batches, as C parts): writing to the first is
        ``put_new``. Valid until the next ``rotate``."""
        return self._buckets

    def get(self, key: Any, default: Any = None) -> Any:
        for bucket in self._buckets:
            value = bucket.get(key, _MISSING)
            if value is not _MISSING:
                return value
        return default

    def pop(self, key: Any, default: Any = None) -> Any:
        for bucket in self._buckets:
            value = bucket.pop(key, _MISSING)
            if value is not _MISSING:
                return value
        return default

    def take(self, key: Any) -> Any:
        """Remove and return ``key``'s value, None if absent: ``pop`` for maps that never hold
        None, so a hit in the newest bucket (the usual case) costs one dict pop."""
        for bucket in self._buckets:
            if cython.compiled and type(bucket) is dict:
                # The spouts' buckets: compiled, a dict's pop is one C call, not a method
                # lookup; the same pop either way.
                value = cython.cast(dict, bucket).pop(key, None)
            else:
                value = bucket.pop(key, None)
            if value is not None:
                return value
        return None

    def touch(self, key: Any) -> bool:
        """Move ``key`` to the newest bucket, restarting its expiry; False if absent."""
        value = self.pop(key, _MISSING)
        if value is _MISSING:
            return False
        self._buckets[0][key] = value
        return True

    def rotate(self) -> dict[Any, Any]:
        """Expire the oldest bucket and return its entries."""
        expired = self._buckets.pop()
        self._buckets.insert(0, self._new_bucket())
        return expired

    def drain(self) -> list[Any]:
        """Remove every entry; their values, newest bucket first."""
        values = [value for bucket in self._buckets for value in bucket.values()]
        for bucket in self._buckets:
            bucket.clear()
        return values

    def __contains__(self, key: object) -> bool:
        return any(key in bucket for bucket in self._buckets)

    def __len__(self) -> int:
        n = 0
        for bucket in self._buckets:   # no generator: a spout task asks per burst
            n += len(bucket)
        return n

    def __iter__(self) -> Iterator[Any]:
        for bucket in self._buckets:
            yield from bucket
