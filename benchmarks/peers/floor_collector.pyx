# cython: language_level=3
"""The least a runtime can do around stormlet's own bolts, compiled (run_floor.py builds it with
pyximport): an emit makes the tuple the next bolt receives, from stormlet's compiled ``Tuple``,
and keeps it in a list. No routing, value check, acking, queue, thread or metric."""

from stormlet.tuples cimport StreamInfo, untracked


cdef class Collector:
    cdef list emitted
    cdef StreamInfo info

    def __init__(self, StreamInfo info):
        self.emitted = []
        self.info = info

    def emit(self, values, anchors=None, stream=None, msg_id=None):
        self.emitted.append(untracked(values, self.info, 0))

    def ack(self, tup):
        pass

    cdef list take(self):
        emitted = self.emitted
        self.emitted = []
        return emitted


def run(spout, Collector spout_out, split, Collector split_out, count, long sentences,
        long burst):
    """Calls ``spout.next_tuple`` ``sentences`` times, ``burst`` at a time; after each burst,
    the split bolt's ``execute`` on each sentence, then the count bolt's on each word."""
    cdef long done = 0, i
    next_tuple, split_execute, count_execute = spout.next_tuple, split.execute, count.execute
    while done < sentences:
        for i in range(min(burst, sentences - done)):
            next_tuple()
        done += burst
        for tup in spout_out.take():
            split_execute(tup)
        for tup in split_out.take():
            count_execute(tup)
