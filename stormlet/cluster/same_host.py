"""How two workers of one host agree on a memory ring (memory_ring.py) for one's frames to the
other.

Each worker's receiver opens a *door*: a Unix socket in the abstract namespace named after the
address its peers know it by (``door_name``). A sender that has just reached a peer knocks there
(``offer_ring``); if the door opens, the peer is on this host, and the sender hands it the
descriptor of a new ring with the topology and its own slot, if the door's process runs as its
own user (abstract names have no permissions: another user could hold a restarting worker's
name); the receiver maps the ring if the knocking process runs as its own user and for its
topology, and answers. From then on the sender
puts its frames for that peer in the ring, and the connection stays open as the doorbell (a byte
when the receiver sleeps) and as each side's sign that the other lives: it ends when either
process ends, however it ends.

Abstract Unix socket names belong to a network namespace, so "this host" is what the network
says it is: two hosts made of network namespaces on one machine (the multi-host tests) do not
find each other's doors, and their frames keep crossing the network, with its faults. Nothing
is left in the file system either way.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from .memory_ring import MemoryRing, supported

log = logging.getLogger(__name__)

# The offer's layout: [version, topology, sender's slot, ring key]. Raise the version whenever
# it or the ring's layout changes; a door refuses versions it does not read (the sender uses
# ZeroMQ). Version 2's sender opens the ring with an empty frame parked at its first place
# (transport.py), which a door of version 1 would refuse; this door reads both.
OFFER_VERSION = 2
READ_OFFER_VERSIONS = (1, 2)
ACCEPTED, REFUSED = b"\x01", b"\x00"
# How long a sender waits for a door's answer: the receiver answers from its own thread,
# within a look (transport.py's receiver looks at least every 20 ms). And how long a door waits
# for the offer of a sender that connected.
OFFER_TIMEOUT_SECS = 2.0
OFFER_READ_SECS = 0.5
# How long a ring waits at the place of a frame too large for it, which travels over the socket,
# before it gives the place up (the frame was lost with a broken link: its tuples are replayed).
PARKED_WAIT_SECS = 10.0
# Bytes of records in each ring (a worker has one to each peer of its host that it sends to,
# resident once written through): frames of up to a quarter of it go through it, larger ones
# over the socket.
RING_BYTES = 2 * 1024 * 1024
_MAX_OFFER_BYTES = 4096
_CREDENTIALS = struct.Struct("3i")   # SO_PEERCRED: pid, uid, gid


def door_name(address: str) -> bytes:
    """The abstract Unix socket name of the worker that peers reach at ``address``
    (tcp://host:port)."""
    return b"\0stormlet-transport/" + address.removeprefix("tcp://").encode()


@dataclass
class RingEnd:
    """One side of a ring: the ring, the connection between its two processes (the doorbell,
    and each side's sign that the other lives), and the ring's key."""
    ring: MemoryRing
    bell: socket.socket
    key: int

    def close(self) -> None:
        self.bell.close()
        self.ring.close()


@dataclass
class OutboundRing(RingEnd):
    """The sender's side of a ring to one peer."""
    next_token: int = 0

    def ring_doorbell(self) -> bool:
        """Wake the peer if it sleeps; False if the peer is gone."""
        if not self.ring.reader_sleeping():
            return True
        try:
            self.bell.send(b"!", socket.MSG_DONTWAIT)
        except BlockingIOError:   # bells it has not read yet: it will wake
            pass
        except OSError:
            return False
        return True

    def peer_gone(self) -> bool:
        """Whether the peer's end of the connection closed (its process ended)."""
        try:
            return self.bell.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


def offer_ring(address: str, topology: str, slot: str,
               capacity: int | None = None) -> OutboundRing | None:
    """A ring to the worker at ``address`` if it is on this host and accepts one; else None
    (it is elsewhere, an older stormlet, another topology's, or did not answer in time)."""
    if not supported():
        return None
    bell = None
    outbound = None
    try:
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        outbound = _offer(bell, address, topology, slot, capacity or RING_BYTES)
    except OSError as exc:   # out of descriptors or memory, say
        log.warning("could not offer worker %s a shared-memory ring: %s; frames to it go over "
                    "TCP", address, exc)
    if outbound is None and bell is not None:
        bell.close()
    return outbound


def _offer(bell: socket.socket, address: str, topology: str, slot: str,
           capacity: int) -> OutboundRing | None:
    bell.settimeout(OFFER_TIMEOUT_SECS)
    try:
        bell.connect(door_name(address))
    except OSError:   # no door of that name in this network namespace: another host
        return None
    # Abstract names have no permissions: only a door of this user gets the ring.
    owner = _peer_uid(bell)
    if owner != os.getuid():
        log.warning("the shared-memory door of worker %s belongs to user %s, not this worker's "
                    "%s: frames to it go over TCP", address, owner, os.getuid())
        return None
    ring, fd = MemoryRing.create(capacity)
    key = int.from_bytes(os.urandom(8), "little")
    try:
        socket.send_fds(bell, [msgpack.packb([OFFER_VERSION, topology, slot, key])], [fd])
        answer = bell.recv(1)
    except OSError as exc:
        answer = b""
        log.info("worker %s on this host did not take a shared-memory ring (%s); frames to it "
                 "go over TCP", address, exc)
    finally:
        os.close(fd)
    if answer != ACCEPTED:
        ring.close()
        return None
    bell.setblocking(False)
    return OutboundRing(ring, bell, key)


def _peer_uid(conn: socket.socket) -> int:
    _pid, uid, _gid = _CREDENTIALS.unpack(
        conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return uid


@dataclass
class InboundRing(RingEnd):
    """The receiver's side of a ring from one sender."""
    slot: str
    # Frames too large for the ring that came another way, by token, until the ring reaches
    # their place.
    parked: dict[int, bytes] = field(default_factory=dict)
    # The token whose frame the ring waits for, and since when (monotonic).
    awaited: tuple[int, float] = (-1, 0.0)

    def unpark(self, token: int) -> bytes | None:
        """The parked frame of ``token`` once it came; None while it may still come; b"" once
        it waited PARKED_WAIT_SECS (the ring gives its place up)."""
        frame = self.parked.pop(token, None)
        if frame is not None:
            return frame
        now = time.monotonic()
        if self.awaited[0] != token:
            self.awaited = (token, now)
        elif now - self.awaited[1] > PARKED_WAIT_SECS:
            # The first token opens the ring: what the socket carried before it was lost too.
            log.warning("a frame from worker %s that travels over the socket, its place kept in "
                        "the memory ring, did not come in %.0f s; went on without it (the link "
                        "broke or stalled; tuples it held are replayed)", self.slot,
                        PARKED_WAIT_SECS)
            return b""
        return None


class Door:
    """A receiver's door: admits rings from senders of this host (``admit``), and hears their
    doorbells (``hear``). Used by the receiver's thread alone."""

    def __init__(self, address: str, topology: str) -> None:
        """Open the door of the worker that peers reach at ``address``. ``opened`` is false
        where rings are not supported or the name is taken (a worker of this port that has not
        ended yet): senders then use ZeroMQ."""
        self.topology = topology
        self.rings: list[InboundRing] = []
        self._listener: socket.socket | None = None
        if not supported():
            return
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            listener.bind(door_name(address))
            listener.listen(64)
        except OSError as exc:
            listener.close()
            log.info("no shared-memory door for %s (%s): workers of this host send to it over "
                     "TCP", address, exc)
            return
        listener.setblocking(False)
        self._listener = listener

    @property
    def opened(self) -> bool:
        return self._listener is not None

    def fds(self) -> list[int]:
        """What to poll: the door, and each admitted sender's doorbell."""
        if self._listener is None:
            return []
        return [self._listener.fileno()] + [inbound.bell.fileno() for inbound in self.rings]

    def admit(self) -> list[InboundRing]:
        """The rings senders have offered since the last look that this door accepts; each
        sender waits for ``let_in`` before it uses its ring."""
        admitted: list[InboundRing] = []
        while self._listener is not None:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:   # out of descriptors, say: the sender uses ZeroMQ
                log.warning("could not admit a shared-memory ring: %s", exc)
                break
            inbound = self._admit(conn)
            if inbound is None:
                conn.close()
            else:
                admitted.append(inbound)
        return admitted

    def _admit(self, conn: socket.socket) -> InboundRing | None:
        conn.settimeout(OFFER_READ_SECS)
        fds: list[int] = []
        try:
            uid = _peer_uid(conn)
            if uid != os.getuid():
                log.warning("refused a shared-memory ring: its process runs as user %s, this "
                            "worker as %s; that sender uses TCP", uid, os.getuid())
                return None
            offer, fds, _flags, _addr = socket.recv_fds(conn, _MAX_OFFER_BYTES, 1)
            why = self._refusal(offer, fds)
            if why:
                log.warning("refused a shared-memory ring: %s; that sender uses TCP", why)
                conn.sendall(REFUSED)
                return None
            _version, _topology, slot, key = msgpack.unpackb(offer)
            ring = MemoryRing(fds[0], MemoryRing.size_of(fds[0]))
        except (OSError, ValueError) as exc:
            log.warning("could not admit a shared-memory ring: %s; that sender uses TCP", exc)
            return None
        finally:
            for fd in fds:
                os.close(fd)
        # Never blocks from now on: ``hear`` reads its doorbells as they come.
        conn.setblocking(False)
        return InboundRing(ring, conn, key, slot)

    def let_in(self, inbound: InboundRing) -> None:
        """Take an admitted ring's frames from now on (``rings``), and tell its sender to use
        it (if the sender has gone meanwhile, ``hear`` finds its ring ended). Writers need not
        ring until the reader sleeps."""
        inbound.ring.wake()
        self.rings.append(inbound)
        try:
            inbound.bell.send(ACCEPTED)   # one byte into an empty buffer: never would block
        except OSError:
            pass

    def _refusal(self, offer: bytes, fds: list[int]) -> str:
        """Why an offer is refused, or ''."""
        try:
            fields: Any = msgpack.unpackb(offer)
        except Exception:
            fields = None
        if (not isinstance(fields, list) or len(fields) != 4 or len(fds) != 1
                or not isinstance(fields[1], str) or not isinstance(fields[2], str)
                or not isinstance(fields[3], int)):
            return "the offer is malformed"
        if fields[0] not in READ_OFFER_VERSIONS:
            return (f"it speaks offer version {fields[0]}, this worker "
                    f"{' or '.join(map(str, READ_OFFER_VERSIONS))}")
        if fields[1] != self.topology:
            return f"it is for topology {fields[1]!r}, this worker runs {self.topology!r}"
        return ""

    def hear(self) -> list[InboundRing]:
        """Read the doorbells rung since the last look; the rings whose sender has ended
        (still to be drained, then closed)."""
        ended: list[InboundRing] = []
        for inbound in self.rings:
            try:
                while inbound.bell.recv(4096):
                    pass
                ended.append(inbound)   # recv gave b"": the sender's end closed
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                ended.append(inbound)
        return ended

    def close(self) -> None:
        for inbound in self.rings:
            inbound.close()
        self.rings = []
        if self._listener is not None:
            self._listener.close()
            self._listener = None
