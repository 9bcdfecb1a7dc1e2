"""The memory ring between two workers of one host: order, room, parked frames, sleep and wake,
and another process on the other side."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time

import pytest

from stormlet.cluster.memory_ring import MemoryRing, supported

pytestmark = pytest.mark.skipif(not supported(), reason="memory rings need Linux on x86-64")


@pytest.fixture
def ring():
    ring, fd = MemoryRing.create(4096)
    os.close(fd)
    yield ring
    ring.close()


def frame(n: int) -> bytes:
    """Frame ``n``: its number, then bytes of varying length (0 to 700)."""
    return n.to_bytes(4, "little") + bytes([n % 251]) * (n * 37 % 701)


def take_all(ring: MemoryRing, parked=lambda _token: None) -> list[bytes]:
    taken: list[bytes] = []
    ring.take(taken.append, 1 << 20, parked)
    return taken


def test_frames_come_out_in_order_through_many_wraps_and_a_full_ring_refuses_until_read(ring):
    sent = taken = 0
    refused = 0
    while taken < 3000:
        while sent < 3000 and ring.put(frame(sent)):
            sent += 1
        if sent < 3000:
            refused += 1
        for got in take_all(ring):
            assert got == frame(taken)
            taken += 1
    assert refused > 100, "a 4 KB ring holds a few frames at a time"
    assert not ring.has_frames()


def test_a_parked_frame_is_delivered_at_its_place_and_the_ring_waits_there_until_it_comes(ring):
    parked: dict[int, bytes] = {}

    def unpark(token: int) -> bytes | None:
        return parked.pop(token, None)

    assert ring.put(b"first")
    assert ring.room_for_parked() and ring.put_parked(7)
    assert ring.put(b"third")
    assert take_all(ring, unpark) == [b"first"]   # the parked frame has not come: wait
    assert take_all(ring, unpark) == []
    parked[7] = b"second, too large for the ring"
    assert take_all(ring, unpark) == [b"second, too large for the ring", b"third"]


def test_a_reader_about_to_sleep_is_woken_and_does_not_sleep_on_a_frame(ring):
    assert ring.reader_sleeping(), "until the reader first looks, writers ring"
    ring.wake()
    assert not ring.reader_sleeping()
    assert ring.sleep() is True and ring.reader_sleeping()
    ring.put(b"x")
    assert ring.sleep() is False, "a frame came: the reader must not wait"
    ring.wake()
    assert take_all(ring) == [b"x"]


def test_a_frame_larger_than_a_quarter_of_the_ring_is_for_parking(ring):
    assert ring.largest == 1024


# The writer: a process of its own (not a fork of pytest's, whose threads a fork would copy
# half-way), given the ring's memory as a worker is, by its descriptor.
_WRITER = """
import sys
from stormlet.cluster.memory_ring import MemoryRing
fd, count = int(sys.argv[1]), int(sys.argv[2])
ring = MemoryRing(fd, MemoryRing.size_of(fd))
""" + inspect.getsource(frame) + """
n = 0
while n < count:
    if ring.put(frame(n)):
        n += 1
"""


def test_another_process_writes_and_this_one_reads_every_frame_in_order():
    ring, fd = MemoryRing.create(64 * 1024)
    count = 20000
    try:
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(fd), str(count)],
                                  pass_fds=(fd,))
    finally:
        os.close(fd)
    try:
        taken: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(taken) < count and time.monotonic() < deadline:
            ring.take(taken.append, 1000, lambda _t: None)
        assert taken == [frame(n) for n in range(count)]
        assert writer.wait(timeout=30) == 0
    finally:
        writer.kill()
        writer.wait()
        ring.close()


def test_a_frame_whose_delivery_raises_counts_as_taken_and_the_next_take_goes_on(ring):
    for n in range(3):
        ring.put(frame(n))
    delivered: list[bytes] = []

    def deliver(got: bytes) -> None:
        if got == frame(1):
            raise RuntimeError("a broken delivery")
        delivered.append(got)

    with pytest.raises(RuntimeError):
        ring.take(deliver, 10, lambda _token: None)
    ring.take(deliver, 10, lambda _token: None)
    assert delivered == [frame(0), frame(2)], "neither delivered twice nor stuck"


def test_a_reader_stopped_at_a_parked_frame_may_sleep_and_goes_on_once_its_place_is_given_up(
        ring):
    ring.put(b"first")
    ring.put_parked(3)
    ring.put(b"after")
    assert take_all(ring) == [b"first"]
    assert ring.sleep() is True, "nothing it can take: the parked frame's arrival wakes it"
    ring.wake()
    assert take_all(ring, lambda _token: b"") == [b"after"], "its place given up"
