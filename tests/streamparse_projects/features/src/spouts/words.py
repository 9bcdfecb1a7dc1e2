import time

from recorder import record
from streamparse import Spout

WORDS = ("apple avocado banana blueberry cherry cranberry date dragonfruit elderberry fig "
         "grape guava kiwi lemon lime mango melon nectarine orange papaya peach pear plum "
         "quince raspberry strawberry tangerine ugli vanilla watermelon").split()


class WordSpout(Spout):
    """Emits test.rounds rounds of WORDS, each tracked by its position; records acks and fails."""

    outputs = ["word"]

    def initialize(self, storm_conf, context):
        self.words = WORDS * int(storm_conf.get("test.rounds", 2))
        self.next = 0

    def next_tuple(self):
        if self.next >= len(self.words):
            time.sleep(0.005)
            return
        self.emit([self.words[self.next]], tup_id=self.next)
        self.next += 1

    def ack(self, tup_id):
        record(self, "ack", id=tup_id)

    def fail(self, tup_id):
        record(self, "fail", id=tup_id)
