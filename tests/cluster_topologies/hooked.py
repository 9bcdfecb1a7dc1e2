"""Task hooks on a cluster, for the cluster test of hooks: every task of every component has
a ``FileHook`` (``topology.auto.task.hooks``), which writes each event it sees as a JSON line
to ``hooks.dir``/hooks-<task>.jsonl.

``Ids`` (two tasks) emits ids below ``hooks.count`` tracked, replaying a failed one unless it
ends in 7 (a tree lost to a worker's start is replayed); ``Judge`` (two tasks)
fails the ids ending in 7 and acks the others, emitting each one it acks to ``Tail``, a
``BasicBolt``.
"""

from __future__ import annotations

import json
import os

from stormlet import BasicBolt, Bolt, Spout, TopologyBuilder
from stormlet.hooks import TaskHook


class FileHook(TaskHook):
    def prepare(self, conf, context):
        self.component = context.component_id
        self.task = context.task_id
        path = os.path.join(conf["hooks.dir"], f"hooks-{self.task}.jsonl")
        self.file = open(path, "a")

    def _write(self, event, **fields):
        self.file.write(json.dumps({"component": self.component, "task": self.task,
                                    "event": event, **fields}) + "\n")
        self.file.flush()

    def emit(self, info):
        self._write("emit", values=list(info.values), stream=info.stream,
                    out_tasks=list(info.out_tasks), from_task=info.task_id)

    def spout_ack(self, info):
        self._write("spout_ack", id=info.message_id, latency=info.complete_latency_ms)

    def spout_fail(self, info):
        self._write("spout_fail", id=info.message_id, kind=info.reason.kind)

    def bolt_execute(self, info):
        self._write("bolt_execute", id=info.tuple[0])

    def bolt_ack(self, info):
        self._write("bolt_ack", id=info.tuple[0])

    def bolt_fail(self, info):
        self._write("bolt_fail", id=info.tuple[0], reason=info.reason)


class Ids(Spout):
    outputs = ["id"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = list(range(context.this_task_index, int(conf["hooks.count"]), 2))

    def next_tuple(self):
        if self.todo:
            msg_id = self.todo.pop(0)
            self.collector.emit([msg_id], msg_id=msg_id)

    def fail(self, msg_id, reason):
        if msg_id % 10 != 7:
            self.todo.append(msg_id)


class Judge(Bolt):
    outputs = ["id"]

    def execute(self, tup):
        if tup[0] % 10 == 7:
            self.collector.fail(tup, "ends in 7")
        else:
            self.collector.emit([tup[0]], tup)
            self.collector.ack(tup)


class Tail(BasicBolt):
    def execute(self, tup, collector):
        pass


builder = TopologyBuilder()
builder.set_spout("ids", Ids(), parallelism=2)
builder.set_bolt("judge", Judge(), parallelism=2).shuffle_grouping("ids")
builder.set_bolt("tail", Tail()).shuffle_grouping("judge")
topology = builder.build()

config = {"topology.auto.task.hooks": ["hooked.FileHook"], "hooks.count": 100}
