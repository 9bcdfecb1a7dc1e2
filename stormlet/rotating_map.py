"""A map whose entries expire in bulk, without timestamps per entry.

Entries live in ``buckets`` dicts. ``rotate()`` drops the oldest bucket (returning what it held)
and opens a new one; ``put`` and ``touch`` move an entry into the newest bucket. So if ``rotate``
is called every T seconds, an entry untouched since time t expires between t + T·(buckets − 1)
and t + T·buckets: with 2 buckets, between T and 2T; with 3, between 2T and 3T.

Not thread-safe: each map belongs to one executor thread.
"""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_MISSING = object()


class RotatingMap(Generic[K, V]):
    def __init__(self, buckets: int = 3):
        if buckets < 2:
            raise ValueError("a rotating map needs at least 2 buckets")
        # buckets[0] is the newest.
        self.buckets: list[dict[K, V]] = [{} for _ in range(buckets)]

    def put(self, key: K, value: V) -> None:
        newest = self.buckets[0]
        for older in self.buckets[1:]:
            older.pop(key, None)
        newest[key] = value

    def get(self, key: K, default: V | None = None) -> V | None:
        for bucket in self.buckets:
            value = bucket.get(key, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
        return default

    def pop(self, key: K, default: V | None = None) -> V | None:
        for bucket in self.buckets:
            value = bucket.pop(key, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
        return default

    def touch(self, key: K) -> bool:
        """Move ``key`` to the newest bucket, restarting its expiry; False if absent."""
        value = self.pop(key, _MISSING)  # type: ignore[arg-type]
        if value is _MISSING:
            return False
        self.buckets[0][key] = value  # type: ignore[assignment]
        return True

    def rotate(self) -> dict[K, V]:
        """Expire the oldest bucket and return its entries."""
        expired = self.buckets.pop()
        self.buckets.insert(0, {})
        return expired

    def __contains__(self, key: object) -> bool:
        return any(key in bucket for bucket in self.buckets)

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self.buckets)

    def __iter__(self) -> Iterator[K]:
        for bucket in self.buckets:
            yield from bucket
