"""Event-time windows fed by spouts in two workers, for the cluster test of late tuples.

Spout task i emits ids i, i+2, i+4, ... below ``windows.count`` with event time
``BASE + id * 10`` ms. Once done, and ``windows.late_after`` seconds later, each emits one
more tuple, id -1 - i, stamped ``BASE + 5``: older than the watermark by then, so late (and with
the spouts in two workers and the window in one, at least one late tuple crosses workers).
``Totals`` (one task, tumbling 1 s event-time windows) sends each window's ids on; late tuples go to
its ``late`` stream. ``Record`` writes both, one JSON line each, to
``windows.dir``/out-<task>.jsonl.
"""

from __future__ import annotations

import json
import os
import time

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.windowing import Count, Duration, WindowedBolt

BASE = 1_700_000_000_000   # a multiple of the window length


class Stamped(Spout):
    outputs = ["id", "ts"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.index = context.this_task_index
        self.todo = list(range(self.index, int(conf["windows.count"]), 2))
        self.late_after = float(conf["windows.late_after"])
        self.done_at = None
        self.late_sent = False

    def next_tuple(self):
        if self.todo:
            msg_id = self.todo.pop(0)
            self.collector.emit([msg_id, BASE + msg_id * 10], msg_id=msg_id)
            return
        if self.done_at is None:
            self.done_at = time.monotonic()
        elif not self.late_sent and time.monotonic() - self.done_at > self.late_after:
            self.collector.emit([-1 - self.index, BASE + 5], msg_id=-1 - self.index)
            self.late_sent = True
        time.sleep(0.01)


class Totals(WindowedBolt):
    outputs = ["start", "end", "ids"]

    def execute(self, window):
        self.collector.emit([window.start, window.end, sorted(t["id"] for t in window.get())])


class Record(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.path = os.path.join(conf["windows.dir"], f"out-{context.task_id}.jsonl")

    def execute(self, tup):
        with open(self.path, "a") as f:
            f.write(json.dumps({"component": tup.source_component, "stream": tup.stream,
                                "values": list(tup.values)}) + "\n")
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("stamped", Stamped(), parallelism=2)
builder.set_bolt("totals", Totals().with_tumbling_window(Duration(seconds=1))
                 .with_timestamp_field("ts").with_watermark_interval(Duration(ms=200))
                 .with_late_tuple_stream("late")).global_grouping("stamped")
builder.set_bolt("counted", Totals().with_tumbling_window(Count(50))).global_grouping("stamped")
builder.set_bolt("record", Record()).global_grouping("totals").global_grouping("totals", "late") \
    .global_grouping("counted")
topology = builder.build()

config = {"topology.message.timeout.secs": 20, "windows.count": 300, "windows.late_after": 3}
