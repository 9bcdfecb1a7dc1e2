"""A steady topology whose bolt logs a DEBUG line for every tuple it sees, for the tests of
run-time log levels and tuple sampling (tests/cluster/test_cluster_live_settings.py).

A spout emits a numbered word (with its number as the message id) every ``chatty.interval``
seconds; a bolt logs ``chatty saw <word>`` at DEBUG on the logger CHATTY_LOGGER, emits the word
upper-cased and acks; a sink acks. At the workers' default level (INFO) the lines are not
written: a test raises the logger's level to see them.
"""

from __future__ import annotations

import logging
import time

from stormlet import Bolt, Spout, TopologyBuilder

CHATTY_LOGGER = "chatty.bolt"
LINE = "chatty saw"
log = logging.getLogger(CHATTY_LOGGER)


class Words(Spout):
    outputs = ["word"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.interval = float(conf.get("chatty.interval", 0.05))
        self.n = 0
        self.next_at = time.monotonic()

    def next_tuple(self):
        if time.monotonic() < self.next_at:
            time.sleep(0.005)
            return
        self.next_at += self.interval
        self.n += 1
        self.collector.emit([f"word{self.n}"], msg_id=self.n)


class Chatty(Bolt):
    outputs = ["loud"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        log.debug("%s %s", LINE, tup[0])
        self.collector.emit([tup[0].upper()], tup)
        self.collector.ack(tup)


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("words", Words())
builder.set_bolt("chatty", Chatty()).shuffle_grouping("words")
builder.set_bolt("sink", Sink()).shuffle_grouping("chatty")
topology = builder.build()
