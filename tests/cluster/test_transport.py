"""Worker-to-worker transport over real ZeroMQ sockets on loopback: backpressure between workers,
and hostile frames refused while the receiver keeps serving."""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from array import array
from contextlib import contextmanager

import msgpack
import pytest
import zmq
from support import wait_until
from zookeeper_server import free_port

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.cluster import backpressure, transport
from stormlet.cluster.backpressure import OverloadWatch, PausedTasks
from stormlet.cluster.security import Security, release
from stormlet.cluster.tenure import Fence, next_assignment
from stormlet.cluster.transport import LinkTimes, Receiver, Sender, make_deliver
from stormlet.cluster.wire import WIRE_VERSION, FrameDecoder, encode_frame
from stormlet.cluster.worker import Worker
from stormlet.cluster.zk_state import Executor
from stormlet.runtime.inbox import Inbox
from stormlet.runtime.metrics import TaskMetrics
from stormlet.runtime.numbering import TopologyLayout
from stormlet.runtime.protocol import ACK_ACK, ACK_RESET, BACKPRESSURE, DATA, SYSTEM_TASK, Message
from stormlet.runtime.transfer import Transfer
from stormlet.tuples import StreamInfo, Tuple

TOPOLOGY = "t-1"


class Numbers(Spout):
    outputs = {"default": ["n"]}


class Sink(Bolt):
    def execute(self, tup):
        pass


@pytest.fixture(scope="module")
def layout():
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("sink", Sink()).shuffle_grouping("numbers")
    return TopologyLayout("t", b.build(), 1)


def tasks(layout):
    return layout.component_tasks["numbers"][0], layout.component_tasks["sink"][0]


def batch(layout, first: int, size: int = 10) -> list[Tuple]:
    src, _ = tasks(layout)
    info = StreamInfo("numbers", "default", ["n"])
    return [Tuple([n], info, src, None) for n in range(first, first + size)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ----- the two halves, alone

def test_a_pause_holds_until_resumed_or_until_its_owner_goes_quiet():
    clock = FakeClock()
    paused = PausedTasks(clock)
    paused.apply([7, 1, 8, 1])
    assert paused.paused(7) and paused.paused(8) and not paused.paused(9)
    paused.apply([7, 0])
    assert not paused.paused(7) and paused.paused(8)
    clock.now += backpressure.PAUSE_TTL_SECS - 0.1
    paused.apply([8, 1])   # a refresh keeps it
    clock.now += backpressure.PAUSE_TTL_SECS - 0.1
    assert paused.tasks() == [8]
    clock.now += 0.2       # its worker said nothing more: the pause lifts by itself
    assert not paused.paused(8) and paused.tasks() == []


def test_a_flapping_inbox_does_not_keep_another_inbox_s_pause_from_being_repeated():
    clock = FakeClock()
    steady, flapping = Inbox(capacity=2), Inbox(capacity=2)
    routes = [None, steady, flapping]
    sent = []
    watch = OverloadWatch(routes, lambda: ["tcp://a"], lambda _a, m: sent.append(m[3]), clock,
                          at_least=0)
    for inbox in (steady, steady):
        inbox.put((DATA, 1, 0, []))
        watch.delivered(inbox)
    watch.check()
    paused = PausedTasks(clock)
    for _ in range(10):   # task 2's inbox fills and drains every half second, for 5 s
        clock.now += 0.5
        for message in sent:
            paused.apply(message)
        sent.clear()
        if flapping.qsize():
            flapping.get()
            flapping.get()
        else:
            flapping.put((DATA, 2, 0, []))
            flapping.put((DATA, 2, 0, []))
            watch.delivered(flapping)
        watch.check()
        assert paused.paused(1), "task 1's inbox is still full: its pause must hold"


def deliver(watch: OverloadWatch, inbox: Inbox, task: int, batches: int) -> None:
    """``batches`` empty data batches for ``task`` delivered to ``inbox`` from another worker,
    then the receiver's look at what to tell its peers."""
    for _ in range(batches):
        inbox.put(Message(DATA, task, 0, []))
        watch.delivered(inbox)
    watch.check()


def test_an_inbox_at_capacity_pauses_its_tasks_at_every_peer_until_it_drains_to_half():
    clock = FakeClock()
    inbox, other = Inbox(capacity=4), Inbox(capacity=4)
    routes = [None, inbox, inbox, other]   # tasks 1 and 2 share one executor's inbox
    sent = []
    watch = OverloadWatch(routes, lambda: ["tcp://a", "tcp://b"],
                          lambda address, message: sent.append((address, message)), clock,
                          at_least=0)
    deliver(watch, inbox, 1, 3)
    assert sent == [] and not watch.busy()
    deliver(watch, inbox, 1, 1)
    pause = (BACKPRESSURE, SYSTEM_TASK, SYSTEM_TASK, [1, 1, 2, 1])
    assert sent == [("tcp://a", pause), ("tcp://b", pause)]
    sent.clear()
    inbox.get()   # 3 left: above half
    watch.check()
    assert sent == []
    clock.now += backpressure.REFRESH_SECS
    watch.check()   # still behind: the state is repeated, so a peer that missed it learns
    assert [m for _, m in sent] == [pause, pause]
    sent.clear()
    inbox.get()   # 2 left: half
    watch.check()
    assert [m for _, m in sent] == [(BACKPRESSURE, SYSTEM_TASK, SYSTEM_TASK, [1, 0, 2, 0])] * 2
    assert not watch.busy() and watch.pauses == 1


def test_data_from_other_workers_overloads_a_small_inbox_only_at_the_remote_mark():
    inbox = Inbox(capacity=2)
    sent = []
    watch = OverloadWatch([None, inbox], lambda: ["tcp://a"], lambda _a, m: sent.append(m[3]),
                          FakeClock(), at_least=6)
    deliver(watch, inbox, 1, 5)   # full for a local sender, not yet for a peer's data
    assert sent == [] and not watch.busy()
    deliver(watch, inbox, 1, 1)
    assert sent == [[1, 1]]
    for _ in range(3):   # drained to half of 6, not of 2: resumed
        inbox.get()
    watch.check()
    assert sent[-1] == [1, 0] and not watch.busy()


# ----- two workers' transports on loopback

class Endpoint:
    """One worker's transport: a sender, and a receiver delivering to ``routes``."""

    def __init__(self, layout, routes: list, context: zmq.Context, peers: list[str],
                 security: Security | None = None, topology: str = TOPOLOGY,
                 port: int | None = None, slot: str = "", tenure: int = 0,
                 fence: Fence | None = None, on_fenced=None, shared_memory: bool = False):
        self.port = port or free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.stopping = threading.Event()
        self.sender = Sender(context, self.stopping, topology, security, slot=slot, tenure=tenure,
                             shared_memory=shared_memory)
        self.watch = OverloadWatch(routes, lambda: peers, self.sender.send, at_least=0)
        self.receiver = Receiver(context, f"tcp://127.0.0.1:{self.port}",
                                 FrameDecoder(layout, topology, fence),
                                 make_deliver(routes, self.sender.paused, self.watch),
                                 self.stopping, self.watch, security, topology,
                                 on_fenced=on_fenced,
                                 address=self.address if shared_memory else None)
        self.sender.start()
        self.receiver.start()

    def stop(self) -> None:
        self.stopping.set()
        self.sender.join(5)
        self.receiver.join(5)


@pytest.fixture
def context():
    ctx = zmq.Context()
    yield ctx
    release(ctx)   # the ZAP handler every receiver starts
    ctx.term()


def run_slow_consumer(layout, context, with_backpressure: bool, batches: int = 300):
    """A producer in worker A sends ``batches`` data batches, one every half millisecond (ten
    times faster than it is consumed), to a task in worker B whose executor takes 5 ms a batch.
    Returns B's largest inbox depth, the producer's seconds spent waiting, and every number B
    received."""
    _, sink = tasks(layout)
    inbox = Inbox(capacity=8)
    b_routes: list = [None] * (layout.max_task + 1)
    b_routes[sink] = inbox
    a_peers: list[str] = []
    b_peers: list[str] = []
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, a_peers)
    b = Endpoint(layout, b_routes, context, b_peers)
    if not with_backpressure:
        b.watch.peers = lambda: []
    b_peers.append(a.address)
    a_peers.append(b.address)
    route = a.sender.route(b.address)
    received: list[int] = []
    deepest = 0
    done = threading.Event()

    def consume() -> None:
        nonlocal deepest
        while len(received) < batches * 10:
            deepest = max(deepest, inbox.qsize())
            try:
                message = inbox.get(timeout=10)
            except Exception:
                break
            received.extend(t.values[0] for t in message[3].tuples())
            time.sleep(0.005)
        done.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    waited = 0.0
    try:
        for i in range(batches):
            waited += route.put_data((DATA, sink, tasks(layout)[0], batch(layout, i * 10)))
            time.sleep(0.0005)
        assert done.wait(30), f"only {len(received)} of {batches * 10} tuples arrived"
    finally:
        a.stop()
        b.stop()
    return deepest, waited, received


def test_a_slow_executor_in_another_worker_slows_the_sender_and_its_inbox_stays_bounded(
        layout, context):
    deepest, waited, received = run_slow_consumer(layout, context, with_backpressure=True)
    assert sorted(received) == list(range(3000)), "every tuple arrives exactly once"
    # Capacity 8, plus what was in flight while the pause travelled.
    assert deepest <= 8 + 20, deepest
    assert waited > 0.5   # the sender waited for most of the 1.5 s the consumer needed


def test_without_the_pause_the_receiving_inbox_grows_with_the_backlog(layout, context):
    # The contrast that shows the test above can fail: the receiver itself never blocks.
    deepest, waited, received = run_slow_consumer(layout, context, with_backpressure=False)
    assert sorted(received) == list(range(3000))
    assert deepest > 100 and waited < 0.5


def test_a_peer_counts_as_reached_once_it_listens_and_stays_so_until_retired(layout, context):
    # A worker's spouts wait for this (worker.py): a peer that is not listening yet is not
    # reached, however long the sender has been connecting to it.
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [])
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    try:
        a.sender.connect_to({address})
        time.sleep(0.5)
        assert a.sender.reached() == set()
        listener = context.socket(zmq.PULL)
        refusals = Security().transport_server(listener, TOPOLOGY)
        try:
            listener.bind(address)
            wait_until(lambda: a.sender.reached() == {address}, 10, "the handshake")
        finally:
            listener.disable_monitor()
            refusals.close(linger=0)
            listener.close(linger=0)
        time.sleep(0.3)
        assert a.sender.reached() == {address}, "reached once is enough: a peer may restart"
        a.sender.retire(address)
        wait_until(lambda: a.sender.reached() == set(), 10, "the retired peer to be forgotten")
    finally:
        a.stop()


@pytest.mark.parametrize("shared_memory", [False, True], ids=["socket", "ring"])
def test_a_sender_greets_each_peer_at_each_handshake_so_the_peer_knows_it_is_reached(
        layout, context, shared_memory):
    # A worker's spouts also wait until every peer has reached it (worker.py): until then the
    # peer's acks and requests to hold data could not come back. The greeting tells it so
    # before any data flows, and again to a peer that restarted on the same port.
    inbox = Inbox(capacity=100)
    routes: list = [None] * (layout.max_task + 1)
    routes[tasks(layout)[1]] = inbox
    # Its own context, ended before the peer restarts on its port: ZeroMQ lets go of a
    # listening port only then.
    b_context = zmq.Context()
    b = Endpoint(layout, routes, b_context, [], shared_memory=shared_memory)
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [], slot="s1:1", tenure=1,
                 shared_memory=shared_memory)
    restarted = None
    try:
        time.sleep(0.2)
        assert b.receiver.decoder.heard_from() == set(), "nothing reached it yet"
        a.sender.connect_to({b.address})
        wait_until(lambda: b.receiver.decoder.heard_from() == {"s1:1"}, 10, "the greeting")
        assert inbox.qsize() == 0 and b.receiver.frames_rejected == 0
        b.stop()
        release(b_context)
        b_context.term()
        restarted = Endpoint(layout, routes, context, [], port=b.port,
                             shared_memory=shared_memory)
        wait_until(lambda: restarted.receiver.decoder.heard_from() == {"s1:1"}, 10,
                   "the greeting of the peer that restarted")
    finally:
        for endpoint in (a, b, restarted):
            if endpoint is not None:
                endpoint.stop()
        if not b_context.closed:
            release(b_context)
            b_context.term()


class Activations:
    """A worker's runtime as its wait for its peers sees it: routes, and whether its spouts
    were activated."""

    def __init__(self, routes: list):
        self.routes = routes
        self.active = threading.Event()

    def activate(self) -> None:
        self.active.set()

    def deactivate(self) -> None:
        self.active.clear()


def test_a_workers_spouts_wait_until_every_peer_has_also_reached_it(layout, context):
    # The flaky slow-bolt test's cause: the bolt's worker started 0.8 s after the spout's
    # worker had reached it, and until it reached the spout's worker in turn, its requests to
    # hold data waited in its socket while the spout emitted 300,000 tuples.
    src, sink = tasks(layout)
    b = Endpoint(layout, [None] * (layout.max_task + 1), context, [], slot="s2:1")
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [], slot="s1:1")
    routes: list = [None] * (layout.max_task + 1)
    routes[sink] = a.sender.route(b.address, "s2:1")
    runtime = Activations(routes)
    worker = Worker.__new__(Worker)   # the wait alone, over a real transport
    worker.runtime, worker.sender, worker.receiver = runtime, a.sender, a.receiver
    worker.done, worker._activation = threading.Event(), threading.Lock()
    worker.status, worker._peers_reached, worker._fenced, worker._active = \
        "active", False, False, False
    waiting = threading.Thread(target=worker._activate_when_peers_reached, daemon=True)
    try:
        waiting.start()
        wait_until(lambda: b.address in a.sender.reached(), 10, "a to reach b")
        assert not runtime.active.wait(1.0), "b cannot send a its acks yet: a's spouts wait"
        b.sender.connect_to({a.address})
        assert runtime.active.wait(10), "b reached a: a's spouts start"
        waiting.join(5)
    finally:
        worker.done.set()
        for endpoint in (a, b):
            endpoint.stop()


@pytest.mark.parametrize("secured", [False, True], ids=["plain", "secret"])
def test_a_worker_of_another_topology_on_the_port_is_not_reached_until_ours_binds_it(
        layout, context, secured):
    # A killed topology's worker drains while still bound to its port, which a new topology's
    # worker was given: the new topology's peers must neither count that port as reached
    # (their spouts would start) nor send their frames into it, and must reach the new
    # worker once it binds.
    security = Security(cluster_secret=bytes(range(32))) if secured else None
    src, sink = tasks(layout)
    inboxes = {"old": Inbox(capacity=100), "new": Inbox(capacity=100)}

    def routes(which: str) -> list:
        table: list = [None] * (layout.max_task + 1)
        table[sink] = inboxes[which]
        return table

    old_context = zmq.Context()
    old = Endpoint(layout, routes("old"), old_context, [], security, topology="other-1-abcdef")
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [], security)
    new = None
    try:
        a.sender.connect_to({old.address})
        a.sender.route(old.address).put((DATA, sink, src, batch(layout, 0)))
        wait_until(lambda: old.receiver.frames_rejected >= 2, 10,
                   "the old worker to refuse the handshake twice")
        assert a.sender.reached() == set()
        assert inboxes["old"].qsize() == 0 and old.receiver.frames_undecodable == 0
        old.stop()
        release(old_context)
        old_context.term()
        new = Endpoint(layout, routes("new"), context, [], security, port=old.port)
        wait_until(lambda: a.sender.reached() == {new.address}, 10, "the new worker's handshake")
        a.sender.route(new.address).put((DATA, sink, src, batch(layout, 100)))
        # The first batch waited in its socket with CURVE, which libzmq retries itself; a
        # refused PLAIN socket was replaced, and what it held is lost (its spout replays it).
        received = []
        while 100 not in received:
            received += [t.values[0] for t in inboxes["new"].get(timeout=10)[3].tuples()]
        assert received == [*(range(10) if secured else []), *range(100, 110)]
        assert inboxes["old"].qsize() == 0 and new.receiver.frames_rejected == 0
    finally:
        a.stop()
        if new is not None:
            new.stop()
        if not old.stopping.is_set():
            old.stop()
            release(old_context)
            old_context.term()


def test_a_sender_that_fails_closes_its_sockets_and_says_so(layout, monkeypatch, caplog):
    # The worker ends when its sender thread is gone (worker.py's _broken); the sockets must
    # be closed, or the worker's context.term() at its end would wait forever.
    def fail(*args):
        raise zmq.ZMQError(errno.EMFILE)

    monkeypatch.setattr(Sender, "_send", fail)
    context = zmq.Context()
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [])
    src, sink = tasks(layout)
    with caplog.at_level(logging.ERROR, logger="stormlet.cluster.transport"):
        a.sender.connect_to({f"tcp://127.0.0.1:{free_port()}"})
        a.sender.route(f"tcp://127.0.0.1:{free_port()}").put((DATA, sink, src, batch(layout, 0)))
        a.sender.join(10)
        assert not a.sender.is_alive()
        assert "the transport's sender failed" in caplog.text
    a.stop()
    release(context)
    ended = threading.Thread(target=context.term, daemon=True)
    ended.start()
    ended.join(10)
    assert not ended.is_alive(), "a socket of the failed sender was left open"


def test_a_worker_whose_transport_thread_ended_counts_itself_broken():
    from stormlet.cluster.worker import Worker

    class NoExecutors:
        def all_executors(self):
            return []

    ended = threading.Thread(target=lambda: None, name="transfer-sender")
    running = threading.Event()
    alive = threading.Thread(target=running.wait, name="transfer-receiver", daemon=True)
    ended.start()
    ended.join()
    alive.start()
    worker = Worker.__new__(Worker)   # only what _broken reads: no ZooKeeper, no sockets
    worker.runtime, worker.sender, worker.receiver = NoExecutors(), ended, alive
    worker.stopping = threading.Event()
    try:
        assert worker._broken() == "the transport's transfer-sender thread ended"
        worker.stopping.set()   # stopping on purpose: the threads end, nothing is broken
        assert worker._broken() is None
    finally:
        running.set()


@contextmanager
def sender_and_receiver(layout, context, task: int, capacity: int):
    """Worker ``a``, whose sender reaches worker ``b``, and the inbox of ``task`` in ``b``."""
    inbox = Inbox(capacity=capacity)
    routes: list = [None] * (layout.max_task + 1)
    routes[task] = inbox
    b = Endpoint(layout, routes, context, [])
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [])
    try:
        yield a, b, inbox
    finally:
        a.stop()
        b.stop()


def test_data_queued_before_a_pause_is_held_and_delivered_in_order_after_it(layout, context):
    src, sink = tasks(layout)
    with sender_and_receiver(layout, context, sink, 1000) as (a, b, inbox):
        a.sender.paused.apply([sink, 1])
        for i in range(50):   # queued for the sender, held there until the pause lifts
            a.sender.send(b.address, (DATA, sink, src, batch(layout, i * 10)))
        time.sleep(0.3)
        assert inbox.qsize() == 0, "held while paused"
        a.sender.paused.apply([sink, 0])
        route = a.sender.route(b.address)
        route.put_data((DATA, sink, src, batch(layout, 500)))
        received = []
        while len(received) < 510:
            received += [t.values[0] for t in inbox.get(timeout=5)[3].tuples()]
        assert received == list(range(510))
        # What executors handed over (the worker's metrics): one batch of ten tuples.
        assert (a.sender.tuples_sent, a.sender.batches_sent) == (10, 1)


def test_a_message_that_cannot_be_packed_is_dropped_and_the_sender_goes_on(layout, context):
    src, sink = tasks(layout)
    with sender_and_receiver(layout, context, src, 8) as (a, b, inbox):
        route = a.sender.route(b.address)
        route.put((ACK_RESET, src, sink, [-1]))   # no 64-bit unsigned id: it will not pack
        wait_until(lambda: a.sender.messages_dropped == 1, 5, "the message to be dropped")
        route.put((ACK_ACK, src, sink, array("Q", [5, 6])))
        message = inbox.get(timeout=5)
        assert message[0] == ACK_ACK and list(message[3]) == [5, 6]


def test_acks_are_never_held_for_a_paused_task(layout, context):
    src, sink = tasks(layout)
    with sender_and_receiver(layout, context, src, 8) as (a, b, inbox):
        a.sender.paused.apply([src, 1])
        route = a.sender.route(b.address)
        route.put((ACK_ACK, src, sink, array("Q", [5, 6])))
        message = inbox.get(timeout=5)
        assert message[0] == ACK_ACK and list(message[3]) == [5, 6]   # packed (root, value)


# ----- sent from the executors' threads


def reached(a, b) -> None:
    a.sender.connect_to({b.address})
    wait_until(lambda: b.address in a.sender.reached(), 10, "the handshake")


@contextmanager
def rounds_to(layout, context):
    """Worker ``a`` reaching worker ``b``, ``b``'s inbox of the sink task, and ``a``'s route to
    it, while the calling thread runs executors in rounds in ``a``."""
    _src, sink = tasks(layout)
    with sender_and_receiver(layout, context, sink, 1000) as (a, b, inbox):
        reached(a, b)
        a.sender.enter()
        try:
            yield a, inbox, a.sender.route(b.address)
        finally:
            a.sender.leave()


def rounds_of(endpoint: Endpoint) -> transport.TransportRounds:
    """A worker's transport rounds, as the worker makes them: its sender's and receiver's."""
    rounds = transport.TransportRounds(endpoint.sender)
    rounds.receiver = endpoint.receiver
    return rounds


def numbers(inbox, count: int) -> list[int]:
    received: list[int] = []
    while len(received) < count:
        received += [t.values[0] for t in inbox.get(timeout=5)[3].tuples()]
    return received


def test_a_thread_running_rounds_sends_a_frame_a_peer_for_what_it_sent_meanwhile(
        layout, context):
    src, sink = tasks(layout)
    with rounds_to(layout, context) as (a, inbox, route):
        frames = a.sender.frames_sent
        for i in range(5):
            route.put_data((DATA, sink, src, batch(layout, i * 10)))
        assert a.sender.frames_sent == frames, "held in the outbox"
        a.sender.flush()
        assert a.sender.frames_sent == frames + 1, "one frame for the five batches"
        assert numbers(inbox, 50) == list(range(50))


def test_rounds_send_what_they_hold_once_it_was_held_long_enough(layout, context):
    src, sink = tasks(layout)
    with rounds_to(layout, context) as (a, inbox, route):
        frames = a.sender.frames_sent
        route.put_data((DATA, sink, src, batch(layout, 0)))
        a.sender.flush_if_due(time.monotonic() - 1.0)   # not held that long yet
        assert a.sender.frames_sent == frames
        a.sender.flush_if_due(time.monotonic() + transport.COALESCE_SECS)
        assert a.sender.frames_sent == frames + 1
        assert numbers(inbox, 10) == list(range(10))
        # The guard's look, from its own thread, does the same for a turn that blocks.
        rounds = transport.TransportRounds(a.sender)
        route.put_data((DATA, sink, src, batch(layout, 10)))
        looker = threading.Thread(
            target=rounds.look, args=(time.monotonic() + transport.COALESCE_SECS,))
        looker.start()
        looker.join(5)
        assert a.sender.frames_sent == frames + 2
        assert numbers(inbox, 10) == list(range(10, 20))


def test_a_thread_not_running_rounds_sends_at_once_and_a_leaving_one_sends_what_it_held(
        layout, context):
    src, sink = tasks(layout)
    with sender_and_receiver(layout, context, sink, 1000) as (a, b, inbox):
        reached(a, b)
        route = a.sender.route(b.address)
        frames = a.sender.frames_sent
        route.put_data((DATA, sink, src, batch(layout, 0)))
        assert a.sender.frames_sent == frames + 1, "sent on this thread, before put returned"
        a.sender.enter()
        route.put_data((DATA, sink, src, batch(layout, 10)))
        a.sender.leave()
        assert a.sender.frames_sent == frames + 2
        route.put_data((DATA, sink, src, batch(layout, 20)))   # not in rounds any more
        assert a.sender.frames_sent == frames + 3
        assert numbers(inbox, 30) == list(range(30))


def test_what_a_round_holds_goes_before_what_follows_it_through_the_sender_thread(
        layout, context):
    src, sink = tasks(layout)
    with rounds_to(layout, context) as (a, inbox, route):
        for i in range(3):
            route.put_data((DATA, sink, src, batch(layout, i * 10)))
        # Now the task's worker asks for its data to be held: the next batch goes to the
        # sender thread, which holds it, and what the round held must neither overtake it nor
        # be overtaken by it.
        a.sender.paused.apply([sink, 1])
        route.put_data((DATA, sink, src, batch(layout, 30)), wait=False)
        a.sender.flush()
        a.sender.paused.apply([sink, 0])
        route.put_data((DATA, sink, src, batch(layout, 40)))
        a.sender.flush()
        assert numbers(inbox, 50) == list(range(50))


def busy_round(rounds: transport.TransportRounds) -> None:
    """A round of executors that took no time, run by the calling thread."""
    rounds.before_turn(time.monotonic())
    rounds.round_ended()


@contextmanager
def busy_rounds_in(layout, context):
    """Worker ``b``, its inbox of the sink task, and its transport rounds run busy by the calling
    thread, so that its receiver thread has left the frames to them; and the route from worker
    ``a``, which reaches ``b``, to the sink task."""
    _src, sink = tasks(layout)
    with sender_and_receiver(layout, context, sink, 1000) as (a, b, inbox):
        reached(a, b)
        rounds = rounds_of(b)
        rounds.enter()
        try:
            def left_to_rounds() -> bool:   # after its poll under way (<= 0.2 s) returns
                busy_round(rounds)
                time.sleep(0.001)
                return not b.receiver.watching

            wait_until(left_to_rounds, 5, "the receiver thread to leave the socket to rounds",
                       interval=0)
            yield b, inbox, rounds, a.sender.route(b.address)
        finally:
            rounds.leave()


def test_busy_rounds_take_the_frames_that_came_and_the_receiver_thread_takes_them_once_idle(
        layout, context, monkeypatch):
    # Rounds that asked within the last 5 s count as busy: a loaded machine's late wake-up
    # between two of this test's rounds must not hand the socket back to the receiver thread.
    monkeypatch.setattr(transport, "ROUNDS_HOLD_SECS", 5.0)
    src, sink = tasks(layout)
    with busy_rounds_in(layout, context) as (b, inbox, rounds, route):
        route.put_data((DATA, sink, src, batch(layout, 0)))
        deadline = time.monotonic() + 5
        while inbox.empty() and time.monotonic() < deadline:
            busy_round(rounds)
            time.sleep(0.001)
        message = inbox.get_nowait()
        assert b.receiver.taken_by_rounds == 1, "the round took it, on this thread"
        assert [t.values[0] for t in message[3].tuples()] == list(range(10))
        rounds.idle()   # the rounds' thread sleeps: the receiver thread takes what comes
        route.put_data((DATA, sink, src, batch(layout, 10)))
        assert numbers(inbox, 10) == list(range(10, 20))
        assert b.receiver.taken_by_rounds == 1


def test_rounds_blocked_in_a_turn_leave_the_frames_to_the_receiver_thread_at_the_guards_look(
        layout, context, monkeypatch):
    # Left to rounds, the receiver thread would look again only after a minute here: what wakes
    # it is the guard's look, once the rounds last asked ROUNDS_HOLD_SECS before (their thread
    # blocked in a turn, neither asking nor asleep).
    monkeypatch.setattr(transport, "ROUNDS_LEFT_SECS", 60.0)
    monkeypatch.setattr(transport, "ROUNDS_HOLD_SECS", 0.5)
    src, sink = tasks(layout)
    with busy_rounds_in(layout, context) as (b, inbox, rounds, route):
        rounds.before_turn(time.monotonic())   # a turn that blocks from here on
        route.put_data((DATA, sink, src, batch(layout, 0)))
        time.sleep(0.7)
        assert inbox.empty(), "nothing took the frame yet: the rounds are blocked"
        rounds.look(time.monotonic())
        assert numbers(inbox, 10) == list(range(10))
        assert b.receiver.taken_by_rounds == 0


def test_rounds_whose_transport_work_fails_leave_it_to_the_transport_threads(
        layout, context, caplog):
    src, sink = tasks(layout)
    with sender_and_receiver(layout, context, sink, 1000) as (a, b, inbox):
        reached(a, b)
        rounds = rounds_of(a)
        route = a.sender.route(b.address)
        rounds.enter()
        route.put_data((DATA, sink, src, batch(layout, 0)))   # held for the round's end

        def broken(now: float) -> None:
            raise RuntimeError("broken on purpose")

        a.sender.flush_if_due = broken
        rounds.before_turn(time.monotonic())   # raises nothing into the executors' thread
        assert rounds.given_up and "the transport's threads move them" in caplog.text
        assert numbers(inbox, 10) == list(range(10)), "what the round held went"
        frames = a.sender.frames_sent
        route.put_data((DATA, sink, src, batch(layout, 10)))
        assert a.sender.frames_sent == frames + 1, "sent at once, no longer held"
        assert numbers(inbox, 10) == list(range(10, 20))
        rounds.leave()


# ----- a batch that will not pack


def test_a_batch_that_will_not_pack_is_dropped_and_reported_and_the_rest_still_sent(
        layout, context):
    src, sink = tasks(layout)
    sender = Sender(context, threading.Event(), TOPOLOGY)   # not started: only its queue is used
    local = Inbox(capacity=2)
    routes: list = [None] * (layout.max_task + 1)
    routes[sink] = sender.route("tcp://127.0.0.1:1")
    routes[src] = local   # another destination, in this worker
    metrics = TaskMetrics("numbers", src, streams=["default"])
    transfer = Transfer(src, routes, [sink, src], [], threading.Event(), metrics)
    info = StreamInfo("numbers", "default", ["n"])
    transfer.data[sink].append(Tuple([object()], info, src, None))   # changed after its check
    transfer.data[src].extend(batch(layout, 0))
    transfer.flush()
    assert metrics.errors.count == 1 and sender.queue.empty()
    assert [t.values[0] for t in local.get_nowait()[3]] == list(range(10))
    transfer.data[sink].extend(batch(layout, 10))
    transfer.flush()   # the next batch for that worker goes, packed
    _address, (kind, dest, _src, payload) = sender.queue.get_nowait()
    assert (kind, dest, type(payload)) == (DATA, sink, bytes)


# ----- hostile frames

def test_garbage_truncated_and_oversized_frames_are_refused_with_a_warning_and_the_rest_delivered(
        layout, context, monkeypatch, caplog):
    monkeypatch.setattr("stormlet.cluster.wire.MAX_FRAME_BYTES", 64 * 1024)
    src, sink = tasks(layout)
    inbox = Inbox(capacity=100)
    routes: list = [None] * (layout.max_task + 1)
    routes[sink] = inbox
    b = Endpoint(layout, routes, context, [])
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    Security().transport_client(push, TOPOLOGY)   # a peer of the topology, gone astray
    push.connect(b.address)
    good = encode_frame([(DATA, sink, src, batch(layout, 0))], TOPOLOGY)
    hostile = [b"\xc1 not msgpack at all", good[: len(good) // 2],
               msgpack.packb([WIRE_VERSION, TOPOLOGY, "", 0, [[DATA, sink, src, ["x" * 100_000]]]]),
               msgpack.packb([WIRE_VERSION, "another-topology", "", 0, []]), b""]
    try:
        with caplog.at_level(logging.WARNING, logger="stormlet.cluster.transport"):
            for frame in hostile:
                push.send(frame)
            push.send(good)
            message = inbox.get(timeout=10)
            assert [t.values[0] for t in message[3].tuples()] == list(range(10))
            assert b.receiver.frames_rejected == len(hostile)
            assert inbox.qsize() == 0
        text = caplog.text
        assert "undecodable" in text and "over the 65536 limit" in text
        assert "another-topology" in text
    finally:
        push.close(0)
        b.stop()


# ----- with a cluster secret

def test_with_a_secret_peers_without_the_topologys_keys_are_refused_and_counted(
        layout, context, tmp_path):
    src, sink = tasks(layout)
    secured = Security(cluster_secret=bytes(range(32)))
    inbox = Inbox(capacity=100)
    routes: list = [None] * (layout.max_task + 1)
    routes[sink] = inbox
    b = Endpoint(layout, routes, context, [], security=secured)
    # A worker of the same topology holds only its credentials, and gets through.
    credentials = tmp_path / "worker.json"
    credentials.write_text(json.dumps(secured.worker_credentials(TOPOLOGY, "t")))
    a = Endpoint(layout, [None] * (layout.max_task + 1), context, [],
                 security=Security.for_worker(credentials))
    pause = encode_frame([(BACKPRESSURE, SYSTEM_TASK, SYSTEM_TASK, [sink, 1])], TOPOLOGY)
    forgers = []
    for keys in (None, Security(cluster_secret=bytes(32))):   # no CURVE; another cluster's
        push = context.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            keys.transport_client(push, TOPOLOGY)
        push.connect(b.address)
        push.send(pause, zmq.NOBLOCK)
        forgers.append(push)
    try:
        a.sender.route(b.address).put((DATA, sink, src, batch(layout, 0)))
        message = inbox.get(timeout=10)
        assert [t.values[0] for t in message[3].tuples()] == list(range(10))
        wait_until(lambda: b.receiver.frames_rejected >= 2, 10, "both forgers to be refused")
        assert not b.sender.paused.paused(sink)
        assert b.receiver.frames_undecodable == 0   # refused at the handshake: nothing arrived
    finally:
        for push in forgers:
            push.close(0)
        a.stop()
        b.stop()


def test_frames_of_a_worker_whose_slot_left_the_assignment_are_refused_and_reported_once(
        layout, context):
    # Issue 51's split brain: a worker cut off from ZooKeeper ran on after nimbus gave its
    # tasks to another, and the workers holding the assignment took its frames. Here worker
    # B knows the assignment that dropped slot s1:1 (it moved to s3:1): what s1:1's orphan
    # sends is refused, counted and reported once; its successor's frames get through.
    src, sink = tasks(layout)
    inbox = Inbox(capacity=100)
    routes: list = [None] * (layout.max_task + 1)
    routes[sink] = inbox
    first = next_assignment(None, [Executor("numbers", [src], "s1", "h", 1),
                                   Executor("sink", [sink], "s2", "h", 1)])
    moved = next_assignment(json.loads(json.dumps(first)),
                            [Executor("numbers", [src], "s3", "h", 1),
                             Executor("sink", [sink], "s2", "h", 1)])
    fence = Fence()
    fence.update(moved)
    reports = []
    b = Endpoint(layout, routes, context, [], fence=fence, on_fenced=reports.append)
    orphan = Endpoint(layout, [None] * (layout.max_task + 1), context, [], slot="s1:1",
                      tenure=1)
    successor = Endpoint(layout, [None] * (layout.max_task + 1), context, [], slot="s3:1",
                         tenure=2)
    try:
        for i in range(3):
            orphan.sender.route(b.address).put((DATA, sink, src, batch(layout, 100 * i)))
        wait_until(lambda: b.receiver.frames_fenced >= 1, 10, "the orphan's frames refused")
        successor.sender.route(b.address).put((DATA, sink, src, batch(layout, 0)))
        message = inbox.get(timeout=10)
        assert [t.values[0] for t in message[3].tuples()] == list(range(10))
        assert inbox.qsize() == 0, "nothing of the orphan's was delivered"
        assert b.receiver.frames_rejected == b.receiver.frames_fenced >= 1
        assert len(reports) == 1 and reports[0].sender == "s1:1" and reports[0].tenure == 1
        assert "not in the topology's assignment (version 2)" in str(reports[0])
    finally:
        for endpoint in (orphan, successor, b):
            endpoint.stop()


def test_data_on_an_edge_closing_a_cycle_is_queued_for_a_paused_task_without_waiting(
        layout, context):
    # A bolt in a cycle must not wait on a peer that may be waiting on it (see
    # Topology.feeding_back): the sender holds the batch until the pause lifts instead.
    src, sink = tasks(layout)
    with sender_and_receiver(layout, context, sink, 1000) as (a, b, inbox):
        a.sender.paused.apply([sink, 1])
        route = a.sender.route(b.address)
        give_up = threading.Event()   # so that a put that waits after all fails, not hangs
        threading.Timer(5, give_up.set).start()
        assert route.put_data((DATA, sink, src, batch(layout, 0)), give_up, wait=False) == 0.0
        # The contrast: on any other edge the executor waits for the pause to lift.
        lifted = threading.Timer(0.3, a.sender.paused.apply, ([sink, 0],))
        lifted.start()
        assert route.put_data((DATA, sink, src, batch(layout, 10)), a.stopping) >= 0.25
        received = []
        while len(received) < 20:
            received += [t.values[0] for t in inbox.get(timeout=5)[3].tuples()]
        assert received == list(range(20))


def test_a_topologys_link_settings_reach_both_ends_sockets(layout, context):
    # Issue 51: the failure-detection times are settings, not constants.
    times = LinkTimes.of({"stormlet.link.heartbeat.secs": 0.5, "stormlet.link.timeout.secs": 3,
                          "stormlet.link.connect.timeout.secs": 1.5})
    assert times == LinkTimes(0.5, 3.0, 1.5)
    assert LinkTimes.of() == LinkTimes(1.0, 4.0, 2.0)
    stopping = threading.Event()
    sender = Sender(context, stopping, TOPOLOGY, link_times=times)
    receiver = Receiver(context, f"tcp://127.0.0.1:{free_port()}", FrameDecoder(layout, TOPOLOGY),
                        lambda message: None, stopping, topology=TOPOLOGY, link_times=times)
    try:
        sock = sender._socket("tcp://127.0.0.1:1")
        for s in (sock, receiver.socket):
            assert (s.getsockopt(zmq.HEARTBEAT_IVL), s.getsockopt(zmq.HEARTBEAT_TIMEOUT)) \
                == (500, 3000)
        assert sock.getsockopt(zmq.CONNECT_TIMEOUT) == 1500
    finally:
        sender._close("tcp://127.0.0.1:1")
        receiver._refusals.close(linger=0)
        receiver.socket.close(linger=0)
