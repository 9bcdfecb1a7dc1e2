"""The wire format between workers: one msgpack frame holds a batch of executor messages.

A frame is ``[WIRE_VERSION, topology, sender, tenure, [[kind, dest_task, src_task, payload],
...]]``: the version first, so that a worker of another stormlet release (during a rolling
upgrade, say) is refused with a message saying so rather than misread, then the topology id, so
that a worker whose port was reused never runs another topology's tuples, then the sending
worker's slot and its tenure there (tenure.py), so that a worker that lost its assignment in a
partition is refused by those that hold it now (``Fenced``).

Control payloads (acker and spout messages, backpressure) travel as packed integer columns. A
bolt's acks, in a process an ``array("Q")`` of (root, value) pairs, travel as its bytes, which
the receiver hands on as such an array, without an object per root. Every other control payload, in
a process a flat list of records (``runtime/protocol.py``), is ``[ints, others]``: the records' int
fields as one blob of unsigned 64-bit ints, a column per field, and their other fields (a fail's
reason and message) as one list per field; the receiver checks it with a few length tests instead of
one per int and rebuilds the flat list. Those blobs, and a data batch's roots, are in the machine's
byte order: the workers of one cluster share an architecture.

A data payload, a list of Tuple objects from ``src_task``, travels in columns (a value of a
type the topology registered, ``serializers.py``, as a msgpack extension value),
``[streams, values, roots]``: when every tuple is on the same stream (the usual case)
``streams`` is its name and ``values`` one column per field (a list, or for a column of strings
one string of them joined by U+001F), else ``streams`` and ``values`` are each tuple's stream
and value list (``columns.py``).

A data payload is packed on its own, into bytes inside the frame, by the executor that flushes
it (``encode_data``), and unpacked by the executor that runs it (``EncodedBatch.tuples``), which
rebuilds the tuples with its own shared stream info, found from the source task's component. So
the transport threads handle no object per tuple, a batch's tuples are built by the thread that
runs them, right before it does, and a tuple sent away dies in the thread that made it.

Anything malformed raises ``WireError``: the receiver logs it and drops that frame, never the
process; a data payload that does not decode is dropped, and reported, by the bolt it was for
(the rest of its frame is delivered).
"""

from __future__ import annotations

from array import array
from itertools import repeat
from typing import Any

import msgpack

from ..runtime.numbering import TopologyLayout
from ..runtime.protocol import (
    ACK_ACK,
    ACK_INIT,
    BACKPRESSURE,
    DATA,
    RECORDS,
    AckInit,
    Backpressure,
    Message,
    int_positions,
    other_fields,
    records,
    stride,
)
from ..serializers import DEFAULT_REGISTRY, Registry, ThreadPackers
from ..tuples import StreamInfo, Tuple
from .columns import from_columns, rows, to_columns
from .tenure import Fence

KNOWN_KINDS = frozenset((DATA, ACK_ACK, *RECORDS))
# The frame layout's version: raise it whenever a frame's or a payload's layout changes. Frames
# of version 1 (until 2026-11-27) had no version: ``[topology, messages]``; in version 2 control
# records were flat msgpack lists; since version 3 they are packed integer columns. Workers
# without a secret name their topology in the handshake since 2026-11-28 (security.py's
# ``transport_server``, frames unchanged), so one of an earlier release is refused at the
# connection, before any frame, and both ends log it. Version 4 adds the sender's slot and
# tenure.
WIRE_VERSION = 4
MAX_FRAME_BYTES = 256 * 1024 * 1024
_LAYOUT = "frame is not [version, topology, sender, tenure, list of messages]"


class WireError(ValueError):
    pass


class Fenced(WireError):
    """A frame from a worker that no longer holds its slot of the assignment (tenure.py)."""

    def __init__(self, sender: str, tenure: int, why: str):
        super().__init__(f"frame from worker slot {sender} (tenure {tenure}) refused: {why}")
        self.sender = sender
        self.tenure = tenure
        self.why = why


# Each control kind's record length, the positions of its int fields, and those of its other
# fields with the types each may hold.
_CONTROL_LAYOUT = {kind: (stride(record), int_positions(record), other_fields(record))
                   for kind, record in RECORDS.items()}


def encode_data(tuples: list[Tuple], registry: Registry = DEFAULT_REGISTRY) -> bytes:
    """A data payload as it travels: the batch's columns, packed with the topology's types
    (``serializers.py``: a registered value as a msgpack extension value)."""
    streams, values, roots = to_columns(tuples)
    if type(roots) is list:
        # Flat roots are tuples of ints in a process, arrays on the wire: a packer of exact
        # types packs a tuple as a registered one.
        roots = [r if r is None else list(r) for r in roots]
    return registry.packb([streams, values, roots])


def encode_acks(acks: array) -> bytes:
    """A bolt's acks as they travel: their (root, value) pairs' bytes (``protocol.ack_pairs``)."""
    if type(acks) is not array or acks.typecode != "Q":
        raise TypeError(f"acks travel from an array('Q') of (root, value) pairs, not "
                        f"{type(acks).__name__}")
    return acks.tobytes()


def encode_records(kind: int, records_flat: list) -> list:
    """A flat batch of control records as it travels: ``[ints, others]`` (module docstring)."""
    size, ints_at, others_at = _CONTROL_LAYOUT[kind]
    ints = array("Q")
    for i in ints_at:
        ints.fromlist(records_flat[i::size])
    return [ints.tobytes(), [records_flat[i::size] for i, _allowed in others_at]]


def encode_frame(messages: list[tuple], topology: str = "", sender: str = "",
                 tenure: int = 0) -> bytes:
    """One frame of ``messages`` from the worker in slot ``sender`` (``tenure.slot_key``) with
    ``tenure``; a data payload may come packed already (``encode_data``)."""
    out = []
    for kind, dest, src, payload in messages:
        if kind == DATA:
            if type(payload) is not bytes:
                payload = encode_data(payload)
        elif kind == ACK_ACK:
            payload = encode_acks(payload)
        elif kind in RECORDS:
            payload = encode_records(kind, payload)
        else:
            raise ValueError(f"message kind {kind} does not travel between workers")
        out.append((kind, dest, src, payload))
    return _FRAME_PACKERS.pack((WIRE_VERSION, topology, sender, tenure, out))


# Each thread's packers of frames, not ``msgpack.packb``'s new one (and 256 KB buffer) a frame.
_FRAME_PACKERS = ThreadPackers(lambda: msgpack.Packer(use_bin_type=True))


def decode_acks(payload: Any) -> array:
    """``encode_acks``'s pairs, as ``Acker.acks`` reads them."""
    pairs = _uint64s(payload, 2)
    if pairs is None:
        raise WireError("ack payload is not (root, value) pairs of 64 bits")
    return pairs


def _uint64s(blob: Any, group: int) -> array | None:
    """A blob of unsigned 64-bit ints (acks' or a batch's (root, value) pairs, control
    records' columns), a whole number of ``group``s of them, as an ``array("Q")``; None if it
    is not one."""
    if type(blob) is not bytes or len(blob) % (8 * group):
        return None
    ints = array("Q")
    ints.frombytes(blob)
    return ints


class EncodedBatch:
    """A data payload from another worker, still packed: the bolt it is for unpacks it."""

    __slots__ = ("_decoder", "_component", "_src", "_data")

    def __init__(self, decoder: FrameDecoder, component: str, src: int, data: bytes):
        self._decoder = decoder
        self._component = component
        self._src = src
        self._data = data

    def tuples(self) -> list[Tuple]:
        """The tuples; ``WireError`` if the payload is malformed."""
        try:
            columns = self._decoder.registry.unpackb(self._data)
        except Exception as exc:
            raise WireError(f"undecodable data payload from {self._component!r} "
                            f"({type(exc).__name__}: {exc})") from None
        return self._decoder.tuples(self._component, self._src, columns)


def decode_records(kind: int, payload: Any) -> list | None:
    """``encode_records``'s payload as the flat list of records it was; None if it is not one.
    Checked here so that a bad record is dropped with its frame, never met by an acker
    mid-batch."""
    size, ints_at, others_at = _CONTROL_LAYOUT[kind]
    if type(payload) is not list or len(payload) != 2 or type(payload[1]) is not list \
            or len(payload[1]) != len(others_at):
        return None
    blob, others = payload
    ints = _uint64s(blob, len(ints_at))
    if ints is None:
        return None
    n = len(ints) // len(ints_at)
    for column, (_i, allowed) in zip(others, others_at):
        if type(column) is not list or len(column) != n or not set(map(type, column)) <= allowed:
            return None
    flat: list = [None] * (n * size)
    for j, i in enumerate(ints_at):
        flat[i::size] = ints[j * n:(j + 1) * n].tolist()
    for column, (i, _allowed) in zip(others, others_at):
        flat[i::size] = column
    return flat


# An AckInit's spout task is always its sender: the acker tells that task, so it must exist.
_INIT_TASKS = slice(AckInit._fields.index("spout_task"), None, stride(AckInit))


class FrameDecoder:
    """Turns frames back into executor messages for one topology; with a ``fence``, only those
    of senders it admits (others raise ``Fenced``)."""

    def __init__(self, layout: TopologyLayout, topology: str = "", fence: Fence | None = None,
                 registry: Registry = DEFAULT_REGISTRY):
        self.layout = layout
        self.topology = topology
        self.fence = fence
        self.registry = registry   # the topology's types, which its data payloads may hold
        # The slots of the senders admitted at least once (a sender's first frame, an empty
        # one, says its socket has reached this worker: ``Sender._greet``).
        self._heard: set[str] = set()
        self._infos: dict[tuple[str, str], StreamInfo] = {}
        for cid, spec in layout.topology.components.items():
            for stream, declaration in spec.streams.items():
                self._infos[(cid, stream)] = StreamInfo(cid, stream, list(declaration.fields),
                                                        registry)

    def decode(self, frame: bytes) -> list[Message]:
        if len(frame) > MAX_FRAME_BYTES:
            raise WireError(f"frame of {len(frame)} bytes is over the {MAX_FRAME_BYTES} limit")
        try:
            raw = msgpack.unpackb(frame, raw=False, strict_map_key=False)
        except Exception as exc:
            raise WireError(f"undecodable frame ({type(exc).__name__}: {exc})") from None
        if type(raw) is not list or not 2 <= len(raw) <= 5:
            raise WireError(_LAYOUT)
        version = raw[0] if len(raw) > 2 else 1
        if version != WIRE_VERSION:
            raise WireError(f"frame of wire version {str(version)[:20]}, but this worker reads "
                            f"version {WIRE_VERSION}: a topology's workers must run one stormlet "
                            f"release")
        if len(raw) != 5:
            raise WireError(_LAYOUT)
        _version, topology, sender, tenure, messages = raw
        if type(messages) is not list or type(sender) is not str or type(tenure) is not int:
            raise WireError(_LAYOUT)
        if topology != self.topology:
            raise WireError(f"frame for topology {str(topology)[:80]!r}, not {self.topology!r}")
        fence = self.fence
        if fence is not None and not fence.admits(sender, tenure):
            raise Fenced(sender[:200], tenure, fence.why_refused(sender, tenure))
        self._heard.add(sender)
        return [self._message(item) for item in messages]

    def heard_from(self) -> set[str]:
        """The slots (``tenure.slot_key``) of the senders whose frames this decoder admitted
        at least once."""
        return set(self._heard)

    def _message(self, item: Any) -> Message:
        if type(item) is not list or len(item) != 4:
            raise WireError(f"message {str(item)[:80]!r} is not [kind, dest, src, payload]")
        kind, dest, src, payload = item
        if kind not in KNOWN_KINDS or type(dest) is not int or type(src) is not int:
            raise WireError(f"message header {item[:3]!r} is not a known kind with task numbers")
        if kind == BACKPRESSURE:   # worker to worker: no task sent it
            payload = decode_records(kind, payload)
            if payload is None or not all(0 <= task <= self.layout.max_task
                                          for task, _overloaded in records(Backpressure, payload)):
                raise WireError("backpressure payload is not [task, flag] records naming this "
                                "topology's tasks")
            return Message(kind, dest, src, payload)
        component = self.layout.task_component.get(src)
        if component is None:
            raise WireError(f"message from unknown task {src}")
        if kind == DATA:
            if type(payload) is not bytes:
                raise WireError(f"data payload from {component!r} is not packed columns")
            payload = EncodedBatch(self, component, src, payload)
        elif kind == ACK_ACK:
            payload = decode_acks(payload)
        else:
            payload = decode_records(kind, payload)
            if payload is None:
                raise WireError(f"payload of kind {kind} is not its records' packed columns")
            if kind == ACK_INIT and not set(payload[_INIT_TASKS]) <= {src}:
                raise WireError(f"acker inits from task {src} name another spout task")
        return Message(kind, dest, src, payload)

    def tuples(self, component: str, src: int, payload: Any) -> list[Tuple]:
        """The tuples of an unpacked data payload from task ``src`` of ``component``."""
        try:
            streams, values, roots_list = payload
            if type(values) is not list:
                raise ValueError
            if type(roots_list) is bytes:
                pairs = _uint64s(roots_list, 2)
                if pairs is None:
                    raise ValueError
                n = len(pairs) // 2
                # One stream: the pairs are read as they are; several: per tuple, as lists.
                roots_list = pairs if type(streams) is str else \
                    [[root, edge] for root, edge in zip(pairs[::2], pairs[1::2])]
            elif type(roots_list) is list:
                n = len(roots_list)
            else:
                raise ValueError
            if type(streams) is not str and len(values) != n:
                raise ValueError
        except (TypeError, ValueError):
            raise WireError(f"data payload from {component!r} is not [streams, values, roots] "
                            f"columns of one length") from None
        if type(streams) is str:
            info = self._info(component, streams)
            if len(values) != len(info.fields):
                raise WireError(f"tuples from {component!r} do not match the fields "
                                f"{info.fields}")
            try:
                values_list = rows(values, n)
            except ValueError:
                raise WireError(f"data payload from {component!r} is not [streams, values, "
                                f"roots] columns of one length") from None
            if type(roots_list) is not array:
                return self._same_stream(info, src, values_list, roots_list)
            tuples = from_columns(values_list, info, src, roots_list)
            if tuples is None:
                raise WireError(f"tuples from {component!r} name root 0")
            return tuples
        if type(streams) is not list or len(streams) != n:
            raise WireError(f"data payload from {component!r} has malformed stream names")
        mixed: list[Tuple] = []
        for stream, row, roots in zip(streams, values, roots_list):
            info = self._info(component, stream)
            _check_values(info, [row])
            mixed += self._same_stream(info, src, [row], [roots])
        return mixed

    def _info(self, component: str, stream: Any) -> StreamInfo:
        info = self._infos.get((component, stream)) if type(stream) is str else None
        if info is None:
            raise WireError(f"tuples from {component!r} on undeclared stream {stream!r}")
        return info

    @staticmethod
    def _same_stream(info: StreamInfo, src: int, values_list: list,
                     roots_list: list) -> list[Tuple]:
        n = len(values_list)
        if not set(map(type, roots_list)) <= {type(None), list}:
            raise WireError(f"tuples from {info.component!r} have malformed roots")
        try:
            return list(map(Tuple, values_list, repeat(info, n), repeat(src, n), roots_list))
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError(f"tuples from {info.component!r} have malformed roots: "
                            f"{exc}") from None


def _check_values(info: StreamInfo, values_list: list) -> None:
    # Column-wise, in C: every value list has the stream's length.
    if not set(map(type, values_list)) <= {list} or \
            not set(map(len, values_list)) <= {len(info.fields)}:
        raise WireError(f"tuples from {info.component!r} do not match the fields {info.fields}")
