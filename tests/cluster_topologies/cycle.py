"""Bolts that feed each other in a cycle, for the tests of cycles under backpressure
(tests/runtime/test_cycles.py runs it locally, tests/cluster/test_cluster.py on two workers).

The spout emits ``test.count`` numbers as ``[n, 0]``, tracked unless ``test.untracked``. The
fan-out bolt emits each input three times, one lap further on; the back bolt sends each back to
it until its fourth lap. Two tasks each, so on two workers the cycle crosses between them.
"""

from __future__ import annotations

from stormlet import Bolt, Spout, TopologyBuilder

FAN_OUT = 3     # the loop bolt's emits per input
LAPS = 4        # how many times a tuple goes round the cycle


class Numbers(Spout):
    """Emits ``test.count`` numbers, tracked unless ``test.untracked``, as ``[n, 0]``; a failed
    one is emitted again, as a reliable spout replays (on a cluster a tree can time out when a
    frame reaches a worker still running a killed topology on the same port)."""

    outputs = ["n", "laps"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.count = int(conf["test.count"])
        self.tracked = not conf.get("test.untracked")
        self.emitted = self.acked = 0
        self.failures: list[str] = []
        self.replays: list[int] = []

    def next_tuple(self):
        if self.replays:
            n = self.replays.pop()
        elif self.emitted < self.count:
            self.emitted += 1
            n = self.emitted
        else:
            return
        self.collector.emit([n, 0], msg_id=n if self.tracked else None)

    def ack(self, msg_id):
        self.acked += 1

    def fail(self, msg_id, reason):
        self.failures.append(str(reason))
        self.replays.append(msg_id)


class LapBolt(Bolt):
    """Counts what it executes, emits what ``onward`` returns anchored to the input, and acks."""

    outputs = ["n", "laps"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.executed = 0

    def execute(self, tup):
        self.executed += 1
        n, laps = tup.values
        for values in self.onward(n, laps):
            self.collector.emit(values, anchors=tup)
        self.collector.ack(tup)

    def onward(self, n: int, laps: int) -> list[list[int]]:
        raise NotImplementedError


class FanOut(LapBolt):
    """Emits each input ``FAN_OUT`` times, one lap further on."""

    def onward(self, n, laps):
        return [[n, laps + 1]] * FAN_OUT


class Back(LapBolt):
    """Sends an input back round the cycle until it has done ``LAPS`` laps."""

    def onward(self, n, laps):
        return [[n, laps]] if laps < LAPS else []


class Countdown(LapBolt):
    """Reads its own stream: sends each input back to itself, one lap further on, until it has
    done ``LAPS * FAN_OUT`` laps."""

    def onward(self, n, laps):
        return [[n, laps + 1]] if laps < LAPS * FAN_OUT else []


def loop_topology():
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("fan-out", FanOut(), parallelism=2) \
        .shuffle_grouping("numbers").shuffle_grouping("back")
    b.set_bolt("back", Back(), parallelism=2).shuffle_grouping("fan-out")
    return b.build()


def laps_of_fan_out():
    """How many tuples the fan-out bolt executes for one number: 1 + 3 + 9 + 27 (it emits three
    copies a lap and every copy comes back until its fourth lap)."""
    return sum(FAN_OUT ** lap for lap in range(LAPS))


topology = loop_topology()
# Inboxes of one batch and small batches: the cycle fills them at once.
config = {"topology.workers": 2, "topology.executor.receive.buffer.size": 1,
          "topology.transfer.batch.size": 50, "topology.max.spout.pending": 500}


