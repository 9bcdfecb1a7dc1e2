import time

from recorder import record
from streamparse import Spout, Stream


class NumberedSpout(Spout):
    """Emits 0..19 on the default stream and [n, n*n] on the "squares" stream, all tracked."""

    outputs = [Stream(["n"]), Stream(["n", "square"], name="squares")]

    def initialize(self, storm_conf, context):
        self.next = 0

    def next_tuple(self):
        if self.next >= 20:
            time.sleep(0.005)
            return
        n = self.next
        self.emit([n], tup_id=f"n{n}")
        self.emit([n, n * n], tup_id=f"s{n}", stream="squares")
        self.next += 1

    def ack(self, tup_id):
        record(self, "ack", id=tup_id)
