"""The topology the chaos suite runs: a reliable pipeline over a live, replayable source.

An offset-tracking spout tails a 4-partition local log that the harness keeps appending to; a
relay bolt passes each message on (shuffle), and a sink (fields grouping) appends the message's
id to ``seen-<task>.log`` in ``chaos.dir`` with one unbuffered write per tuple, before acking,
so an acked message is always on disk. Retries never give up (``max_attempts=None``): in a chaos
run every message must end up acked, and the spout's committed offsets reaching the log's end
prove it. Ids are fixed-width (``ID_WIDTH`` bytes per line), so a file's size counts its lines.
"""

from __future__ import annotations

import os

from stormlet import Bolt, TopologyBuilder
from stormlet.sources import LogSpout, RetryPolicy

ID_WIDTH = 10  # nine digits and a newline


class Relay(Bolt):
    outputs = ["id"]

    def execute(self, tup):
        self.collector.emit([tup["value"]], anchors=[tup])
        self.collector.ack(tup)


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        path = os.path.join(conf["chaos.dir"], f"seen-{context.task_id}.log")
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def execute(self, tup):
        os.write(self.fd, f"{tup['id']}\n".encode())
        self.collector.ack(tup)

    def cleanup(self):
        os.close(self.fd)


spout = LogSpout(path_config="chaos.log", spout_id="chaos", commit_interval=1.0,
                 retry=RetryPolicy(initial_delay=0.5, multiplier=2.0, max_delay=5.0,
                                   max_attempts=None))

builder = TopologyBuilder()
builder.set_spout("source", spout, parallelism=2)
builder.set_bolt("relay", Relay(), parallelism=2).shuffle_grouping("source")
builder.set_bolt("sink", Sink(), parallelism=2).fields_grouping("relay", ["id"])
topology = builder.build()

config = {"topology.message.timeout.secs": 5, "topology.max.spout.pending": 500}
