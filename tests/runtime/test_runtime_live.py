"""Executors added to and removed from a running TopologyRuntime (``add_executors``,
``remove_executors``): what a worker does when its assignment changes, as a host dies and its
tasks move, without stopping the executors that stay.

Each test runs a real topology in this process with a partial plan, as a worker does; the tasks
that run elsewhere are routed to a ``Parking`` route standing in for another worker, which keeps
what it is given and can hand it on to where the tasks run later."""

from __future__ import annotations

import re
import threading
import time

import pytest
from support import wait_until

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.runtime.engine import TopologyRuntime, executor_plan
from stormlet.runtime.numbering import TopologyLayout
from stormlet.runtime.protocol import ACKER_COMPONENT, DATA

ACKERS = 1
BASE_CONF = {cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS: 60, cfg.TOPOLOGY_ACKER_EXECUTORS: ACKERS}


class Parking:
    """Another worker's route, as far as the runtime can tell: it takes every message for the
    tasks routed to it (never full) and keeps them, in order."""

    def __init__(self) -> None:
        self.messages: list[tuple] = []
        self.lock = threading.Lock()

    def put(self, message: tuple) -> None:
        with self.lock:
            self.messages.append(message)

    def put_data(self, message: tuple, stopping=None, wait: bool = True) -> float:
        self.put(message)
        return 0.0

    def accepting(self, task: int) -> bool:
        return True

    def when_room(self, task: int, wake) -> None:
        pass

    def data_for(self, tasks) -> int:
        """Tuples parked for ``tasks``."""
        with self.lock:
            return sum(len(m[3]) for m in self.messages if m[0] == DATA and m[1] in tasks)

    def hand_on(self, routes: list) -> int:
        """Put what is parked where its tasks now run (``routes``: the runtime's); how many
        messages."""
        with self.lock:
            messages, self.messages = self.messages, []
        for message in messages:
            routes[message[1]].put(message)
        return len(messages)


# ----- components (deep-copied per task: their records are read through runtime.instances)


class Numbered(Spout):
    """Emits ``test.count`` tracked tuples [i] (msg id i; endless if 0), at most one every
    ``test.every`` seconds, replaying a failed one, and records its lifecycle. Offset-style: it
    commits in ``close`` the offsets acked without a gap, as an offset spout does."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf.get("test.count", 0))
        self.next_n = 0
        self.every = float(conf.get("test.every", 0))
        self.next_at = 0.0
        self.opens = getattr(self, "opens", 0) + 1
        self.emits, self.acks, self.fails, self.replays = 0, set(), [], []
        self.activations, self.deactivations, self.commits = 0, 0, []
        self.closed = False

    def activate(self):
        self.activations += 1

    def deactivate(self):
        self.deactivations += 1

    def next_tuple(self):
        if self.every:
            now = time.monotonic()
            if now < self.next_at:
                return
            self.next_at = now + self.every
        if self.replays:
            n = self.replays.pop()
        elif not self.count or self.next_n < self.count:
            n, self.next_n = self.next_n, self.next_n + 1
        else:
            return
        self.emits += 1
        self.collector.emit([n], msg_id=n)

    def ack(self, msg_id):
        self.acks.add(msg_id)

    def fail(self, msg_id, reason):
        self.fails.append((msg_id, reason.kind))
        self.replays.append(msg_id)

    def close(self):
        committed = 0
        while committed in self.acks:
            committed += 1
        self.commits.append(committed)
        self.closed = True


class Relay(BasicBolt):
    outputs = ["n"]

    def prepare(self, conf, context):
        self.prepares = getattr(self, "prepares", 0) + 1
        self.executed = 0
        self.cleaned = False
        self.raised = not conf.get("test.raise_once")

    def execute(self, tup, collector):
        self.executed += 1
        if not self.raised:
            self.raised = True
            raise ValueError("the first tuple of each task, on purpose")
        collector.emit([tup["n"]])

    def cleanup(self):
        self.cleaned = True


class Sink(Bolt):
    outputs = []

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.prepares = getattr(self, "prepares", 0) + 1
        self.executed = 0
        self.ticks = 0
        self.cleaned = False

    def execute(self, tup):
        if tup.is_tick():
            self.ticks += 1
            return
        self.executed += 1
        self.collector.ack(tup)

    def cleanup(self):
        self.cleaned = True


# ----- helpers


def plan_without(topology, conf, component: str, executor: int):
    """The whole topology's plan but the ``executor``-th executor of ``component``; and that
    executor's tasks."""
    layout = TopologyLayout("live", topology, int(conf.get(cfg.TOPOLOGY_ACKER_EXECUTORS, 1)))
    plan = executor_plan(topology, layout)
    mine = [entry for entry in plan if entry[0] == component]
    left_out = mine[executor]
    return [entry for entry in plan if entry is not left_out], list(left_out[1])


def task_ids(executor) -> list[int]:
    return [task.task_id for task in executor.tasks]


def snapshot_tasks(runtime) -> set[int]:
    return {row["task"] for row in runtime.metrics_snapshot()["tasks"]}


@pytest.fixture(params=[True, False], ids=["shared-thread", "own-threads"])
def shared(request):
    return request.param


@pytest.fixture
def runtimes():
    """Starts nothing; stops, without waiting for trees, each runtime a test registers and
    started."""
    started: list[TopologyRuntime] = []
    yield started
    for runtime in started:
        if runtime.started_at is not None and not runtime.stopping.is_set():
            runtime.stop(wait_secs=0)


def test_an_added_bolt_executor_completes_trees_begun_before_it_and_the_rest_runs_on(shared,
                                                                                  runtimes):
    conf = {**BASE_CONF, cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared, "test.count": 40}
    b = TopologyBuilder()
    b.set_spout("source", Numbered())
    b.set_bolt("relay", Relay()).shuffle_grouping("source")
    b.set_bolt("sink", Sink(), parallelism=2).shuffle_grouping("relay").add_config(
        cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 0.05)
    topology = b.build()
    plan, moved = plan_without(topology, conf, "sink", 1)
    parked = Parking()
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: parked for task in moved})
    runtimes.append(runtime)
    runtime.start()
    (spout,), (relay,) = runtime.instances("source"), runtime.instances("relay")
    (first_sink,) = runtime.instances("sink")
    wait_until(lambda: spout.emits == 40 and relay.executed == 40 and parked.data_for(moved),
               10, "every tuple through the relay, some to the sink that is not here")
    assert len(spout.acks) < 40 and runtime.in_flight() > 0   # those trees wait for the sink
    before = {executor: executor.runner for executor in runtime.all_executors()}
    assert snapshot_tasks(runtime).isdisjoint(moved)

    runtime.add_executors([("sink", moved)])
    assert runtime.local_tasks.issuperset(moved)
    assert all(runtime.routes[task] is not parked for task in moved)
    parked.hand_on(runtime.routes)   # what waited for the sink goes on to it, now here

    wait_until(lambda: len(spout.acks) == 40, 10, "every message acked")
    # The trees begun before the add were kept and completed: nothing failed or was replayed.
    assert spout.fails == [] and spout.emits == 40 and spout.acks == set(range(40))
    assert spout.opens == 1 and relay.prepares == 1 and first_sink.prepares == 1
    for executor, runner in before.items():
        assert not executor.finished.is_set() and executor.runner.is_alive()
        if not shared:   # (a shared thread may hand its executors to a successor: runner.py)
            assert executor.runner is runner
    assert runtime.instances("source") == [spout] and runtime.instances("relay") == [relay]

    new_sink = [s for s in runtime.instances("sink") if s is not first_sink]
    assert len(new_sink) == 1 and new_sink[0].prepares == 1
    assert first_sink.executed + new_sink[0].executed == 40 and new_sink[0].executed > 0
    wait_until(lambda: new_sink[0].ticks >= 2, 5, "tick tuples for the added sink")
    assert runtime.summary()["sink"]["tasks"] == 2
    assert snapshot_tasks(runtime).issuperset(moved)
    assert any(set(moved) & {t.task_id for t in e.tasks} for e in runtime._watchdog.executors)

    runtime.stop()
    assert new_sink[0].cleaned and first_sink.cleaned and spout.closed


def test_a_removed_bolt_executor_is_cleaned_up_while_the_others_run_on(shared, runtimes):
    # Endless, but slow enough that the trees parked with the removed tasks (which never
    # complete here) stay few.
    conf = {**BASE_CONF, cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared, "test.raise_once": True,
            "test.every": 0.001}
    b = TopologyBuilder()
    b.set_spout("source", Numbered())
    b.set_bolt("relay", Relay(), parallelism=2).set_num_tasks(4).shuffle_grouping("source")
    b.set_bolt("sink", Sink()).shuffle_grouping("relay")
    runtime = TopologyRuntime("live", b.build(), conf)
    runtimes.append(runtime)
    runtime.start()
    (spout,), (sink,) = runtime.instances("source"), runtime.instances("sink")
    staying, leaving = runtime.executors["relay"]
    leaving_tasks, staying_tasks = task_ids(leaving), task_ids(staying)
    relays = {task.task_id: task.obj for task in staying.tasks + leaving.tasks}
    wait_until(lambda: all(r.executed > 5 for r in relays.values()) and sink.executed > 20, 10,
               "tuples through every relay task to the sink")
    assert {e.task for e in runtime.errors()} >= set(leaving_tasks)   # each raised once
    parked = Parking()

    with pytest.raises(ValueError, match=re.escape(leaving.name)):
        runtime.remove_executors({leaving_tasks[0]}, {leaving_tasks[0]: parked})
    assert not leaving.finished.is_set() and runtime.routes[leaving_tasks[0]] is leaving.inbox

    runtime.remove_executors(set(leaving_tasks), {task: parked for task in leaving_tasks})
    assert leaving.finished.is_set()
    assert all(relays[task].cleaned for task in leaving_tasks)
    assert not any(relays[task].cleaned for task in staying_tasks)
    wait_until(lambda: parked.data_for(leaving_tasks) > 0, 5,
               "tuples for the removed tasks at their new route")
    # The others run on, the same executors: the staying relay, the sink and the spout.
    executed, acked = sink.executed, len(spout.acks)
    wait_until(lambda: sink.executed > executed + 20 and len(spout.acks) > acked + 20, 10,
               "the sink and the spout going on after the removal")
    assert not staying.finished.is_set() and staying.runner.is_alive()
    assert spout.opens == 1 and sink.prepares == 1
    assert all(relays[task].prepares == 1 for task in staying_tasks)
    # Nothing here speaks for the removed executor any more.
    assert runtime.local_tasks.isdisjoint(leaving_tasks)
    assert runtime.executors["relay"] == [staying]
    assert runtime.summary()["relay"]["tasks"] == 2
    assert snapshot_tasks(runtime).isdisjoint(leaving_tasks)
    assert {e.task for e in runtime.errors()}.isdisjoint(leaving_tasks)
    assert leaving not in runtime._watchdog.executors
    assert runtime.instances("relay") == [relays[task] for task in staying_tasks]


def test_a_spout_executor_added_then_removed_is_opened_activated_and_closed_with_its_commit(
        runtimes):
    conf = {**BASE_CONF, "test.count": 20}
    b = TopologyBuilder()
    b.set_spout("source", Numbered(), parallelism=2)
    b.set_bolt("sink", Sink()).shuffle_grouping("source")
    topology = b.build()
    plan, moved = plan_without(topology, conf, "source", 1)
    parked = Parking()
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: parked for task in moved})
    runtimes.append(runtime)
    runtime.start()
    (first,) = runtime.instances("source")
    wait_until(lambda: len(first.acks) == 20, 10, "the first spout's messages acked")

    runtime.add_executors([("source", moved)])
    (added,) = [s for s in runtime.instances("source") if s is not first]
    wait_until(lambda: len(added.acks) == 20, 10, "the added spout's messages acked")
    assert added.opens == 1 and added.activations == 1
    assert runtime.summary()["source"]["tasks"] == 2

    runtime.remove_executors(set(moved), {task: parked for task in moved})
    assert added.closed and added.commits == [20] and added.deactivations == 1
    assert runtime.instances("source") == [first]
    assert not first.closed and first.opens == 1 and first.deactivations == 0
    assert runtime.summary()["source"]["tasks"] == 1
    assert snapshot_tasks(runtime).isdisjoint(moved)
    runtime.stop()
    assert first.commits == [20]


def test_a_spout_added_to_a_deactivated_topology_waits_for_activate(runtimes):
    conf = {**BASE_CONF, "test.count": 5}
    b = TopologyBuilder()
    b.set_spout("source", Numbered(), parallelism=2)
    b.set_bolt("sink", Sink()).shuffle_grouping("source")
    topology = b.build()
    plan, moved = plan_without(topology, conf, "source", 1)
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: Parking() for task in moved})
    runtimes.append(runtime)
    runtime.start(active=False)
    runtime.add_executors([("source", moved)])
    (first, added) = runtime.instances("source")
    time.sleep(0.2)   # long enough for an activated spout to emit its five
    assert first.emits == added.emits == 0
    runtime.activate()
    wait_until(lambda: len(first.acks) == len(added.acks) == 5, 10, "both spouts' messages acked")
    assert added.activations == 1


def test_an_added_acker_completes_the_trees_begun_before_it(shared, runtimes):
    conf = {**BASE_CONF, cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared, "test.count": 30}
    b = TopologyBuilder()
    b.set_spout("source", Numbered())
    b.set_bolt("sink", Sink()).shuffle_grouping("source")
    topology = b.build()
    plan, moved = plan_without(topology, conf, ACKER_COMPONENT, 0)
    parked = Parking()
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: parked for task in moved})
    runtimes.append(runtime)
    runtime.start()
    (spout,), (sink,) = runtime.instances("source"), runtime.instances("sink")
    wait_until(lambda: sink.executed == 30, 10, "every tuple at the sink")
    assert not spout.acks   # their inits and acks went to the acker elsewhere

    runtime.add_executors([(ACKER_COMPONENT, moved)])
    parked.hand_on(runtime.routes)
    wait_until(lambda: len(spout.acks) == 30, 10, "every message acked by the added acker")
    assert spout.fails == [] and spout.emits == 30
    assert runtime.summary()[ACKER_COMPONENT]["tasks"] == 1


def test_changes_that_make_no_sense_are_refused_and_change_nothing(runtimes):
    conf = {**BASE_CONF, "test.count": 1}
    b = TopologyBuilder()
    b.set_spout("source", Numbered())
    b.set_bolt("sink", Sink(), parallelism=2).set_num_tasks(4).shuffle_grouping("source")
    topology = b.build()
    plan, moved = plan_without(topology, conf, "sink", 1)
    parked = Parking()
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: parked for task in moved})
    runtimes.append(runtime)
    (source_task,) = runtime.layout.component_tasks["source"]
    (here,) = [entry for entry in plan if entry[0] == "sink"]
    with pytest.raises(RuntimeError, match="before start"):
        runtime.add_executors([("sink", moved)])
    runtime.start()
    executors = runtime.all_executors()
    for bad, message in [
            ([("nowhere", [1])], "no component 'nowhere'"),
            ([("sink", [source_task])], f"tasks \\[{source_task}\\] are not tasks of 'sink'"),
            ([("sink", [moved[0]]), ("sink", moved)], "given to two executors"),
            ([("sink", [here[1][0], *moved])], "already run here"),
            ([("sink", [])], "at least one task")]:
        with pytest.raises(ValueError, match=message):
            runtime.add_executors(bad)
    runtime.add_executors([here])   # already here, as one executor: nothing to do
    assert runtime.all_executors() == executors
    with pytest.raises(ValueError, match="do not run here"):
        runtime.remove_executors(set(moved), {task: parked for task in moved})
    with pytest.raises(ValueError, match="no route given"):
        runtime.remove_executors(set(here[1]), {here[1][0]: parked})
    assert runtime.all_executors() == executors
    (sink_executor,) = runtime.executors["sink"]
    assert all(runtime.routes[task] is sink_executor.inbox for task in here[1])
    runtime.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        runtime.add_executors([("sink", moved)])
    with pytest.raises(RuntimeError, match="stopped"):
        runtime.remove_executors(set(here[1]), {task: parked for task in here[1]})


class Pass(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector):
        pass


def test_a_cycle_bolt_added_then_removed_joins_and_leaves_its_cycle_gate(runtimes):
    """Data entering a cycle waits while any of the cycle's inboxes here is full (CycleGate):
    a sender built before a cycle's executor came here must wait on it too, and stop waiting
    on it once it left."""
    b = TopologyBuilder()
    b.set_spout("source", Numbered())
    b.set_bolt("a", Pass()).shuffle_grouping("source").shuffle_grouping("b")
    b.set_bolt("b", Pass()).shuffle_grouping("a")
    topology = b.build()
    conf = {**BASE_CONF, "test.count": 1}
    plan, moved = plan_without(topology, conf, "a", 0)
    parked = Parking()
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: parked for task in moved})
    runtimes.append(runtime)
    runtime.start()
    (spout,) = runtime.executors["source"]
    (b_executor,) = runtime.executors["b"]
    entry = spout.tasks[0].transfer.entry_gates
    assert not entry   # "a" runs elsewhere: nothing to wait on here
    b_gates = b_executor.tasks[0].transfer.entry_gates

    runtime.add_executors([("a", moved)])
    (a_executor,) = runtime.executors["a"]
    gate = entry[moved[0]]
    assert gate.inboxes == [b_executor.inbox, a_executor.inbox]
    assert not b_gates   # "b" is on the cycle: its data for "a" never waits on the gate

    runtime.remove_executors(set(moved), {task: parked for task in moved})
    assert not entry and gate.inboxes == [b_executor.inbox]


def test_readers_on_other_threads_see_whole_states_while_executors_come_and_go(shared,
                                                                               runtimes):
    conf = {**BASE_CONF, cfg.STORMLET_EXECUTOR_SHARED_THREAD: shared, "test.every": 0.001}
    b = TopologyBuilder()
    b.set_spout("source", Numbered())
    b.set_bolt("sink", Sink(), parallelism=2).shuffle_grouping("source").add_config(
        cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 0.01)
    topology = b.build()
    plan, moved = plan_without(topology, conf, "sink", 1)
    parked = Parking()
    runtime = TopologyRuntime("live", topology, conf, plan=plan,
                              remote_routes={task: parked for task in moved})
    runtimes.append(runtime)
    runtime.start()
    problems: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                rows = runtime.metrics_snapshot()["tasks"]
                assert {row["task"] for row in rows} <= set(runtime.layout.task_component)
                runtime.summary(), runtime.errors(), runtime.in_flight()
                runtime.sample_windows(time.monotonic())
            except BaseException as exc:
                problems.append(exc)
                return

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for _ in range(5):
            runtime.add_executors([("sink", moved)])
            assert moved[0] in snapshot_tasks(runtime)
            runtime.remove_executors(set(moved), {task: parked for task in moved})
            assert moved[0] not in snapshot_tasks(runtime)
    finally:
        done.set()
        for reader in readers:
            reader.join(10)
    assert problems == []
    (spout,) = runtime.instances("source")
    acked = len(spout.acks)
    wait_until(lambda: len(spout.acks) > acked + 10, 10, "the topology going on")
    assert spout.opens == 1 and len(runtime.all_executors()) == len(plan)
