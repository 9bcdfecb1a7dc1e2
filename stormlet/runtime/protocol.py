"""Names shared by every part of the runtime: system streams, system components, message kinds,
and the layout of every control record.

A message between executors is a ``Message``: ``(kind, dest_task, src_task, payload)``. A data
payload is a list of Tuple objects (from another worker, the same packed, which the bolt unpacks:
see stormlet/cluster/wire.py); a control payload is a *flat* batch: the fields of one record after
another, in the order its record type below declares (``[root, xor, spout_task, root, xor,
spout_task, ...]`` for ``ACK_INIT``), so that a batch of a thousand acks is one list, not a thousand
small objects. The record types are the one definition of those layouts: writers append a record
(``batch.extend(AckInit(root, xor, task))``), readers iterate ``records(AckInit, batch)``, and
the wire decoder checks a batch against ``RECORDS``; nothing else spells a record's length or
field order. A bolt's acks are the one control payload that is not records: ``(root, value)``
pairs of unsigned 64-bit ints in an ``array("Q")`` (``ack_pairs``), which cross between workers
as its bytes.
"""

from array import array
from typing import Any, Iterator, NamedTuple, get_args, get_type_hints

# The system's stream and component names are the API's (streams.py); here for the runtime.
from ..streams import ACKER_COMPONENT, DEFAULT_STREAM, SYSTEM_COMPONENT, SYSTEM_TASK, TICK_STREAM  # noqa: F401

# Data: payload is a list of Tuple objects addressed to dest_task (or, from another worker, an
# EncodedBatch whose tuples() gives them).
DATA = 0
# Tick: payload is None; the executor turns it into a tick tuple for dest_task.
TICK = 1

# To an acker task (src_task is the sender).
ACK_INIT = 10      # AckInit records: a spout task created a tuple tree
ACK_ACK = 11       # ack_pairs(): (root, value) pairs, not records
ACK_FAIL = 12      # AckFail records
ACK_RESET = 13     # Root records: restart these trees' timeouts
ACK_TIMEOUT = 14   # Root records: the spout gave up; report who each tree reached, then forget it

# From an acker to a spout task.
SPOUT_ACK = 20     # Root records: these trees completed
SPOUT_FAIL = 21    # SpoutFail records
SPOUT_RESET = 22   # Root records

STOP = 30          # payload is None: finish what is queued, then stop
WAKE = 31          # payload is None: look again (held data's inbox has room, activation)

# Between workers, from and to SYSTEM_TASK (cluster/backpressure.py): Backpressure records.
BACKPRESSURE = 40


class Message(NamedTuple):
    """What an executor's inbox holds: ``kind`` (a constant above) for task ``dest_task`` from
    task ``src_task`` (SYSTEM_TASK for the runtime's own), with its ``payload``."""
    kind: int
    dest_task: int
    src_task: int
    payload: Any


class AckInit(NamedTuple):
    """A tracked spout emit: ``xor`` is the XOR of the edge ids the spout task sent."""
    root: int
    xor: int
    spout_task: int


class AckFail(NamedTuple):
    """A bolt failed a tuple of this tree (``kind`` is a FailReason kind)."""
    root: int
    kind: str
    message: str | None


class Root(NamedTuple):
    """A record naming one tree."""
    root: int


class SpoutFail(NamedTuple):
    """An acker's fail verdict: ``component`` is the failing (or, for a timeout, the last
    acking) component's number in the topology layout, 0 when unknown."""
    root: int
    kind: str
    component: int
    message: str | None


class Backpressure(NamedTuple):
    """A worker's inbox for ``task`` is full (``overloaded`` 1) or has drained (0)."""
    task: int
    overloaded: int


# The flat record type of each control kind.
RECORDS: dict[int, type[tuple]] = {
    ACK_INIT: AckInit, ACK_FAIL: AckFail, ACK_RESET: Root, ACK_TIMEOUT: Root,
    SPOUT_ACK: Root, SPOUT_FAIL: SpoutFail, SPOUT_RESET: Root, BACKPRESSURE: Backpressure,
}


def stride(record: type[tuple]) -> int:
    """How many list items one record takes in a flat batch."""
    return len(record._fields)  # type: ignore[attr-defined]


def int_positions(record: type[tuple]) -> tuple[int, ...]:
    """The positions within a record that must hold ints (packed as such on the wire)."""
    hints = get_type_hints(record)
    return tuple(i for i, name in enumerate(record._fields)  # type: ignore[attr-defined]
                 if hints[name] is int)


def other_fields(record: type[tuple]) -> list[tuple[int, frozenset[type]]]:
    """The positions within a record that hold something other than an int, each with the
    types it may hold (``str``, or ``str`` and ``NoneType``), checked on the wire."""
    hints = get_type_hints(record)
    return [(i, frozenset(type(None) if t is None else t
                          for t in (get_args(hints[name]) or (hints[name],))))
            for i, name in enumerate(record._fields)  # type: ignore[attr-defined]
            if hints[name] is not int]


def ack_pairs() -> array:
    """An empty ``ACK_ACK`` payload: ``(root, value)`` pairs of unsigned 64-bit ints, where the
    value is an ack's edge id XOR the edge ids anchored to it (see stormlet/runtime/acker.py)."""
    return array("Q")


def records(record: type[tuple], batch: list) -> Iterator[tuple]:
    """The records of a flat ``batch``, each a plain tuple in ``record``'s field order. Read
    column-wise with slices, which costs far less than indexing per field."""
    n = stride(record)
    return zip(*(batch[i::n] for i in range(n)))
