from recorder import record
from streamparse import BatchingBolt, TicklessBatchingBolt


class FirstLetterBatcher(BatchingBolt):
    """Batches words by their first letter, every tick tuple (a fifth of a second)."""

    outputs = ["letter", "count"]
    config = {"topology.tick.tuple.freq.secs": 0.2}

    def group_key(self, tup):
        return tup.values.word[0]

    def process_batch(self, key, tups):
        record(self, "batch", key=key, words=[t.values.word for t in tups])
        self.emit([key, len(tups)])


class TimedBatcher(TicklessBatchingBolt):
    """One batch of whatever came in every 0.3 s."""

    secs_between_batches = 0.3

    def process_batch(self, key, tups):
        record(self, "batch", key=key, words=[t.values.word for t in tups])
