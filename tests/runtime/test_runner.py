"""The threads that run executors (stormlet/runtime/threads.py): by default a process's executors
take turns on one thread; a component may keep a thread of its own; an executor that holds the
shared thread too long keeps it, and the others go on on a new one; one that breaks ends alone;
a bolt whose destination is full holds its data back instead of waiting, and takes no more
input until it went in."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from support import wait_until
from test_fault_tolerance import Stuck

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.runtime.executor import FOREVER, Executor
from stormlet.runtime.inbox import Inbox
from stormlet.runtime.protocol import DATA, STOP, SYSTEM_TASK, Message
from stormlet.runtime.threads import BLOCKED_SECS, Guard, SharedThread

NAME = "runner"


# ----- the runner alone, with executors that record what they were given


class Recorder(Executor):
    """Takes messages until STOP, noting each payload and the thread it ran on; a payload
    "block" makes it wait on ``release``, "raise" makes it raise."""

    def __init__(self, name: str):
        super().__init__(name, Inbox(8), [], threading.Event())
        self.seen: list = []
        self.threads: set[int] = set()
        self.release = threading.Event()
        self.blocking = threading.Event()

    def steps(self):
        self.ready.set()
        while True:
            kind, _dest, _src, payload = yield FOREVER
            if kind == STOP:
                return
            self.threads.add(threading.get_ident())
            if payload == "block":
                self.blocking.set()
                self.release.wait(10)
            elif payload == "raise":
                raise RuntimeError("broken on purpose")
            self.seen.append(payload)


def send(executor: Executor, payload) -> None:
    executor.inbox.put(Message(DATA, 0, SYSTEM_TASK, payload))


def stop(executor: Executor) -> None:
    executor.inbox.put(Message(STOP, SYSTEM_TASK, SYSTEM_TASK, None))


def test_executors_sharing_a_thread_each_get_their_messages_in_order_and_a_sleeping_thread_wakes():
    first, second = Recorder("first"), Recorder("second")
    thread = SharedThread("shared", [first, second], None)
    thread.start()
    try:
        # Both wait for input: the thread sleeps until a put rings it.
        wait_until(lambda: thread.idle, 5, "the shared thread to sleep", interval=0.005)
        for n in range(5):
            send(first, n)
            send(second, -n)
        wait_until(lambda: len(first.seen) == 5 and len(second.seen) == 5, 2,
                   "both executors' messages", interval=0.005)
        assert first.seen == [0, 1, 2, 3, 4] and second.seen == [0, -1, -2, -3, -4]
        assert first.threads == second.threads == {thread.ident}
    finally:
        stop(first)
        stop(second)
        thread.join(5)
    assert not thread.is_alive()
    assert first.finished.is_set() and second.finished.is_set()


class Rounds:
    """A round listener noting what it is told, on which thread, and what the executors had seen
    by each round's end."""

    def __init__(self, executor: Recorder):
        self.executor = executor
        self.calls: list[tuple[str, int]] = []
        self.seen_at_round_end: list[list] = []

    def enter(self) -> None:
        self.calls.append(("enter", threading.get_ident()))

    def before_turn(self, now: float) -> None:
        self.calls.append(("before_turn", threading.get_ident()))

    def round_ended(self) -> None:
        self.calls.append(("round_ended", threading.get_ident()))
        self.seen_at_round_end.append(list(self.executor.seen))

    def idle(self) -> None:
        self.calls.append(("idle", threading.get_ident()))

    def leave(self) -> None:
        self.calls.append(("leave", threading.get_ident()))

    def look(self, now: float) -> None:
        self.calls.append(("look", threading.get_ident()))


def test_a_shared_thread_tells_its_round_listener_of_each_turn_and_round_on_its_own_thread():
    first, second = Recorder("first"), Recorder("second")
    rounds = Rounds(first)
    thread = SharedThread("shared", [first, second], None, rounds=rounds)
    thread.start()
    try:
        wait_until(lambda: thread.idle, 5, "the shared thread to sleep", interval=0.005)
        turns_before = sum(1 for name, _ in rounds.calls if name == "before_turn")
        send(first, "a")
        wait_until(lambda: rounds.seen_at_round_end and rounds.seen_at_round_end[-1] == ["a"],
                   5, "a round to end after the message", interval=0.005)
        # A turn for each executor began before the round that took the message ended.
        assert sum(1 for name, _ in rounds.calls if name == "before_turn") >= turns_before + 2
    finally:
        stop(first)
        stop(second)
        thread.join(5)
    names = [name for name, _ in rounds.calls]
    assert names[0] == "enter" and names[-1] == "leave" and names.count("leave") == 1
    # Before each sleep its rounds were told the thread goes idle, right after a round ended.
    assert "idle" in names
    assert all(names[i - 1] == "round_ended" for i, name in enumerate(names) if name == "idle")
    assert {ident for _, ident in rounds.calls} == {thread.ident}


def test_the_guard_has_a_shared_threads_round_listener_look_from_its_own_thread():
    # So that a turn that blocks does not hold what its round sent until it returns.
    executor = Recorder("alone")
    rounds = Rounds(executor)
    thread = SharedThread("shared", [executor], None, rounds=rounds)
    guard = Guard("guarded", [thread])
    thread.start()
    guard.start()
    try:
        wait_until(lambda: any(name == "look" for name, _ in rounds.calls), 5,
                   "the guard to look", interval=0.01)
        assert {ident for name, ident in rounds.calls if name == "look"} == {guard.ident}
    finally:
        guard.done.set()
        stop(executor)
        thread.join(5)
        guard.join(5)


def test_a_wake_up_for_an_executor_that_waits_for_input_is_ignored():
    """A wake-up means room for data held back; one that comes after the data went in (the
    executor waits for input again) must not resume it without a message."""
    recorder = Recorder("recorder")
    thread = SharedThread("shared", [recorder], None)
    sleeps = []
    real_sleep = thread._sleep
    thread._sleep = lambda turns: (sleeps.append(1), real_sleep(turns))
    thread.start()
    try:
        wait_until(lambda: sleeps and thread.idle, 5, "the thread to sleep", interval=0.005)
        recorder.wake()
        # Woken, it looked at the executor and went back to sleep.
        wait_until(lambda: len(sleeps) >= 2 and thread.idle, 5, "the thread to sleep again",
                   interval=0.005)
        send(recorder, "after the wake-up")
        wait_until(lambda: recorder.seen == ["after the wake-up"], 5, "the message", interval=0.005)
        assert recorder.death is None and not recorder.finished.is_set()
    finally:
        stop(recorder)
        thread.join(5)


@contextlib.contextmanager
def guarded(held: Recorder, other: Recorder, release: threading.Event):
    """``held`` and ``other`` sharing a thread watched by a ``Guard``; yields the thread. On
    leaving, sets ``release`` (what ``held`` waits on), stops both and checks they finished."""
    thread = SharedThread("shared", [held, other], None)
    guard = Guard("test", [thread])
    thread.start()
    guard.start()
    try:
        yield thread
    finally:
        release.set()
        for executor in (held, other):
            stop(executor)
        guard.done.set()
        guard.join(5)
        thread.join(5)
    assert held.finished.wait(5) and other.finished.wait(5)


def test_an_executor_holding_the_shared_thread_keeps_it_and_the_others_go_on_on_a_new_one():
    blocker, other = Recorder("blocker"), Recorder("other")
    with guarded(blocker, other, blocker.release) as thread:
        send(blocker, "block")
        assert blocker.blocking.wait(5)
        send(other, "while blocked")
        # Within a few of the guard's looks, the other executor runs elsewhere.
        wait_until(lambda: other.seen == ["while blocked"], 10 * BLOCKED_SECS + 2,
                   "the other executor's message", interval=0.005)
        (moved_to,) = other.threads
        assert moved_to != thread.ident
        assert other.ident == moved_to
        blocker.release.set()
        send(blocker, "after")
        wait_until(lambda: blocker.seen == ["block", "after"], 5, "the released message",
                   interval=0.005)
        assert blocker.threads == {thread.ident}   # it never left its thread


class SlowStarter(Recorder):
    """A Recorder whose start (its component's ``open`` or ``prepare``) waits on ``started``
    (at most ``start_secs``), or raises or returns there as ``how`` says."""

    def __init__(self, name: str, start_secs: float = 10, how: str = "wait"):
        super().__init__(name)
        self.starting = threading.Event()
        self.started = threading.Event()
        self.start_secs = start_secs
        self.how = how

    def steps(self):
        self.starting.set()
        self.started.wait(self.start_secs)
        if self.how == "raise":
            raise RuntimeError("could not open")
        if self.how == "return":
            return
        yield from super().steps()


def test_an_executor_slow_to_start_keeps_the_shared_thread_and_the_others_go_on_on_a_new_one(
        monkeypatch):
    monkeypatch.setattr("stormlet.runtime.threads.STARTING_BLOCKED_SECS", 0.3)
    other, slow = Recorder("other"), SlowStarter("slow")   # the slow one starts second
    with guarded(slow, other, slow.started) as thread:
        assert slow.starting.wait(5)
        send(other, "while the second starts")
        wait_until(lambda: other.seen == ["while the second starts"], 10 * BLOCKED_SECS + 2,
                   "the other executor's message", interval=0.005)
        (moved_to,) = other.threads
        assert moved_to != thread.ident and other.ident == moved_to
        slow.started.set()
        send(slow, "once started")
        wait_until(lambda: slow.seen == ["once started"], 5, "the slow one's message",
                   interval=0.005)
        assert slow.threads == {thread.ident}


def test_a_start_shorter_than_the_starting_limit_holds_the_others_once_and_keeps_one_thread():
    """A start that connects somewhere takes tenths of a second: that is no reason to give it a
    thread of its own for good, which is the slower way to run."""
    slow, other = SlowStarter("slow", start_secs=3 * BLOCKED_SECS), Recorder("other")
    with guarded(slow, other, slow.started) as thread:
        send(other, "first")
        send(slow, "first")
        wait_until(lambda: other.seen == slow.seen == ["first"], 5, "both messages",
                   interval=0.005)
        assert other.threads == slow.threads == {thread.ident}


@pytest.mark.parametrize("how", ["raise", "return"])
def test_an_executor_whose_start_raises_or_returns_ends_alone(how):
    ending, other = SlowStarter("ending", start_secs=0, how=how), Recorder("other")
    with guarded(ending, other, ending.started) as thread:
        assert ending.finished.wait(5)
        send(other, "still here")
        wait_until(lambda: other.seen == ["still here"], 5, "the other's message",
                   interval=0.005)
        assert other.threads == {thread.ident} and not other.finished.is_set()
        if how == "raise":
            assert "RuntimeError: could not open" in ending.death
        else:
            assert ending.death is None


def test_an_executor_that_breaks_ends_alone_and_says_why(caplog):
    broken, healthy = Recorder("broken"), Recorder("healthy")
    thread = SharedThread("shared", [broken, healthy], None)
    thread.start()
    try:
        send(broken, "raise")
        assert broken.finished.wait(5)
        assert broken.death is not None and "RuntimeError: broken on purpose" in broken.death
        send(healthy, "still here")
        wait_until(lambda: healthy.seen == ["still here"], 5, "the healthy message",
                   interval=0.005)
        assert not healthy.finished.is_set()
    finally:
        stop(healthy)
        thread.join(5)
    assert healthy.finished.is_set()
    assert any("broken on purpose" in r.getMessage() for r in caplog.records)


# ----- whole topologies


class Counting(Spout):
    """Emits 0, 1, 2, ... untracked, as fast as it is asked."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.threads: set[int] = set()

    def next_tuple(self):
        self.threads.add(threading.get_ident())
        self.collector.emit([self.n])
        self.n += 1


class FanOut(Bolt):
    """Emits ten tuples for each it takes."""

    outputs = ["n"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.threads: set[int] = set()

    def execute(self, tup):
        self.threads.add(threading.get_ident())
        for i in range(10):
            self.collector.emit([tup[0] * 10 + i])


class Slow(Bolt):
    """Spends ``work`` seconds of CPU on each tuple (holding the interpreter, not blocking)."""

    outputs = []

    def __init__(self, work: float = 20e-6):
        self.work = work

    def prepare(self, conf, context, collector):
        self.taken = 0
        self.threads: set[int] = set()

    def execute(self, tup):
        self.threads.add(threading.get_ident())
        until = time.perf_counter() + self.work
        while time.perf_counter() < until:
            pass
        self.taken += 1


def chain(own_thread: tuple[str, ...] = ()) -> TopologyBuilder:
    """numbers -> fan -> slow; the components named in ``own_thread`` keep a thread each."""
    b = TopologyBuilder()
    declarers = {"numbers": b.set_spout("numbers", Counting()),
                 "fan": b.set_bolt("fan", FanOut()).shuffle_grouping("numbers"),
                 "slow": b.set_bolt("slow", Slow()).shuffle_grouping("fan")}
    for component in own_thread:
        declarers[component].add_config(cfg.STORMLET_EXECUTOR_SHARED_THREAD, False)
    return b


def test_by_default_a_processs_executors_share_one_thread_unless_a_component_keeps_its_own(
        monkeypatch):
    monkeypatch.setattr("stormlet.runtime.threads.BLOCKED_SECS", 5.0)   # no hand-off on a slow turn
    with LocalCluster() as cluster:
        cluster.submit(NAME, {cfg.TOPOLOGY_ACKER_EXECUTORS: 0}, chain(own_thread=("slow",)).build())
        (spout,) = cluster.instances(NAME, "numbers")
        (fan,) = cluster.instances(NAME, "fan")
        (slow,) = cluster.instances(NAME, "slow")
        cluster.wait_for(lambda: slow.taken > 1000, timeout=10)
        assert len(spout.threads) == 1 and spout.threads == fan.threads
        assert threading.get_ident() not in spout.threads
        assert len(slow.threads) == 1 and not slow.threads & spout.threads


def test_a_bolt_taking_turns_holds_its_data_back_while_a_destination_is_full(monkeypatch):
    """Acking off, nothing but backpressure bounds the work between a fan-out and a slow bolt.
    The spout, on a thread of its own, keeps the fan-out's inbox full, so the fan-out flushes
    several times a turn, more than the slow bolt's inbox holds. The slow bolt takes turns on
    the fan-out's thread: were the fan-out to wait for room, nothing could make it, until the
    guard handed the slow bolt to another thread. It holds its data back instead, and yields."""
    # Only a wait (which would never end) hands an executor over, not a slow turn on a busy
    # machine.
    monkeypatch.setattr("stormlet.runtime.threads.BLOCKED_SECS", 1.0)
    capacity = 2
    conf = {cfg.TOPOLOGY_ACKER_EXECUTORS: 0, cfg.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE: capacity}
    with LocalCluster() as cluster:
        cluster.submit(NAME, conf, chain(own_thread=("numbers",)).build())
        runtime = cluster.runtime(NAME)
        (slow_executor,) = runtime.executors["slow"]
        (fan_executor,) = runtime.executors["fan"]
        (slow,) = cluster.instances(NAME, "slow")
        deepest = 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            deepest = max(deepest, slow_executor.inbox.qsize())
            time.sleep(0.002)
        assert slow.taken > 1000   # it ran all along
        (fan,) = cluster.instances(NAME, "fan")
        (fan_task,) = fan_executor.tasks
        assert fan_task.metrics.throttled_secs > 0   # it held data back
        assert len(fan.threads) == 1 and slow.threads == fan.threads   # never stuck waiting
    # A full inbox still takes the batch of the sender it wakes: one over.
    assert deepest <= capacity + 1, deepest


class Cleaned(FanOut):
    def cleanup(self):
        self.cleaned = True


def test_a_bolt_holding_data_back_still_stops(monkeypatch, caplog):
    """The fan-out holds its data for a bolt (on a thread of its own) that hangs: its inbox
    stays full. Stopping, the fan-out must still take its STOP, flush without waiting and clean
    up; only the hung bolt is left behind."""
    monkeypatch.setattr("stormlet.runtime.engine.EXECUTOR_STOP_SECS", 1.0)
    b = TopologyBuilder()
    b.set_spout("numbers", Counting())
    b.set_bolt("fan", Cleaned()).shuffle_grouping("numbers")
    (b.set_bolt("stuck", Stuck()).shuffle_grouping("fan")
     .add_config(cfg.STORMLET_EXECUTOR_SHARED_THREAD, False))
    conf = {cfg.TOPOLOGY_ACKER_EXECUTORS: 0, cfg.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE: 1}
    with LocalCluster() as cluster:
        cluster.submit(NAME, conf, b.build())
        (stuck,) = cluster.instances(NAME, "stuck")
        (fan,) = cluster.instances(NAME, "fan")
        (fan_executor,) = cluster.runtime(NAME).executors["fan"]
        try:
            assert stuck.waiting.wait(10)
            wait_until(lambda: not fan_executor.wants_input, 5, "the fan-out holding data back",
                       interval=0.005)
            cluster.kill(NAME, wait_secs=0)
            assert fan_executor.finished.is_set()
            assert getattr(fan, "cleaned", False)
        finally:
            stuck.release.set()
    left_behind = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert len(left_behind) == 1 and ":stuck:" in left_behind[0], left_behind
