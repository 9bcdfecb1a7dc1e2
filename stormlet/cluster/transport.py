"""Moving executor messages between workers over ZeroMQ.

Executors hand messages for remote tasks to a ``RemoteRoute``. While the link to the task's
worker is up and nothing waits for it, the executor's thread sends the message itself, a frame on
the PUSH socket to that worker (``Sender.send``): ZeroMQ's own I/O thread, which needs no
interpreter lock, writes it to TCP, coalescing frames under load. Otherwise the message is queued
for the worker's one sender thread, which drains whatever has queued up, groups it by
destination worker and sends one msgpack frame per destination, waiting out a full peer, holding
data for a paused task, dropping what is for a lost link. (Every message once went through that
thread: its wake-up at each hand-over preempted the executors' thread on the worker's core and then
waited for the interpreter lock, a fifth of the executors' thread's time on realistic work,
benchmarks/HISTORY.md.) Each worker binds one PULL socket on its slot port; its receiver thread
decodes frames and puts the messages in local inboxes. A data batch is packed by the executor that
sends it and unpacked by the bolt it is for (wire.py), so neither thread here handles an object per
tuple.

Between two workers of one host, frames take a shorter way: the sender, once it reaches a peer,
offers it a ring in shared memory (same_host.py, memory_ring.py), and from then on puts that
peer's frames there instead of on the socket; the peer's executors' thread takes them at its
rounds' ends, its receiver thread when they sleep, woken by a doorbell only then. No system call
and no thread wake-up while both are busy: over loopback TCP each frame cost both workers a few
of each (benchmarks/HISTORY.md). The socket stays: it tells whether the link is up, and carries
a frame too large for the ring, whose place the ring keeps so that the peer takes it in order.

A worker whose executor falls behind asks its peers to hold data for it (backpressure.py): the
receiver never blocks, the senders' data routes wait instead.

The handshake names the topology (security.py's ``transport_server``): with a cluster secret both
ends speak CURVE with the topology's transport keys, without one the topology id goes in the
clear. A peer of another topology, or with no keys, is refused at the handshake and counted in
the receiver's ``frames_rejected``, along with frames that do not decode. So when a port is
reused while the worker that held it drains, the new topology's peers do not count it as
reached, and none of their frames reaches it (without a secret, those queued for it when it
refused are dropped with the refused socket, and their tuples replayed; with CURVE they
wait). A data payload inside a good frame is checked when its bolt unpacks it; one that does
not decode is dropped and reported as that bolt task's error.

A broken link is noticed in seconds, not at TCP's pace: both ends send ZeroMQ heartbeats and
drop a connection that stays silent for a few of them, and the sender's connection attempts give
up after a few seconds to start again (``LinkTimes``, from the topology's settings) (a SYN to a host
that cannot be reached would otherwise wait out TCP's own backoff, tens of seconds after the link
came back). The sender says once when it loses a peer it had reached, drops what it would send there
at once instead of stalling its other peers' traffic (it was tracked, times out at its spout and
is replayed), and says when the link is back (``on_link``, ``unreachable``).

A worker starts its spouts only once it reaches every peer (as Storm's workers wait for all their
connections): until a peer has bound its port, ZeroMQ would queue whole frames for it, thousands
of tuples each, which then arrive at once and swamp it before its backpressure can act. It also
waits until every peer reaches it (Storm does not): until then the peer's requests to hold data
and its acks wait in the peer's socket, while the spouts emit unchecked (a worker that started
0.8 s before its peer once let a fast spout put 300,000 tuples in flight that way). The
sender connects on ``connect_to`` and reports in ``reached`` each peer whose handshake has
succeeded at least once, and greets the peer with an empty frame at each handshake: the peer's
decoder notes its slot (``FrameDecoder.heard_from``). A refusal by the peer ends libzmq's
connection for good (it retries only what failed without the peer's word), so the sender
replaces a refused socket after a pause, growing to ``RETRY_MAX_SECS``, and tries again.

ZeroMQ sockets are not thread-safe: the PUSH sockets and the rings' writing ends are used under
the sender's lock (by it and by the executors' threads sending directly), the monitors by the
sender thread alone, the PULL socket and the rings' reading ends under the receiver's lock (by its
thread and by the executors' thread at a round's end), the door by the receiver thread alone.
"""

from __future__ import annotations

import logging
import queue
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from .. import config as cfg
from ..repeats import Repeats
from ..runtime.inbox import wait_for_room
from ..runtime.protocol import BACKPRESSURE, DATA
from ..serializers import DEFAULT_REGISTRY, Registry
from .backpressure import OverloadWatch, PausedTasks
from .same_host import Door, InboundRing, OutboundRing, offer_ring
from .security import Security
from .wire import Fenced, FrameDecoder, WireError, encode_data, encode_frame

log = logging.getLogger(__name__)

# Messages waiting in the sender's queue before data senders wait (backpressure).
SEND_QUEUE_LIMIT = 2000
# Frames ZeroMQ buffers per peer before send blocks.
HIGH_WATER_MARK = 1000
MAX_MESSAGES_PER_DRAIN = 5000
# How long one frame may wait for a peer that accepts nothing before it is dropped.
SEND_TIMEOUT_SECS = 2.0
# Queued in place of a message: open the socket to the address now (``connect_to``).
_CONNECT = "connect"
# Handshake outcomes the sender watches. A refusal by the peer (its ZAP handler said no, or it
# speaks another mechanism) ends libzmq's connection without a retry; others it retries itself.
_REFUSED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
_WATCHED_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | _REFUSED | zmq.EVENT_DISCONNECTED
# How often, at most, the sender reads its sockets' handshake outcomes while busy.
HANDSHAKE_CHECK_SECS = 0.05
# A fenced sender (tenure.py) is reported when its first frame is refused, and again only
# after this long without one; at most this many are remembered.
FENCED_QUIET_SECS = 60.0
MAX_FENCED_SENDERS = 1000
# The pause before a refused socket is replaced: the first, and the longest it grows to.
RETRY_FIRST_SECS, RETRY_MAX_SECS = 0.1, 2.0
# ZeroMQ's pause between attempts to connect to a peer that does not listen: the first, and the
# longest it doubles to. Short, because a worker that starts before its peer hears from that
# peer only once it connects: until then its requests to hold data (backpressure) and its acks
# wait in the socket, while the peer's spouts emit unchecked (a 2 s cap once let a fast spout
# put 300,000 tuples in flight before the first pause reached it). Storm's Netty client
# waits at most 1 s.
RECONNECT_FIRST_MS, RECONNECT_MAX_MS = 100, 400
# While the socket brings nothing and memory rings bring frames (every peer is on this host), a
# round looks at the socket only this often: at a look a round, looks that found nothing were
# ~0.7 % of a busy executors' thread. A look asks the socket whether a frame waits (EVENTS)
# before it takes one: in busy workers, where its code and data are cold, one that asks takes
# ~12 µs, where taking one and meeting zmq.Again took ~25 (benchmarks/HISTORY.md, 2026-12-01).
# What the socket then carries waits at most this long: a greeting, a frame of a peer on
# another host after a quiet spell (the next looks follow at once), or a parked frame, whose
# ring asks for the socket at once (``waits_for_parked``).
QUIET_SOCKET_LOOK_SECS = 0.002
# Frames the receiver takes at most after one poll: each poll is a system call, costly on a
# virtual machine, so it takes what has come; the bound lets it look at overloaded inboxes.
MAX_FRAMES_PER_DRAIN = 100
# The longest a shared thread's round holds what its executors sent before it goes.
COALESCE_SECS = 0.0005
# A shared thread's rounds take the frames that came at most this often; the receiver thread
# leaves the socket to them while they last asked less than ROUNDS_HOLD_SECS before.
ROUNDS_TAKE_SECS = 0.0002
ROUNDS_HOLD_SECS = 0.02
# Meanwhile the receiver thread sleeps, until their thread sleeps too (``rounds_idle``), the
# guard finds it blocked in a turn (``look``), or this long. Each time it wakes it takes the
# interpreter lock from the busy executors, and preempts them to ask for it: waking each
# ROUNDS_HOLD_SECS to see whether they still ask was about half of their thread's 400-540
# preemptions a second.
ROUNDS_LEFT_SECS = 0.2
# A frame too large for a peer's memory ring (or the empty one that opens a ring) goes over
# ZeroMQ as this byte (never the first of a msgpack frame), the ring's key and the token of the
# place the ring keeps for it, then the frame.
PARKED_FRAME = b"\xc1"
_PARKED_HEAD = struct.Struct("<QQ")


@dataclass(frozen=True)
class LinkTimes:
    """A link's liveness: a heartbeat every ``heartbeat_secs`` each way, the link dropped after
    ``timeout_secs`` without one (or any traffic), and a connection attempt abandoned (then
    retried) after ``connect_secs``. A topology's settings (config.py's stormlet.link.*)."""
    heartbeat_secs: float
    timeout_secs: float
    connect_secs: float

    @classmethod
    def of(cls, conf: dict[str, Any] | None = None) -> LinkTimes:
        """The times a topology's ``conf`` sets, defaults for the rest."""
        conf = cfg.merged(conf)
        return cls(float(conf[cfg.STORMLET_LINK_HEARTBEAT_SECS]),
                   float(conf[cfg.STORMLET_LINK_TIMEOUT_SECS]),
                   float(conf[cfg.STORMLET_LINK_CONNECT_TIMEOUT_SECS]))

    def watch(self, sock: zmq.Socket) -> None:
        """Make ``sock`` send heartbeats and drop a connection that goes silent (both ends of a
        link do, so each notices a dead peer within ``timeout_secs``)."""
        sock.setsockopt(zmq.HEARTBEAT_IVL, int(self.heartbeat_secs * 1000))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(self.timeout_secs * 1000))
        sock.setsockopt(zmq.HEARTBEAT_TTL, int(self.timeout_secs * 1000))


class Sender(threading.Thread):
    def __init__(self, context: zmq.Context, stopping: threading.Event, topology: str = "",
                 security: Security | None = None,
                 on_link: Callable[[str, float | None], object] | None = None,
                 slot: str = "", tenure: int = 0, link_times: LinkTimes | None = None,
                 shared_memory: bool = True):
        """``on_link(address, down_secs)`` is called on this thread when the link to a peer
        reached before is lost (``down_secs`` None) and when it is back (how long it was down).
        Frames name the sending worker's ``slot`` and ``tenure`` (tenure.py). With
        ``shared_memory``, frames to a peer on this host go through a memory ring it accepts
        (same_host.py)."""
        super().__init__(name="transfer-sender", daemon=True)
        self.link_times = link_times or LinkTimes.of()
        self.topology = topology
        # The topology's types (serializers.py), which data batches are packed with; set by
        # the worker once its runtime has them, before any executor runs.
        self.registry: Registry = DEFAULT_REGISTRY
        self.slot = slot
        self.tenure = tenure
        self.security = security or Security()
        self.on_link = on_link
        self.context = context
        self.stopping = stopping
        self.queue: queue.SimpleQueue[tuple[str, tuple]] = queue.SimpleQueue()
        # The sockets and what the direct sends read (which peers are reached, lost, refused):
        # changed by this thread, read by the executors' threads as they send.
        self._lock = threading.Lock()
        self._sockets: dict[str, zmq.Socket] = {}
        self._monitors: dict[str, zmq.Socket] = {}   # each socket's handshake outcomes
        self._reached: set[str] = set()
        # Refused sockets: when each is replaced, and the pause after its next refusal.
        self._retry_at: dict[str, float] = {}
        self._retry_pause: dict[str, float] = {}
        self._next_handshake_check = 0.0
        self._lost: dict[str, float] = {}   # peers reached once whose link is down, and since
        # Peers on this host that took a memory ring: their frames go there, not to the socket
        # (which still carries frames too large for the ring, and tells whether the link is up).
        self.shared_memory = shared_memory
        self._rings: dict[str, OutboundRing] = {}
        # Rings a peer took whose opening frame (``_open_ring``) the socket could not take yet:
        # their frames go to the socket meanwhile, and the opening is tried again at each look.
        self._opening: dict[str, OutboundRing] = {}
        # Peers reached whose greeting (``_greet``) the socket could not take yet: tried again
        # at each look.
        self._greeting: set[str] = set()
        # Messages for each peer handed to this thread by ``send`` and not yet sent or dropped:
        # a direct send goes only where there are none, so that a peer's messages keep their
        # order.
        self._waiting: dict[str, int] = {}
        # The threads running executors in rounds (``enter``), none once the rounds gave this
        # work up (``leave``); what they sent, per peer, and since when (monotonic; 0 when
        # empty): one frame a peer once it waited COALESCE_SECS (``flush_if_due``) or at
        # ``flush``.
        self._rounds_threads: set[int] = set()
        self._no_rounds = False
        self._outbox: dict[str, list[tuple]] = {}
        self._outbox_since = 0.0
        self._repeats = Repeats(log)   # lines about dropped frames, a few a while
        self.paused = PausedTasks()   # remote tasks whose workers asked us to hold their data
        self.frames_sent = 0
        self.frames_in_rings = 0   # of frames_sent
        self.messages_dropped = 0
        # Data tuples handed over for other workers, and the batches they went in (counted by
        # the executors' threads, a batch at a time): what crosses between workers.
        self.tuples_sent = 0
        self.batches_sent = 0

    def route(self, address: str, slot: str = "") -> RemoteRoute:
        """A route to the worker at ``address``, in ``slot`` (``tenure.slot_key``)."""
        return RemoteRoute(self, address, slot)

    def send(self, address: str, message: tuple) -> None:
        """Send ``message`` to the worker at ``address`` from the calling thread while the link
        is up and nothing for that worker waits here (and it is not data for a task whose
        worker asked us to hold it): at once, or at the end of the round from a thread running
        executors in rounds. Otherwise this thread sends it, in turn."""
        kind, dest, _src, _payload = message
        with self._lock:
            if self._direct(address) and not (kind == DATA and self.paused.paused(dest)):
                if threading.get_ident() in self._rounds_threads:
                    held = self._outbox.get(address)
                    if held is None:
                        self._outbox[address] = [message]
                        if not self._outbox_since:
                            self._outbox_since = time.monotonic()
                    else:
                        held.append(message)
                    return
                if self._send_now(address, [message]):
                    return
            # After what the round holds for that worker: a peer's messages keep their order.
            self._hand_over(address, self._outbox.pop(address, []) + [message])

    def flush(self) -> None:
        """Send what the rounds under way hold, now."""
        if self._outbox:   # unlocked, a hint: what comes meanwhile goes at the next flush
            with self._lock:
                self._flush_outbox()

    # For the threads running executors in rounds (TransportRounds):

    def enter(self) -> None:
        """The calling thread runs executors in rounds: what it sends waits in the outbox for
        ``flush_if_due`` or ``flush``, one frame a peer for all it sent meanwhile."""
        with self._lock:
            if not self._no_rounds:
                self._rounds_threads.add(threading.get_ident())

    def flush_if_due(self, now: float) -> None:
        """Send what the rounds hold if the oldest of it came ``COALESCE_SECS`` before ``now``
        (monotonic) or longer."""
        if self._outbox_since and now - self._outbox_since >= COALESCE_SECS:
            self.flush()

    def leave(self, every_thread: bool = False) -> None:
        """The calling thread (or ``every_thread``) runs no more rounds: what they hold goes
        now."""
        with self._lock:
            if every_thread:
                self._no_rounds = True
                self._rounds_threads.clear()
            else:
                self._rounds_threads.discard(threading.get_ident())
            self._flush_outbox()

    def connect_to(self, addresses: set[str]) -> None:
        """Open the sockets to these workers now, without waiting for data to send them."""
        for address in addresses:
            self.queue.put((address, _CONNECT))  # type: ignore[arg-type]

    def reached(self) -> set[str]:
        """The workers whose handshake has succeeded at least once."""
        return set(self._reached)

    def unreachable(self) -> dict[str, float]:
        """The peers reached before whose link is down now, and since when (time.time())."""
        return dict(self._lost)

    # Called with the lock held: ---------------------------------------------------------------

    def _direct(self, address: str) -> bool:
        """Whether a message for ``address`` may go without this thread: nothing for it waits
        here, and its socket has reached its peer and neither lost the link since nor awaits
        replacement."""
        return (address not in self._waiting and address in self._reached
                and address not in self._lost and address not in self._retry_at
                and address in self._sockets)

    def _send_now(self, address: str, messages: list[tuple]) -> bool:
        """Hand one frame of ``messages`` to ``address``'s socket without waiting; False if its
        peer's queue is full. Messages that cannot be packed are dropped (True)."""
        frame = self._frame(address, messages)
        return frame is None or self._push(address, frame, len(messages))

    def _frame(self, address: str, messages: list[tuple]) -> bytes | None:
        """``messages`` in one frame; None, and dropped, if they cannot be packed."""
        try:
            return encode_frame(messages, self.topology, self.slot, self.tenure)
        except Exception:
            # Never let one bad message stop a thread that carries other traffic: what it held
            # was tracked at its spout, times out there and is replayed.
            self.messages_dropped += len(messages)
            log.exception("dropped %d messages for %s that could not be packed", len(messages),
                          address)
            return None

    def _push(self, address: str, frame: bytes, count: int) -> bool:
        """Hand ``frame`` (of ``count`` messages) to ``address``'s socket without waiting;
        False if its peer's queue is full. A socket that fails otherwise (its context ending
        with the worker) drops it: an executor sending must not fail for the transport."""
        outbound = self._rings.get(address)
        try:
            if outbound is None:
                self._socket(address).send(frame, zmq.NOBLOCK, copy=False)
            elif not self._put_in_ring(address, outbound, frame):
                return False
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            self.messages_dropped += count
            self._repeats.warning("send", "dropped a frame for %s: %s (its tuples time out at "
                                  "their spouts and are replayed)", address, exc)
            return True
        self.frames_sent += 1
        return True

    def _put_in_ring(self, address: str, outbound: OutboundRing, frame: bytes) -> bool:
        """Put ``frame`` in ``address``'s memory ring (one too large for it goes over ZeroMQ, the
        ring keeping its place), and wake the peer if it sleeps; False if the ring is full.
        Raises zmq.Again if the socket is full."""
        ring = outbound.ring
        if len(frame) <= ring.largest:
            if not ring.put(frame):
                return False
        elif not self._park(address, outbound, frame):
            return False
        self.frames_in_rings += 1
        if not outbound.ring_doorbell():
            self._drop_ring(address)   # its process ended: ZeroMQ's monitor says so too
        return True

    def _park(self, address: str, outbound: OutboundRing, frame: bytes) -> bool:
        """Send ``frame`` over ``address``'s socket, and keep its place in the ring: the peer
        takes it there, in order. False if the ring has no room for the place now. Raises
        zmq.Again if the socket is full."""
        if not outbound.ring.room_for_parked():
            return False
        outbound.next_token += 1
        head = _PARKED_HEAD.pack(outbound.key, outbound.next_token)
        self._socket(address).send(PARKED_FRAME + head + frame, zmq.NOBLOCK)
        outbound.ring.put_parked(outbound.next_token)
        return True

    def _start_ring(self, address: str, outbound: OutboundRing) -> None:
        """Send ``address``'s frames through ``outbound``, a ring the peer took, once it is
        opened (``_open_ring``); until then through the socket, and the next look tries again."""
        if self._open_ring(address, outbound):
            self._opening.pop(address, None)
            self._rings[address] = outbound
            log.info("frames to worker %s, on this host, go through shared memory", address)
        else:
            self._opening[address] = outbound

    def _open_ring(self, address: str, outbound: OutboundRing) -> bool:
        """Start a new ring to ``address`` behind what its socket carried before: an empty
        frame parked at the ring's first place goes over the socket after them (ZeroMQ keeps a
        socket's frames in order), so the peer takes the ring's frames only after those. False
        if the socket cannot take that frame now."""
        try:
            return self._park(address, outbound, b"")
        except zmq.ZMQError:
            return False

    def _greet(self, address: str) -> None:
        """Send ``address``'s peer an empty frame over the socket that just reached it: its first
        frame from this worker on this connection, which tells the peer that what this worker
        sends it (acks, requests to hold data) reaches it now: its spouts wait for that
        (``FrameDecoder.heard_from``). If the socket cannot take it now, the next look tries
        again."""
        frame = self._frame(address, [])
        try:
            if frame is not None:
                self._socket(address).send(frame, zmq.NOBLOCK)
        except zmq.Again:
            self._greeting.add(address)
            return
        except zmq.ZMQError as exc:   # the context ends with the worker
            log.debug("did not greet worker %s: %s", address, exc)
        self._greeting.discard(address)

    def _drop_ring(self, address: str) -> None:
        for rings in (self._rings, self._opening):
            outbound = rings.pop(address, None)
            if outbound is not None:
                outbound.close()

    def _flush_outbox(self) -> None:
        outbox, self._outbox, self._outbox_since = self._outbox, {}, 0.0
        for address, messages in outbox.items():
            if not (self._direct(address) and self._send_now(address, messages)):
                self._hand_over(address, messages)

    def _hand_over(self, address: str, messages: list[tuple]) -> None:
        """Queue ``messages`` for this thread to send."""
        self._waiting[address] = self._waiting.get(address, 0) + len(messages)
        for message in messages:
            self.queue.put((address, message))

    def _done(self, address: str, count: int) -> None:
        """``count`` messages ``send`` queued for ``address`` were sent or dropped."""
        left = self._waiting.get(address, 0) - count
        if left > 0:
            self._waiting[address] = left
        else:
            self._waiting.pop(address, None)

    def _socket(self, address: str) -> zmq.Socket:
        sock = self._sockets.get(address)
        if sock is None:
            sock = self.context.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_FIRST_MS)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
            sock.setsockopt(zmq.CONNECT_TIMEOUT, int(self.link_times.connect_secs * 1000))
            self.link_times.watch(sock)
            self.security.transport_client(sock, self.topology)
            self._monitors[address] = sock.get_monitor_socket(_WATCHED_EVENTS)
            sock.connect(address)
            self._sockets[address] = sock
        return sock

    def _close(self, address: str, forget: bool = True) -> None:
        """Close the socket to ``address``; unless ``forget`` is false (it is being replaced),
        forget the peer too."""
        monitor = self._monitors.pop(address, None)
        sock = self._sockets.pop(address, None)
        if monitor is not None and sock is not None:
            sock.disable_monitor()
            monitor.close(linger=0)
        if sock is not None:
            sock.close(linger=0)
        if forget:
            self._drop_ring(address)
            self._reached.discard(address)
            self._greeting.discard(address)
            self._retry_at.pop(address, None)
            self._retry_pause.pop(address, None)
            self._lost.pop(address, None)

    def _refused(self, address: str, now: float) -> None:
        pause = self._retry_pause.get(address, RETRY_FIRST_SECS)
        self._retry_at[address] = now + pause
        self._retry_pause[address] = min(RETRY_MAX_SECS, pause * 2)
        if pause == RETRY_FIRST_SECS:
            log.warning("worker %s refused this topology's handshake (another topology's worker "
                        "on that port, or another stormlet); trying again until it admits us",
                        address)

    # This thread: --------------------------------------------------------------------------

    def _check_handshakes(self) -> None:
        """Note the peers reached and the sockets refused since the last look, and replace
        the refused sockets whose pause is over."""
        now = time.monotonic()
        if now < self._next_handshake_check:
            return
        self._next_handshake_check = now + HANDSHAKE_CHECK_SECS
        links: list[tuple[str, float | None]] = []   # told after the lock: on_link may send
        handshakes: list[str] = []
        with self._lock:
            for address in [a for rings in (self._rings, self._opening)
                            for a, outbound in rings.items() if outbound.peer_gone()]:
                self._drop_ring(address)
            for address, outbound in list(self._opening.items()):
                self._start_ring(address, outbound)
            for address in list(self._greeting):
                self._greet(address)
            for address, monitor in list(self._monitors.items()):
                while True:
                    try:
                        event = recv_monitor_message(monitor, zmq.NOBLOCK)["event"]
                    except zmq.Again:
                        break
                    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                        # Reached once offered a ring; its later events at the next look.
                        handshakes.append(address)
                        break
                    elif event == zmq.EVENT_DISCONNECTED:
                        if address in self._reached and address not in self._lost:
                            self._lost[address] = time.time()
                            links.append((address, None))
                    elif event & _REFUSED and address not in self._retry_at:
                        self._refused(address, now)
            for address in [a for a, at in self._retry_at.items() if at <= now]:
                del self._retry_at[address]
                self._close(address, forget=False)
                try:
                    self._socket(address)
                except zmq.ZMQError as exc:   # out of descriptors, say: try again after a pause
                    log.warning("could not open a new socket to worker %s: %s", address, exc)
                    self._refused(address, now)
            # (rings whose peer ended were dropped above)
            wanted = [address for address in handshakes
                      if self.shared_memory and address not in self._rings
                      and address not in self._opening]
        if handshakes:
            self._reach(handshakes, wanted, links)
        if self.on_link is not None:
            for address, down_secs in links:
                self.on_link(address, down_secs)

    def _reach(self, handshakes: list[str], wanted: list[str],
               links: list[tuple[str, float | None]]) -> None:
        """Count the peers whose handshake succeeded as reached, after offering those of
        ``wanted`` on this host a memory ring: their frames go there from now on. Offered
        without the lock, which this worker's receiver may need meanwhile (to tell peers of a
        full inbox) while the peer's answers, and before any direct send to the peer; what its
        socket carried before comes first (``_open_ring``). Adds to ``links`` the peers back
        after a lost link."""
        offered = {address: offer_ring(address, self.topology, self.slot) for address in wanted}
        with self._lock:
            for address in handshakes:
                self._greet(address)
                outbound = offered.get(address)
                if outbound is not None:
                    self._start_ring(address, outbound)
                self._reached.add(address)
                self._retry_pause.pop(address, None)
                since = self._lost.pop(address, None)
                if since is not None:
                    links.append((address, time.time() - since))

    def _settling(self) -> bool:
        """Whether a socket awaits its first handshake, its replacement, or its link's return,
        a peer its greeting, or a ring its opening."""
        return (bool(self._retry_at) or bool(self._lost) or bool(self._opening)
                or bool(self._greeting) or len(self._reached) < len(self._sockets))

    def run(self) -> None:
        try:
            self._serve()
        except Exception:
            # The worker sees this thread gone and ends, to be restarted whole.
            log.exception("the transport's sender failed: this worker sends nothing more")
        finally:
            with self._lock:
                for address in list(self._sockets):
                    self._close(address)

    def _serve(self) -> None:
        get = self.queue.get
        paused = self.paused.paused
        # Data for tasks whose worker asked us to hold it, per task in arrival order: what was
        # queued before the pause arrived waits here instead of swamping that worker.
        held: dict[tuple[str, int], list[tuple]] = {}
        while not self.stopping.is_set():
            self._check_handshakes()
            by_address: dict[str, list[tuple]] = {}
            for key in [key for key in held if not paused(key[1])]:
                by_address.setdefault(key[0], []).extend(held.pop(key))
            try:
                item = get(timeout=0.01 if held else
                           HANDSHAKE_CHECK_SECS if self._settling() else 0.2)
            except queue.Empty:
                item = None
            for _ in range(MAX_MESSAGES_PER_DRAIN):
                if item is None:
                    break
                address, message = item
                if message is _CONNECT:
                    with self._lock:
                        self._socket(address)
                elif message is None:
                    # Nothing more goes to a retired worker.
                    dropped = len(by_address.pop(address, ()))
                    dropped += sum(len(h) for key, h in held.items() if key[0] == address)
                    held = {key: h for key, h in held.items() if key[0] != address}
                    with self._lock:
                        self._close(address)
                        self._done(address, dropped)
                else:
                    kind, dest, _src, _payload = message
                    if kind == DATA and ((address, dest) in held or paused(dest)):
                        held.setdefault((address, dest), []).append(message)
                    else:
                        by_address.setdefault(address, []).append(message)
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    item = None
            for address, messages in by_address.items():
                self._send(address, messages)

    def _send(self, address: str, messages: list[tuple]) -> None:
        """Send ``messages`` to ``address`` in a frame, or drop them (they were tracked at
        their spouts, time out there and are replayed): now if its link is down or its socket
        awaits replacement (what it queued would be lost with it or arrive long after its tuples
        timed out, and once its queue were full each frame would stall every other peer's
        traffic for SEND_TIMEOUT_SECS; the refusal or the lost link was logged), and after
        SEND_TIMEOUT_SECS of a full peer (one dead peer must not stall every other worker)."""
        deadline = time.monotonic() + SEND_TIMEOUT_SECS
        try:
            frame = self._frame(address, messages)
            while frame is not None and not self.stopping.is_set():
                with self._lock:
                    if address in self._retry_at or address in self._lost:
                        self.messages_dropped += len(messages)
                        return
                    if self._push(address, frame, len(messages)):
                        return
                if time.monotonic() > deadline:
                    self.messages_dropped += len(messages)
                    log.warning("peer %s has not accepted data for %.0fs; dropped %d messages "
                                "(their tuples time out and are replayed)", address,
                                SEND_TIMEOUT_SECS, len(messages))
                    return
                time.sleep(0.001)
        finally:
            with self._lock:
                self._done(address, len(messages))

    def retire(self, address: str) -> None:
        """Close the socket to a worker no longer used, discarding what is queued for it."""
        self.queue.put((address, None))  # type: ignore[arg-type]


class TransportRounds:
    """A worker's transport told of its shared threads' rounds (runtime/threads.py's
    ``RoundListener``): what their executors send goes in a frame a peer once it waited
    COALESCE_SECS, checked at each turn and round's end and at the guard's look, or before the
    thread sleeps (``Sender``), and each round's end takes the frames that came meanwhile
    (``Receiver``), so that while the executors are busy, neither transport thread wakes for
    their traffic. The receiver is set once the worker has made it, before any executor runs."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self.receiver: Receiver | None = None
        self._now = 0.0   # when the last turn began (monotonic)
        # Set if moving frames on a round's thread raised: the transport's threads move them
        # all from then on (and a fault that is theirs too ends them, and the worker with them).
        self.given_up = False

    def enter(self) -> None:
        self.sender.enter()   # which refuses once given up (``leave(every_thread=True)``)

    def before_turn(self, now: float) -> None:
        self._now = now
        self._guarded(self.sender.flush_if_due, now)

    def round_ended(self) -> None:
        self._guarded(self._round_ended)

    def idle(self) -> None:
        self._guarded(self._idle)

    def _round_ended(self) -> None:
        self.sender.flush_if_due(self._now)
        if self.receiver is not None:
            self.receiver.take_waiting(self._now)

    def _idle(self) -> None:
        self.sender.flush()
        if self.receiver is not None:
            # What came since the round's take may be work: the thread finds it in its inboxes
            # and does not sleep after all.
            self.receiver.take_waiting(self._now, at_once=True)
            self.receiver.rounds_idle()

    def _guarded(self, work: Callable[..., object], *args: Any) -> None:
        """Run ``work`` unless given up; give up if it raises (never into the executors)."""
        if self.given_up:
            return
        try:
            work(*args)
        except Exception:
            self._give_up()

    def leave(self) -> None:
        self._guarded(self.sender.leave)
        if self.receiver is not None:
            self.receiver.rounds_idle()

    def look(self, now: float) -> None:
        self._guarded(self.sender.flush_if_due, now)
        if self.receiver is not None:
            self.receiver.rounds_look(now)

    def _give_up(self) -> None:
        log.exception("moving frames on the executors' thread failed: the transport's threads "
                      "move them from now on")
        self.given_up = True
        try:
            self.sender.leave(every_thread=True)
        except Exception:   # what the outbox held is lost: tracked, it is replayed
            log.exception("could not send what the executors' rounds held")
        if self.receiver is not None:
            self.receiver.rounds_idle()


class RemoteRoute:
    """Looks like a local inbox to a Transfer; sends to a task in another worker."""

    __slots__ = ("sender", "address", "slot", "host")

    def __init__(self, sender: Sender, address: str, slot: str = ""):
        self.sender = sender
        self.address = address
        self.slot = slot   # the worker's slot, as its frames name it (tenure.slot_key)
        # The worker's host, for load-aware shuffle's scopes (runtime/load_aware.py).
        self.host = address.removeprefix("tcp://").rsplit(":", 1)[0]

    def load(self, task: int) -> float:
        """``task``'s load as seen from here, 0 to 1 (load-aware shuffle's): 1 while its
        worker asks for its data to be held, else how full the send queue is."""
        if self.sender.paused.paused(task):
            return 1.0
        return min(1.0, self.sender.queue.qsize() / SEND_QUEUE_LIMIT)

    def put(self, message: tuple) -> None:
        self.sender.send(self.address, message)

    def accepting(self, task: int) -> bool:
        return not self.sender.paused.paused(task) and self.sender.queue.qsize() < SEND_QUEUE_LIMIT

    def when_room(self, task: int, wake: Callable[[], object]) -> None:
        """Nothing: a pause lifts by a message from the other worker, and a spout holding data
        for it looks again after a short wait."""

    def put_data(self, message: tuple, stopping: threading.Event | None = None,
                 wait: bool = True) -> float:
        """Queue a data batch, packed here on the executor's thread (see wire.py), first
        waiting while its task's worker holds data back or the send queue is full (unless
        ``wait`` is false); returns the seconds waited."""
        kind, dest, src, tuples = message
        if wait and not self.accepting(dest):
            self.sender.flush()   # what the round holds goes before this thread waits
            waited = wait_for_room(self.accepting, dest, stopping)
        else:
            waited = 0.0
        self.sender.send(self.address, (kind, dest, src, encode_data(tuples, self.sender.registry)))
        self.sender.tuples_sent += len(tuples)
        self.sender.batches_sent += 1
        return waited


class Receiver(threading.Thread):
    """Binds the worker's port and delivers incoming messages to local inboxes."""

    def __init__(self, context: zmq.Context, bind: str, decoder: FrameDecoder,
                 deliver: Callable[[tuple], None], stopping: threading.Event,
                 overload: OverloadWatch | None = None, security: Security | None = None,
                 topology: str = "", on_fenced: Callable[[Fenced], object] | None = None,
                 link_times: LinkTimes | None = None, address: str | None = None):
        """``on_fenced`` is called on this thread with the first frame refused from each
        sender that no longer holds its slot (``decoder``'s fence), and again if that sender
        goes quiet for FENCED_QUIET_SECS and starts again. Given the ``address`` peers reach
        this worker at, senders on this host may hand it memory rings (same_host.py)."""
        super().__init__(name="transfer-receiver", daemon=True)
        # Opened before the socket binds, so that a peer that reaches the socket finds it.
        self._door = Door(address, topology) if address else None
        self.socket = context.socket(zmq.PULL)
        self.socket.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        self.socket.setsockopt(zmq.LINGER, 0)
        (link_times or LinkTimes.of()).watch(self.socket)
        # Refused handshakes arrive here (a refused peer's frames never do).
        self._refusals = (security or Security()).transport_server(self.socket, topology)
        self.socket.bind(bind)
        self.decoder = decoder
        self.deliver = deliver
        self.stopping = stopping
        self.overload = overload
        self.on_fenced = on_fenced
        self.frames_undecodable = 0
        self.peers_refused = 0
        self.frames_fenced = 0
        self.frames_from_rings = 0
        self._fenced_last: dict[str, float] = {}   # fenced sender -> its last refused frame
        # The socket, the deliveries and the overload watch: this thread's, and a thread's
        # running executors in rounds at each round's end (``take_waiting``), which takes the
        # frames that came meanwhile itself while it is busy, so that this thread does not
        # wake (and wait for the interpreter lock) for each.
        self._lock = threading.Lock()
        # When a round last asked for the frames, and last took them (monotonic); 0 once its
        # thread sleeps (``rounds_idle``). ``_rounds_sleep`` tells this thread of that, and of
        # rounds that stopped asking (``rounds_look``).
        self._rounds_asked = 0.0
        self._rounds_took = 0.0
        self._rounds_sleep = threading.Event()
        self.taken_by_rounds = 0   # frames the rounds took
        # When a round next looks at the socket (monotonic): now, or after a quiet look while
        # rings bring frames (QUIET_SOCKET_LOOK_SECS).
        self._socket_look_at = 0.0
        self.watching = True   # whether this thread watches the socket now (not left to rounds)
        self._closed = False

    @property
    def frames_rejected(self) -> int:
        """Frames that did not decode or came from a fenced worker, and handshakes refused (a
        peer of another topology, or without the topology's keys, is refused before any frame
        of its arrives)."""
        return self.frames_undecodable + self.peers_refused + self.frames_fenced

    def take_waiting(self, now: float, at_once: bool = False) -> None:
        """At the end of a round of executors (at ``now``, monotonic), on their thread: take
        the frames that came, unless a round took them less than ``ROUNDS_TAKE_SECS`` before
        (and not ``at_once``) or this thread has the socket now. While rounds ask, this thread
        leaves it to them."""
        self._rounds_asked = now
        if ((not at_once and now - self._rounds_took < ROUNDS_TAKE_SECS)
                or not self._lock.acquire(blocking=False)):
            return
        try:
            if not self._closed:
                self._rounds_took = now
                self.taken_by_rounds += self._take_waiting(now >= self._socket_look_at, now)
                if self.overload is not None:
                    # Tell peers of an inbox these frames filled now, not at this thread's
                    # next look.
                    self.overload.check()
        finally:
            self._lock.release()

    def rounds_idle(self) -> None:
        """The thread running executors in rounds goes to sleep: this thread takes the frames."""
        self._rounds_asked = 0.0
        self._rounds_sleep.set()

    def rounds_look(self, now: float) -> None:
        """From the guard's thread, at ``now`` (monotonic): if the rounds last asked for the
        frames ``ROUNDS_HOLD_SECS`` before or longer (their thread is blocked in a turn), this
        thread takes them from now on."""
        if self._rounds_asked and self._rounds_stopped(now):
            self._rounds_sleep.set()

    def _rounds_stopped(self, now: float) -> bool:
        """Whether no round asked for the frames in the ``ROUNDS_HOLD_SECS`` before ``now``
        (their thread sleeps, is blocked in a turn, or never ran rounds)."""
        return now - self._rounds_asked >= ROUNDS_HOLD_SECS

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self._refusals, zmq.POLLIN)
        door_fds = self._watch_door(poller, [])
        overload = self.overload
        while not self.stopping.is_set():
            if overload is not None:
                with self._lock:
                    overload.check()
            overloaded = overload is not None and overload.busy()
            # Look at overloaded inboxes often, so peers resume soon after they drain.
            look_secs = 0.02 if overloaded else 0.2
            self.watching = self._rounds_stopped(time.monotonic())
            if not self.watching:
                # Busy rounds take the frames: wake to look at the inboxes, or when they sleep
                # or stop asking (their thread blocked in a turn).
                self._rounds_sleep.wait(look_secs if overloaded else ROUNDS_LEFT_SECS)
                self._rounds_sleep.clear()
                self._count_refusals()
                door_fds = self._watch_door(poller, door_fds)
                continue
            with self._lock:
                rings = self._door.rings if self._door is not None else []
                # Sleep only if no ring has frames once its writers know to wake us.
                quiet = all([inbound.ring.sleep() for inbound in rings])
                ready = dict(poller.poll(int(look_secs * 1000) if quiet else 0))
                for inbound in rings:
                    inbound.ring.wake()
                if self._refusals in ready:
                    self._count_refusals()
                if self.socket in ready or rings:
                    self._take_waiting(self.socket in ready, time.monotonic())
            if any(fd in ready for fd in door_fds):
                door_fds = self._watch_door(poller, door_fds)
        with self._lock:
            self._closed = True
            if self._door is not None:
                self._door.close()
            self.socket.disable_monitor()
            self._refusals.close(linger=0)
            self.socket.close(linger=0)

    def _take_waiting(self, from_socket: bool, now: float) -> int:
        """Take the frames waiting in the memory rings, and on the socket if ``from_socket``
        (the lock held); how many. ``now`` (monotonic) sets when rounds look at the socket
        next."""
        taken = 0
        rings = self._door.rings if self._door is not None else ()
        if from_socket:
            while taken < MAX_FRAMES_PER_DRAIN and self.socket.get(zmq.EVENTS) & zmq.POLLIN:
                try:
                    frame = self.socket.recv(zmq.NOBLOCK, copy=False)
                except zmq.Again:   # not expected once EVENTS said a frame waits
                    break
                self._take(frame.bytes)
                taken += 1
            self._socket_look_at = now + QUIET_SOCKET_LOOK_SECS if rings and not taken else 0.0
        for inbound in rings:
            taken += self._take_ring(inbound, MAX_FRAMES_PER_DRAIN)
            if inbound.ring.waits_for_parked:
                self._socket_look_at = 0.0
        return taken

    def _take_ring(self, inbound: InboundRing, limit: int) -> int:
        """Take up to ``limit`` frames from a memory ring (the lock held); how many."""
        taken = inbound.ring.take(self._take, limit, inbound.unpark)
        self.frames_from_rings += taken
        return taken

    def _watch_door(self, poller: zmq.Poller, watched: list[int]) -> list[int]:
        """Admit the memory rings offered since the last look, read the doorbells, and close
        the rings whose senders ended once drained; the door's descriptors to poll now (this
        thread's; it changes the rings under the lock)."""
        door = self._door
        if door is None:
            return []
        admitted, ended = door.admit(), door.hear()
        if admitted or ended:
            with self._lock:
                for inbound in ended:
                    self._take_ring(inbound, 1 << 30)   # what its sender left, then gone
                    door.rings.remove(inbound)
                    inbound.close()
                for inbound in admitted:
                    door.let_in(inbound)
                    log.info("frames from worker %s, on this host, come through shared memory",
                             inbound.slot)
        fds = door.fds()
        if fds != watched:
            for fd in watched:
                poller.unregister(fd)
            for fd in fds:
                poller.register(fd, zmq.POLLIN)
        return fds

    def _take(self, frame: bytes) -> None:
        """Decode ``frame`` and deliver its messages, or count and report why it is refused."""
        if frame[:1] == PARKED_FRAME:
            self._park(frame)
            return
        try:
            messages = self.decoder.decode(frame)
        except Fenced as exc:
            self._fenced(exc)
            return
        except WireError as exc:
            self.frames_undecodable += 1
            log.warning("rejected a frame of %d bytes: %s", len(frame), exc)
            return
        for message in messages:
            self.deliver(message)

    def _park(self, frame: bytes) -> None:
        """Keep a frame too large for its sender's memory ring until the ring reaches its place."""
        # An empty one holds a new ring's first place (``Sender._open_ring``).
        if len(frame) >= len(PARKED_FRAME) + _PARKED_HEAD.size and self._door is not None:
            key, token = _PARKED_HEAD.unpack_from(frame, len(PARKED_FRAME))
            for inbound in self._door.rings:
                if inbound.key == key:
                    inbound.parked[token] = frame[len(PARKED_FRAME) + _PARKED_HEAD.size:]
                    return
        self.frames_undecodable += 1
        log.warning("rejected a frame of %d bytes: too large for a memory ring this worker does "
                    "not have", len(frame))

    def _fenced(self, exc: Fenced) -> None:
        """Count a fenced sender's frame; tell ``on_fenced`` of the first in a while from it."""
        self.frames_fenced += 1
        now = time.monotonic()
        last = self._fenced_last.get(exc.sender)
        self._fenced_last[exc.sender] = now
        if last is None or now - last > FENCED_QUIET_SECS:
            if len(self._fenced_last) > MAX_FENCED_SENDERS:
                self._fenced_last = {exc.sender: now}
            if self.on_fenced is not None:
                self.on_fenced(exc)
            else:
                log.warning("%s", exc)

    def _count_refusals(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self._refusals, zmq.NOBLOCK)
            except zmq.Again:
                return
            self.peers_refused += 1
            if self.peers_refused == 1 or self.peers_refused % 1000 == 0:
                log.warning("refused a peer of another topology or without its keys on %s "
                            "(%d so far)",
                            event.get("endpoint", b"?").decode(errors="replace"),
                            self.peers_refused)


def make_deliver(routes: list[Any], paused: PausedTasks | None = None,
                 overload: OverloadWatch | None = None) -> Callable[[tuple], None]:
    """Deliver to the local inbox of the message's destination task. A message for a task that is
    not here (it moved) is dropped: tracked tuples in it time out and are replayed. A peer's
    backpressure state goes to ``paused``; data deliveries are reported to ``overload``."""
    repeats = Repeats(log)   # the receiver's thread alone calls deliver

    def deliver(message: tuple) -> None:
        kind, dest, _src, payload = message
        if kind == BACKPRESSURE:
            if paused is not None:
                paused.apply(payload)
            return
        inbox = routes[dest] if 0 <= dest < len(routes) else None
        if inbox is None or isinstance(inbox, RemoteRoute):
            # Usual for a moment while tasks move between workers: one line a while, not one
            # per message.
            repeats.warning("elsewhere", "dropped messages for tasks not in this worker: they "
                            "moved, or are moving here; their tuples time out at their spouts "
                            "and are replayed")
            return
        # Never block the receiver: it also carries acks, and blocking it on one full inbox
        # could stall trees in every other executor. Peers hold back instead, when told.
        inbox.put(message)
        if kind == DATA and overload is not None:
            overload.delivered(inbox)

    return deliver
