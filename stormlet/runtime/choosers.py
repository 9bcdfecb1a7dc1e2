"""The runtime's task choosers: the function an emitting executor calls for every tuple,
``choose(values) -> list of task ids``, made from a stream's ``groupings.Grouping`` by
``make_chooser``. Choosers return shared, pre-built lists for single targets so the hot path
allocates nothing; callers must not mutate what they get.

Fields and partial-key groupings hash with hashes of their own (CRC-32; for partial key, two
FNV-1a hashes) rather than ``hash()``, because Python randomises string hashes per process and
two workers must send the same key to the same tasks. Compiled, an ASCII str is hashed over its
own characters (``ascii_crc32``, ``ascii_key_hash``): through Python, its characters would
first be copied into a new bytes object for every tuple.
"""

from __future__ import annotations

import copy
import random
import zlib
from array import array
from typing import Any, Callable

import cython

from ..groupings import (
    ALL,
    CUSTOM,
    DIRECT,
    FIELDS,
    GLOBAL,
    LOCAL_OR_SHUFFLE,
    NONE,
    PARTIAL_KEY,
    SHUFFLE,
    Grouping,
)
from ..serializers import DEFAULT_REGISTRY
from .serialization import is_ascii

Chooser = Callable[[list[Any]], list[int]]


class Always:
    """A chooser whose answer does not depend on the values: an all or global grouping, or any
    grouping onto one task. The routes read ``tasks`` once instead of calling it per emit."""

    __slots__ = ("tasks",)

    def __init__(self, tasks: list[int]):
        self.tasks = tasks

    def __call__(self, values: list[Any]) -> list[int]:
        return self.tasks


class PerTupleChooser:
    """A chooser whose answer it works out per tuple (a fields, shuffle or partial-key
    grouping). A class rather than a closure so that, compiled, its state is C fields and a
    route calls ``choose`` as a C method (``StreamRoute.tasks_for``), whichever kind it is."""

    def choose(self, values: list[Any]) -> list[int]:
        raise NotImplementedError

    def __call__(self, values: list[Any]) -> list[int]:
        return self.choose(values)


def as_function(chooser: Chooser) -> Chooser:
    """``chooser`` in the form Python calls fastest: a per-tuple chooser as its bound
    ``choose`` (vectorcall into the C method, not ``__call__`` through ``tp_call``), a constant
    answer as a closure. For callers that call choosers per tuple from Python (a route over
    several subscribers, backfill); a single route reads both forms directly
    (``StreamRoute.tasks_for``)."""
    if isinstance(chooser, PerTupleChooser):
        return chooser.choose
    if type(chooser) is Always:
        tasks = chooser.tasks
        return lambda values: tasks
    return chooser


def _crc32_table() -> list[int]:
    """The byte table of CRC-32 (zlib's: reflected, polynomial 0xEDB88320)."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC_TABLE = _crc32_table()


def ascii_crc32(text: str) -> int:
    """``zlib.crc32(text.encode())`` for an ASCII ``text``; compiled, without the bytes copy."""
    if not cython.compiled:
        return zlib.crc32(text.encode())
    # ASCII: a byte a char
    data = cython.cast(cython.p_uchar,
                       PyUnicode_DATA(text))  # type: ignore[name-defined]  # noqa: F821
    crc = 0xFFFFFFFF
    for i in range(len(text)):
        crc = CRC_TABLE[(crc ^ data[i]) & 0xFF] ^ (crc >> 8)
    return crc ^ cython.cast(cython.uint, 0xFFFFFFFF)


def stable_hash(values: list[Any], pack: Callable[[Any], bytes] | None = None) -> int:
    """A hash of field values that is the same in every process. ``pack``: the ``pack`` of a
    packer of the topology's types (``serializers.Registry.packer``), or its ``packb``;
    None: the default types'."""
    if pack is None:
        pack = DEFAULT_REGISTRY.packb
    if len(values) == 1:
        return _hash_one(values[0], pack)
    # The fields' values as a list, however given: a tuple of them would pack as a tuple.
    return zlib.crc32(pack(values if type(values) is list else list(values)))


def _hash_one(v: Any, pack: Any) -> int:
    """``stable_hash([v], pack)``, without making the list for a str, int or bytes."""
    t = type(v)
    if t is str:
        if is_ascii(v):
            return ascii_crc32(v)
        return zlib.crc32(v.encode("utf-8", "surrogatepass"))
    if t is int:
        return v & 0x7FFFFFFFFFFFFFFF
    if t is bytes:
        return zlib.crc32(v)
    return zlib.crc32(pack([v]))


def make_chooser(
    grouping: Grouping,
    source_fields: list[str],
    target_tasks: list[int],
    *,
    source_task: int,
    local_tasks: set[int] | frozenset[int] = frozenset(),
    context: Any = None,
    stream: str = "default",
    rng: random.Random | None = None,
    registry: Any = None,
    load_aware: bool = False,
) -> Chooser | None:
    """The routing function for one (source task, stream, target component); None for direct.
    ``registry``: the topology's types (``serializers.Registry``), which fields and partial-key
    groupings hash; None: the default types.

    ``load_aware`` (Storm's default, unless ``topology.disable.loadaware.messaging``): a
    shuffle or local-or-shuffle grouping onto several tasks is a ``LoadAwareChooser``, which
    starts with the tasks in ``local_tasks`` (if any) and whose choice the runtime then weighs
    by the tasks' load and place (runtime/load_aware.py)."""
    rng = rng or random.Random()
    registry = registry if registry is not None else DEFAULT_REGISTRY
    tasks = sorted(target_tasks)
    singles = [[t] for t in tasks]
    kind = grouping.kind

    if kind == DIRECT:
        return None
    if kind == ALL:
        return Always(tasks)
    if kind == GLOBAL:
        return Always(singles[0])
    if kind == FIELDS:
        return _fields_chooser(grouping.fields, source_fields, singles, registry)
    if kind == PARTIAL_KEY:
        return _partial_key_chooser(grouping.fields, source_fields, singles, registry)
    if kind == CUSTOM:
        # Each emitting task gets its own copy, as it does of components: choose_tasks may keep
        # state, and tasks run on different threads.
        custom = copy.deepcopy(grouping.custom)
        custom.prepare(context, stream, list(tasks))
        return lambda values: custom.choose_tasks(source_task, values)
    if kind == LOCAL_OR_SHUFFLE:
        local = [single for single in singles if single[0] in local_tasks]
        if load_aware and len(local or singles) > 1:
            return LoadAwareChooser(local or singles, local_tasks, rng)
        return _shuffle_chooser(local or singles, rng)
    if kind == SHUFFLE and load_aware and len(singles) > 1:
        return LoadAwareChooser(singles, local_tasks, rng)
    if kind in (SHUFFLE, NONE):
        return _shuffle_chooser(singles, rng)
    raise ValueError(f"unknown grouping kind {kind!r}")


def _shuffle_chooser(singles: list[list[int]], rng: random.Random) -> Chooser:
    if len(singles) == 1:   # nothing to shuffle: not a reshuffle per tuple
        return Always(singles[0])
    return ShuffleChooser(singles, rng.getrandbits(64))


# xorshift64*'s constants (Vigna, "An experimental exploration of Marsaglia's xorshift
# generators, scrambled", 2016), and the mask that keeps Python's ints to its 64 bits.
MASK64 = 0xFFFFFFFFFFFFFFFF
XORSHIFT_MULTIPLIER = 0x2545F4914F6CDD1D


class ShuffleChooser(PerTupleChooser):
    """Storm's ShuffleGrouping: walk a shuffled order of the tasks round-robin, and reshuffle it
    after each pass, so that every pass of n tuples gives each of the n tasks one (even over
    any window, unlike independent random picks).

    A shuffle grouping is called for every tuple, so its randomness is a xorshift64* generator
    of its own, in C integers when compiled: ``random.Random.shuffle`` costs about 800 ns a
    tuple over two tasks (measured 2026-11-28), more than a word count's whole work on a word.
    Seeded from the ``random.Random`` it is made with, so a seeded one picks the same way each
    run."""

    def __init__(self, singles: list[list[int]], seed: int):
        self.order = list(singles)
        self.n = len(self.order)
        self.position = self.n   # shuffled before the first pick
        self.state = (seed & MASK64) or 1   # xorshift's one fixed point is 0

    def choose(self, values: list[Any]) -> list[int]:
        if self.position >= self.n:
            self._reshuffle()
        chosen = self.order[self.position]
        self.position += 1
        return chosen

    def _reshuffle(self) -> None:
        # Fisher-Yates.
        order = self.order
        for i in range(self.n - 1, 0, -1):
            j = self._next_random() % (i + 1)
            order[i], order[j] = order[j], order[i]
        self.position = 0

    def _next_random(self) -> int:
        """The next 32 random bits (xorshift64*'s high half, its best bits)."""
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & MASK64
        x ^= x >> 27
        self.state = x
        return ((x * XORSHIFT_MULTIPLIER) & MASK64) >> 32


class LoadAwareChooser(PerTupleChooser):
    """The per-tuple half of Storm's LoadAwareShuffleGrouping: walk a ring of the targets
    round-robin. The ring holds each target as often as its weight says (the tasks of the
    current locality scope, the less loaded more often, in a shuffled order); the runtime makes
    a new one from the tasks' loads every second (``runtime/load_aware.py``'s ``Balancer``)
    and hands it over with ``use``. So a tuple costs an index and a compare, no weighing.

    Until the first ring comes, the ring is the targets in ``local_tasks`` (every target if
    none is), shuffled once: Storm's start, its worker-local scope with every weight equal."""

    def __init__(self, singles: list[list[int]], local_tasks: set[int] | frozenset[int],
                 rng: random.Random):
        self.singles = singles   # every target as a one-task list, in task order
        ring = [single for single in singles if single[0] in local_tasks] or list(singles)
        rng.shuffle(ring)
        self.ring = ring
        self.position = 0

    def choose(self, values: list[Any]) -> list[int]:
        ring = self.ring   # one read: a new ring may be handed over meanwhile
        position = self.position
        if position >= len(ring):
            position = 0
        self.position = position + 1
        return ring[position]

    def use(self, ring: list[list[int]]) -> None:
        """Walk ``ring`` from now on (lists from ``singles``; not changed after). Safe from
        another thread: the executor's next ``choose`` takes it whole."""
        self.ring = ring


def _field_indexes(fields: tuple[str, ...], source_fields: list[str]) -> list[int]:
    return [source_fields.index(f) for f in fields]


def _fields_chooser(fields: tuple[str, ...], source_fields: list[str],
                    singles: list[list[int]], registry: Any) -> Chooser:
    n = len(singles)
    if n == 1:
        return Always(singles[0])
    indexes = _field_indexes(fields, source_fields)
    if len(indexes) == 1:
        return OneFieldChooser(indexes[0], singles, registry.packb)
    return FieldsChooser(indexes, singles, registry.packer().pack)


class OneFieldChooser(PerTupleChooser):
    """A fields grouping on one field (the usual case). Compiled, the field's index and the
    task count are C integers (with a closure's Python ints, a call cost ~24 ns instead of ~17,
    hash included, two tasks)."""

    def __init__(self, index: int, singles: list[list[int]],
                 pack: Callable[[Any], bytes] = DEFAULT_REGISTRY.packb):
        self.index = index
        self.singles = singles
        self.n = len(singles)
        self.pack = pack   # for a value neither str, int nor bytes (thread-safe: packb)

    def choose(self, values: list[Any]) -> list[int]:
        return self.singles[_hash_one(values[self.index], self.pack) % self.n]


class FieldsChooser(PerTupleChooser):
    """A fields grouping on several fields: ``stable_hash`` of those fields' values, with a
    msgpack packer of its own (``msgpack.packb`` makes a new packer per call: ~1 us of the
    ~2.5 us a tuple this took through it, measured 2026-11-28). Each source task gets its own
    chooser, so its packer is used by one thread at a time."""

    def __init__(self, indexes: list[int], singles: list[list[int]],
                 pack: Callable[[Any], bytes] | None = None):
        self.indexes = indexes
        self.singles = singles
        self.n = len(singles)
        self.pack = pack or DEFAULT_REGISTRY.packer().pack

    def choose(self, values: list[Any]) -> list[int]:
        return self.singles[stable_hash([values[i] for i in self.indexes], self.pack) % self.n]


def _partial_key_chooser(fields: tuple[str, ...], source_fields: list[str],
                         singles: list[list[int]], registry: Any) -> Chooser:
    if len(singles) == 1:
        return Always(singles[0])
    return PartialKeyChooser(_field_indexes(fields, source_fields), singles,
                             registry.packer().pack)


# Partial-key grouping's two hashes of a key: 64-bit FNV-1a over the key's bytes (see
# PartialKeyChooser) from two offset bases, each finished by splitmix64's mixer (FNV's low
# bits, which a modulo by a few tasks reads, depend on few of the key's bits; the mixer spreads
# every bit into each).
FNV_PRIME = 0x100000001B3
FIRST_OFFSET = 0xCBF29CE484222325    # FNV-1a's own offset basis
SECOND_OFFSET = 0x6A09E667F3BCC908   # the first 64 bits of sqrt(2)'s fraction (SHA-512's H0)
MIX_FIRST = 0xBF58476D1CE4E5B9       # splitmix64's finaliser's multipliers
MIX_SECOND = 0x94D049BB133111EB


def key_hash(key: bytes, offset: int) -> int:
    """One of partial-key grouping's two hashes of a packed key (``offset``: FIRST_OFFSET or
    SECOND_OFFSET). The same in every process and in both build modes."""
    h = offset
    for byte in key:
        h = ((h ^ byte) * FNV_PRIME) & MASK64
    return _mixed(h)


def ascii_key_hash(text: str, offset: int) -> int:
    """``key_hash(text.encode(), offset)`` for an ASCII ``text``; compiled, without the bytes
    copy (as ``ascii_crc32``)."""
    if not cython.compiled:
        return key_hash(text.encode(), offset)
    # ASCII: a byte a char
    data = cython.cast(cython.p_uchar,
                       PyUnicode_DATA(text))  # type: ignore[name-defined]  # noqa: F821
    h = offset
    for i in range(len(text)):
        h = (h ^ data[i]) * FNV_PRIME   # a C integer: it wraps at 64 bits, as MASK64 does
    return _mixed(h)


def _mixed(h: int) -> int:
    """splitmix64's finaliser of ``h``."""
    h = ((h ^ (h >> 30)) * MIX_FIRST) & MASK64
    h = ((h ^ (h >> 27)) * MIX_SECOND) & MASK64
    return h ^ (h >> 31)


class PartialKeyChooser(PerTupleChooser):
    """Storm's PartialKeyGrouping ("power of two choices"): each key may go to one of two
    tasks, picked by two independent hashes, and the one this sender has sent less to so far
    wins, so a hot key is split over two tasks instead of loading one.

    The key's two hashes (``key_hash``) are of its msgpack bytes, or of its characters for a
    key that is one ASCII str, in C integers when compiled: through BLAKE2b, with a digest
    object and an int per tuple, this cost ~2-2.6 us a tuple (measured 2026-11-28). (Two
    CRC-32s with different seeds would not do: CRC is affine, so their XOR depends only on the
    key's length.) Each source task gets its own chooser, so its packer and counts are used by
    one thread at a time."""

    def __init__(self, indexes: list[int], singles: list[list[int]],
                 pack: Callable[[Any], bytes] | None = None):
        self.indexes = indexes
        self.one_field = indexes[0] if len(indexes) == 1 else -1
        self.singles = singles
        self.n = len(singles)
        self.sent = array("Q", bytes(8 * len(singles)))
        self.pack = pack or DEFAULT_REGISTRY.packer().pack

    def choose(self, values: list[Any]) -> list[int]:
        if self.one_field >= 0:
            value = values[self.one_field]
            if type(value) is str and is_ascii(value):
                first = ascii_key_hash(value, FIRST_OFFSET) % self.n
                second = ascii_key_hash(value, SECOND_OFFSET) % self.n
                return self._pick(first, second)
        key = self.pack([values[i] for i in self.indexes])
        return self._pick(key_hash(key, FIRST_OFFSET) % self.n,
                          key_hash(key, SECOND_OFFSET) % self.n)

    def _pick(self, first: int, second: int) -> list[int]:
        """The candidate this chooser has sent less to (the first on a tie), counted."""
        pick = first if self.sent[first] <= self.sent[second] else second
        self.sent[pick] += 1
        return self.singles[pick]
