"""Workers of one host agreeing on memory rings (same_host.py), and the transport sending
through them: order (frames too large for the ring too), a peer's restart, the setting that
turns it off, another topology refused, and a host of its own network never finding the door."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import zmq
from multi_host import Network, multi_host_available, unavailable_reason
from support import wait_until
from test_transport import (
    TOPOLOGY,
    Endpoint,
    batch,
    context,
    layout,
    numbers,
    reached,
    rounds_of,
    tasks,
)
from zookeeper_server import free_port

from stormlet.cluster import same_host, transport
from stormlet.cluster.memory_ring import supported
from stormlet.cluster.same_host import Door, offer_ring
from stormlet.cluster.transport import Receiver
from stormlet.runtime.inbox import Inbox
from stormlet.runtime.protocol import DATA

pytestmark = pytest.mark.skipif(not supported(), reason="memory rings need Linux on x86-64")

__all__ = ["context", "layout"]   # fixtures, used by name


def two_workers(layout, context, a_shares: bool = True, b_shares: bool = True,
                port: int | None = None):
    """Worker ``a`` and worker ``b`` (holding the sink task's inbox), ``a`` reaching ``b``."""
    _, sink = tasks(layout)
    inbox = Inbox(capacity=100000)
    routes: list = [None] * (layout.max_task + 1)
    routes[sink] = inbox
    b = Endpoint(layout, routes, context, [], shared_memory=b_shares, port=port)
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [], shared_memory=a_shares)
    reached(a, b)
    return a, b, inbox


def send(a, b, layout, first: int, size: int = 10) -> None:
    src, sink = tasks(layout)
    a.sender.route(b.address).put_data((DATA, sink, src, batch(layout, first, size)))


def test_frames_to_a_worker_of_this_host_go_through_its_ring_in_order_large_ones_too(
        layout, context, monkeypatch):
    # A 64 KB ring takes frames of up to 16 KB: a batch of 30,000 numbers (~150 KB, more than
    # the whole ring) goes over ZeroMQ, the ring keeping its place.
    monkeypatch.setattr(same_host, "RING_BYTES", 64 * 1024)
    a, b, inbox = two_workers(layout, context)
    try:
        frames = a.sender.frames_sent
        send(a, b, layout, 0)
        send(a, b, layout, 10, 30000)
        for first in range(30010, 32010, 10):
            send(a, b, layout, first)
        assert numbers(inbox, 32010) == list(range(32010))
        sent = a.sender.frames_sent - frames
        assert sent == 202 and a.sender.frames_in_rings == sent
        assert b.receiver.frames_from_rings == sent
    finally:
        a.stop()
        b.stop()


def test_with_shared_memory_off_at_either_end_frames_go_over_tcp(layout, context):
    for a_shares, b_shares in ((False, True), (True, False)):
        a, b, inbox = two_workers(layout, context, a_shares, b_shares)
        try:
            send(a, b, layout, 0)
            assert numbers(inbox, 10) == list(range(10))
            assert a.sender.frames_sent >= 1
            assert a.sender.frames_in_rings == 0 and b.receiver.frames_from_rings == 0
        finally:
            a.stop()
            b.stop()


def test_a_restarted_peer_gets_a_new_ring_and_what_follows_goes_through_it(layout, context):
    a, b, inbox = two_workers(layout, context)
    try:
        send(a, b, layout, 0)
        assert numbers(inbox, 10) == list(range(10))
        b.stop()
        wait_until(lambda: b.address in a.sender.unreachable(), 15, "the lost link")
        _, sink = tasks(layout)
        inbox2 = Inbox(capacity=1000)
        routes: list = [None] * (layout.max_task + 1)
        routes[sink] = inbox2
        b2 = Endpoint(layout, routes, context, [], shared_memory=True, port=b.port)
        try:
            wait_until(lambda: b.address not in a.sender.unreachable(), 15, "the link's return")
            send(a, b2, layout, 100)
            assert numbers(inbox2, 10) == list(range(100, 110))
            assert b2.receiver.frames_from_rings == 1
        finally:
            b2.stop()
    finally:
        a.stop()


def admitting(door: Door, stop: threading.Event) -> threading.Thread:
    """A thread doing a receiver's part for ``door``: admit what is offered and let it in."""
    def serve() -> None:
        while not stop.is_set():
            for inbound in door.admit():
                door.let_in(inbound)
            time.sleep(0.01)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_ring_is_refused_for_another_topology_and_taken_for_its_own(caplog):
    address = f"tcp://127.0.0.1:{free_port()}"
    door = Door(address, TOPOLOGY)
    stop = threading.Event()
    thread = admitting(door, stop)
    try:
        assert offer_ring(address, "another-topology", "s") is None
        assert "for topology 'another-topology'" in caplog.text
        outbound = offer_ring(address, TOPOLOGY, "s")
        assert outbound is not None
        wait_until(lambda: len(door.rings) == 1, 5, "the admitted ring")
        outbound.ring.put(b"frame")
        taken: list[bytes] = []
        door.rings[0].ring.take(taken.append, 10, door.rings[0].unpark)
        assert taken == [b"frame"]
        assert door.hear() == []
        outbound.close()
        assert door.hear() == door.rings, "its sender ended"
    finally:
        stop.set()
        thread.join(5)
        door.close()


DOOR_SCRIPT = """
import sys, time
from stormlet.cluster.same_host import Door
door = Door(sys.argv[1], "t-1")
print("open" if door.opened else "shut", flush=True)
while True:
    for inbound in door.admit():
        door.let_in(inbound)
    time.sleep(0.01)
"""


def offered_to_a_door(address: str, prefix: tuple[str, ...] = ()) -> bool:
    """Whether a ring offered from here is taken by a door opened by a process run with
    ``prefix`` (on another host: ``ip netns exec``)."""
    door = subprocess.Popen([*prefix, sys.executable, "-c", DOOR_SCRIPT, address],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert door.stdout is not None and door.stdout.readline().strip() == "open"
        outbound = offer_ring(address, "t-1", "s")
        if outbound is not None:
            outbound.close()
        return outbound is not None
    finally:
        door.kill()
        door.wait(10)


@pytest.mark.skipif(not multi_host_available(),
                    reason=f"no hosts can be made here: {unavailable_reason()}")
def test_a_worker_on_another_host_made_on_this_machine_never_finds_the_door():
    # The multi-host tests' hosts are network namespaces of one machine: a ring between two of
    # them would carry frames past the network faults those tests inject.
    address = f"tcp://10.0.0.1:{free_port()}"
    assert offered_to_a_door(address), "a door on this host is found"
    with Network() as net:
        host = net.add_host("door")
        assert not offered_to_a_door(address, host.prefix)


@pytest.mark.skipif(os.getuid() != 0, reason="opens a door as another user: needs root")
def test_a_door_of_another_user_never_gets_a_ring(caplog):
    # Abstract socket names have no permissions: another user could take a restarting worker's
    # name, and must not get its frames.
    address = f"tcp://127.0.0.1:{free_port()}"
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child == 0:   # a process of user nobody listening on the worker's door name
        try:
            os.setgid(65534)
            os.setuid(65534)
            door = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            door.bind(same_host.door_name(address))
            door.listen(8)
            os.write(ready_write, b"!")
            while True:
                conn, _ = door.accept()
                conn.sendall(same_host.ACCEPTED)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_read, 1) == b"!"
        assert offer_ring(address, TOPOLOGY, "s") is None
        assert "belongs to user 65534" in caplog.text
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready_read)
        os.close(ready_write)


def test_an_offer_that_fails_on_this_side_leaves_the_peer_to_tcp(monkeypatch, caplog):
    address = f"tcp://127.0.0.1:{free_port()}"
    door = Door(address, TOPOLOGY)
    stop = threading.Event()
    thread = admitting(door, stop)

    def no_memory(_capacity):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(same_host.MemoryRing, "create", no_memory)
    try:
        assert offer_ring(address, TOPOLOGY, "s") is None   # and nothing raised
        assert "Cannot allocate memory" in caplog.text
    finally:
        stop.set()
        thread.join(5)
        door.close()


def test_a_ring_gives_up_the_place_of_a_large_frame_that_never_comes(monkeypatch, caplog):
    monkeypatch.setattr(same_host, "PARKED_WAIT_SECS", 0.2)
    address = f"tcp://127.0.0.1:{free_port()}"
    door = Door(address, TOPOLOGY)
    stop = threading.Event()
    thread = admitting(door, stop)
    try:
        outbound = offer_ring(address, TOPOLOGY, "s")
        assert outbound is not None
        wait_until(lambda: len(door.rings) == 1, 5, "the admitted ring")
        inbound = door.rings[0]
        outbound.ring.put_parked(1)   # its frame lost with the link
        outbound.ring.put(b"after")
        taken: list[bytes] = []
        assert inbound.ring.take(taken.append, 10, inbound.unpark) == 0
        time.sleep(0.3)
        inbound.ring.take(taken.append, 10, inbound.unpark)
        assert taken == [b"after"]
        assert "travels over the socket, its place kept in the memory ring, did not come" \
            in caplog.text
        outbound.close()
    finally:
        stop.set()
        thread.join(5)
        door.close()


def test_frames_sent_before_the_first_handshake_are_taken_before_the_rings_first(
        layout, context, monkeypatch):
    # Frames sent to a peer that does not listen yet wait in the socket, and cross TCP once
    # the handshake succeeds; the ring set up at that handshake carries what follows. Here the
    # peer takes nothing from its socket until told to, as if TCP were slow: the ring's frames
    # must wait for the socket's, not overtake them.
    tcp_arrived = threading.Event()
    take_waiting = Receiver._take_waiting

    def rings_only_until_tcp_arrived(receiver, *args):
        if tcp_arrived.is_set():
            return take_waiting(receiver, *args)
        return sum(receiver._take_ring(inbound, 1000) for inbound in receiver._door.rings)

    monkeypatch.setattr(Receiver, "_take_waiting", rings_only_until_tcp_arrived)
    _, sink = tasks(layout)
    port = free_port()
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [], shared_memory=True)
    b = None
    try:
        send(a, SimpleNamespace(address=f"tcp://127.0.0.1:{port}"), layout, 0)
        wait_until(lambda: a.sender.frames_sent == 1, 10, "the frame handed to the socket")
        inbox = Inbox(capacity=1000)
        routes: list = [None] * (layout.max_task + 1)
        routes[sink] = inbox
        b = Endpoint(layout, routes, context, [], shared_memory=True, port=port)
        wait_until(lambda: b.address in a.sender.reached(), 10, "the handshake")
        send(a, b, layout, 10)
        wait_until(lambda: a.sender.frames_in_rings == 1, 10, "the frame put in the ring")
        time.sleep(0.3)   # time enough for b to take what the ring holds
        assert inbox.empty(), "the ring's frame must wait for the frame that went over TCP"
        tcp_arrived.set()
        assert numbers(inbox, 20) == list(range(20))
        assert b.receiver.frames_from_rings == 1
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_a_ring_whose_opening_frame_the_socket_cannot_take_yet_opens_at_a_later_look(
        layout, context, monkeypatch):
    # The socket full at the handshake (a backlog from before it): the ring's opening frame
    # waits, the frames go over TCP meanwhile, and the ring is used once it could open.
    park = transport.Sender._park
    full: list[str] = []

    def full_once(sender, address, outbound, frame):
        if not full:
            full.append(address)
            raise zmq.Again()
        return park(sender, address, outbound, frame)

    monkeypatch.setattr(transport.Sender, "_park", full_once)
    a, b, inbox = two_workers(layout, context)
    try:
        assert full == [b.address]
        time.sleep(0.3)   # a look or more of the sender's
        send(a, b, layout, 0)
        assert numbers(inbox, 10) == list(range(10))
        assert a.sender.frames_in_rings == 1 and b.receiver.frames_from_rings == 1
    finally:
        a.stop()
        b.stop()


def drained(inbox) -> list[int]:
    """The numbers of every batch in ``inbox`` now."""
    got: list[int] = []
    while not inbox.empty():
        got += [t.values[0] for t in inbox.get_nowait()[3].tuples()]
    return got


def test_busy_rounds_look_at_a_quiet_socket_seldom_while_rings_bring_frames(
        layout, context, monkeypatch):
    # Each look at an empty socket costs a busy executors' thread ~6 µs (two system calls and
    # an exception), most of a round's transport work where every peer is on this host. Here
    # worker a reaches b through a ring and c (shared memory off: another host's worker, as it
    # were) over the socket, while b's rounds run busy on this thread.
    monkeypatch.setattr(transport, "ROUNDS_HOLD_SECS", 5.0)   # a late wake-up stays busy
    monkeypatch.setattr(transport, "QUIET_SOCKET_LOOK_SECS", 2.0)
    monkeypatch.setattr(same_host, "RING_BYTES", 64 * 1024)   # so a batch of 30,000 parks
    a, b, inbox = two_workers(layout, context)
    c = Endpoint(layout, [None] * (layout.max_task + 1), context, [], shared_memory=False)
    rounds = rounds_of(b)
    rounds.enter()

    def busy_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rounds.before_turn(time.monotonic())
            rounds.round_ended()
            time.sleep(0.001)

    try:
        reached(c, b)
        send(a, b, layout, 50)

        def ring_in_use() -> bool:
            busy_for(0.01)
            return b.receiver.frames_from_rings == 1

        wait_until(ring_in_use, 10, "a frame through a's ring")
        busy_for(0.3)   # the greetings are taken, and then the socket looked at, quiet
        assert drained(inbox) == list(range(50, 60))
        assert not b.receiver.watching, "the rounds have the socket"
        send(c, b, layout, 100)
        send(a, b, layout, 0)
        busy_for(0.3)
        assert sorted(drained(inbox)) == list(range(10)), \
            "the ring's frame came, and the quiet socket was not looked at again yet"
        send(a, b, layout, 1000, 30000)   # over the socket, its place kept in the ring
        busy_for(0.3)
        assert sorted(drained(inbox)) == [*range(100, 110), *range(1000, 31000)], \
            "a ring waiting for a parked frame has the next round look at the socket"
        send(c, b, layout, 200)
        busy_for(0.3)
        assert drained(inbox) == []
        rounds.before_turn(time.monotonic() + 2.0)   # the next look is due
        rounds.round_ended()
        assert drained(inbox) == list(range(200, 210))
    finally:
        rounds.leave()
        for endpoint in (a, b, c):
            endpoint.stop()
