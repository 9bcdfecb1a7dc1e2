import time

from recorder import record
from streamparse import ReliableSpout


class NumberSpout(ReliableSpout):
    """Emits 0..test.count-1 once each, tracked by the number; replays failures."""

    outputs = ["n"]
    max_fails = 2

    def initialize(self, storm_conf, context):
        self.count = int(storm_conf.get("test.count", 100))
        self.next = 0

    def next_tuple(self):
        if self.next >= self.count:
            time.sleep(0.005)
            return
        self.emit([self.next], tup_id=self.next)
        self.next += 1

    def ack(self, tup_id):
        record(self, "ack", n=tup_id)
        super().ack(tup_id)

    def fail(self, tup_id):
        record(self, "fail", n=tup_id)
        super().fail(tup_id)
