"""Task hooks (stormlet/hooks.py, runtime/task_hooks.py): in local mode a hook sees every emit,
execute, ack and fail of spouts, bolts and basic bolts with their info objects, added per
component (``context.add_task_hook``) or for all (``topology.auto.task.hooks``); a task with
no hooks runs its usual paths, nothing swapped in."""

from __future__ import annotations

import threading

import pytest
from support import running, wait_until

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder
from stormlet.errors import TopologyError
from stormlet.hooks import (
    BoltAckInfo,
    BoltExecuteInfo,
    BoltFailInfo,
    EmitInfo,
    SpoutAckInfo,
    SpoutFailInfo,
    TaskHook,
)
from stormlet.runtime.task_hooks import load_hook

# What every Recorder saw, in order: (component, task, event, info).
EVENTS: list[tuple] = []
LOCK = threading.Lock()


class Recorder(TaskHook):
    def prepare(self, conf, context):
        self.where = (context.component_id, context.task_id)
        self._add("prepare", None)

    def _add(self, event, info):
        with LOCK:
            EVENTS.append((*self.where, event, info))

    def cleanup(self):
        self._add("cleanup", None)

    def emit(self, info):
        self._add("emit", info)

    def spout_ack(self, info):
        self._add("spout_ack", info)

    def spout_fail(self, info):
        self._add("spout_fail", info)

    def bolt_execute(self, info):
        self._add("bolt_execute", info)

    def bolt_ack(self, info):
        self._add("bolt_ack", info)

    def bolt_fail(self, info):
        self._add("bolt_fail", info)


def events(component, event=None):
    with LOCK:
        return [(e, info) for c, _t, e, info in EVENTS
                if c == component and (event is None or e == event)]


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.next_n = 0
        self.count = conf["test.count"]
        self.acked, self.failed = [], []
        if conf.get("test.own_hook"):
            context.add_task_hook(Recorder())

    def next_tuple(self):
        if self.next_n < self.count:
            self.collector.emit([self.next_n], msg_id=self.next_n)
            self.next_n += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append(msg_id)


class Judge(Bolt):
    """Doubles each number; fails 3, raises on 5, acks the rest."""

    outputs = ["n"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        if conf.get("test.own_hook"):
            context.add_task_hook(Recorder())

    def execute(self, tup):
        n = tup[0]
        if n == 3:
            self.collector.fail(tup, "three")
            return
        if n == 5:
            raise ValueError("five")
        self.collector.emit([n * 2], tup)
        self.collector.ack(tup)


class Plus(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector):
        collector.emit([tup[0] + 1])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("judge", Judge()).shuffle_grouping("numbers")
    builder.set_bolt("plus", Plus()).shuffle_grouping("judge")
    return builder.build()


@pytest.fixture(autouse=True)
def clear_events():
    EVENTS.clear()
    yield
    EVENTS.clear()


def check_every_event(cluster, count, basic):
    spout = cluster.instances("test", "numbers")[0]
    wait_until(lambda: len(spout.acked) + len(spout.failed) == count, 10, "every verdict")
    assert sorted(spout.failed) == [3, 5]
    wait_until(lambda: len(events("numbers", "spout_fail")) == 2
               and len(events("numbers", "spout_ack")) == count - 2, 10, "the spout's hooks")
    # The spout: an emit of each number, an ack or a fail of each.
    emits = [info for _, info in events("numbers", "emit")]
    assert [(i.values, i.stream) for i in emits] == [([n], "default") for n in range(count)]
    assert all(isinstance(i, EmitInfo) and len(i.out_tasks) == 1 for i in emits)
    acks = [info for _, info in events("numbers", "spout_ack")]
    assert sorted(i.message_id for i in acks) == [n for n in range(count) if n not in (3, 5)]
    assert all(isinstance(i, SpoutAckInfo) and i.complete_latency_ms >= 0 for i in acks)
    fails = {i.message_id: i for _, i in events("numbers", "spout_fail")}
    assert all(isinstance(i, SpoutFailInfo) for i in fails.values())
    assert (fails[3].reason.kind, fails[3].reason.message) == ("fail", "three")
    assert fails[5].reason.kind == "error" and "five" in fails[5].reason.message
    # The bolt: an execute of each input that returned (not 5's), ack, fail and error-fail.
    executed = [i.tuple[0] for _, i in events("judge", "bolt_execute")]
    assert sorted(executed) == [n for n in range(count) if n != 5]
    assert all(isinstance(i, BoltExecuteInfo) and i.execute_latency_ms >= 0
               for _, i in events("judge", "bolt_execute"))
    acked = [i for _, i in events("judge", "bolt_ack")]
    assert sorted(i.tuple[0] for i in acked) == [n for n in range(count) if n not in (3, 5)]
    assert all(isinstance(i, BoltAckInfo) and i.process_latency_ms >= 0 for i in acked)
    failed = {i.tuple[0]: i for _, i in events("judge", "bolt_fail")}
    assert all(isinstance(i, BoltFailInfo) for i in failed.values())
    assert failed[3].reason == "three" and failed[5].reason == "ValueError: five"
    assert sorted(i.values[0] for _, i in events("judge", "emit")) == [
        n * 2 for n in range(count) if n not in (3, 5)]
    # Each info names the task whose hook saw it.
    with LOCK:
        for _c, task, event, info in EVENTS:
            named = {"emit": "task_id", "spout_ack": "spout_task_id",
                     "spout_fail": "spout_task_id", "bolt_execute": "executing_task_id",
                     "bolt_ack": "acking_task_id", "bolt_fail": "failing_task_id"}.get(event)
            assert named is None or getattr(info, named) == task
    if not basic:
        return
    # The basic bolt: its emits, executes and the runtime's acks of them.
    doubled = sorted(n * 2 for n in range(count) if n not in (3, 5))
    wait_until(lambda: len(events("plus", "bolt_ack")) == len(doubled), 10, "plus's acks")
    assert sorted(i.values[0] for _, i in events("plus", "emit")) == [n + 1 for n in doubled]
    assert sorted(i.tuple[0] for _, i in events("plus", "bolt_execute")) == doubled
    assert sorted(i.tuple[0] for _, i in events("plus", "bolt_ack")) == doubled


@pytest.mark.parametrize("how", ["auto", "own"])
def test_a_hook_sees_every_emit_execute_ack_and_fail(how):
    conf = {"test.count": 20, "topology.message.timeout.secs": 10}
    if how == "auto":
        conf["topology.auto.task.hooks"] = ["test_task_hooks.Recorder"]
    else:
        conf["test.own_hook"] = True
    with running(topology(), conf) as cluster:
        check_every_event(cluster, 20, basic=how == "auto")
        wanted = {"numbers", "judge"} | ({"plus"} if how == "auto" else set())
        assert {c for c, _t, e, _i in EVENTS if e == "prepare"} == wanted
        cluster.kill("test")
    assert {c for c, _t, e, _i in EVENTS if e == "cleanup"} == wanted


def test_without_hooks_nothing_is_swapped_in():
    with running(topology(), {"test.count": 5}) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        wait_until(lambda: len(spout.acked) + len(spout.failed) == 5, 10, "every verdict")
        tasks = [t for e in cluster._get("test").all_executors() for t in e.tasks
                 if hasattr(t, "collector")]
        assert len(tasks) == 3
        for task in tasks:
            assert task.collector.hooks is None
            assert "emit" not in vars(task.collector) and "ack" not in vars(task.collector)
            assert "on_acks" not in vars(task) and "_deliver_fail" not in vars(task)
            if hasattr(task, "execute"):   # a bolt's: the bolt's own, or the basic bolt's
                assert task.execute in (task.obj.execute, task._basic_execute)
    assert EVENTS == []


def test_a_hook_that_cannot_be_made_is_named():
    with pytest.raises(TopologyError, match="cannot make a hook of 'no_such_module.Hook'"):
        load_hook("no_such_module.Hook")
    with pytest.raises(TopologyError, match="'threading:Lock' is not a stormlet.hooks.TaskHook"):
        load_hook("threading:Lock")
    assert isinstance(load_hook("stormlet.hooks:TaskHook"), TaskHook)
