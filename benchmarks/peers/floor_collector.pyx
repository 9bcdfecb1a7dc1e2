# cython: language_level=3
"""The least a runtime can do around stormlet's own bolts, compiled (run_floor.py builds it with
pyximport): an emit makes the tuple the next bolt receives, from stormlet's compiled ``Tuple``,
and keeps it in a list. No routing, acking, queue, thread or metric; the value check every emit of
stormlet makes (``serialization.checked``) only when asked for."""

from stormlet.runtime.serialization cimport checked
from stormlet.tuples cimport StreamInfo, untracked


cdef class Collector:
    """What one component emits into: the tuples of its one stream, kept until taken."""
    cdef list emitted
    cdef StreamInfo info
    cdef bint check_values

    def __init__(self, StreamInfo info, bint check_values=False):
        self.emitted = []
        self.info = info
        self.check_values = check_values

    def emit(self, values, anchors=None, msg_id=None, stream=None):
        """A bolt's ``emit(values, anchor)`` or a spout's ``emit(values, msg_id=...)`` (by
        keyword: a spout collector's second parameter is the msg id): the tuple the next
        component receives. Anchors and msg ids are ignored: nothing is tracked."""
        if self.check_values:
            values = checked(values, self.info, self.info.component)
        self.emitted.append(untracked(values, self.info, 0))

    def ack(self, tup):
        """Nothing: nothing is tracked."""

    cdef list take(self):
        emitted = self.emitted
        self.emitted = []
        return emitted


def run(spout, Collector spout_out, split, Collector split_out, count, long sentences,
        long burst):
    """Calls ``spout.next_tuple`` ``sentences`` times, ``burst`` at a time; after each burst,
    the split bolt's ``execute`` on each sentence, then the count bolt's on each word."""
    cdef long done = 0, i, calls
    next_tuple, split_execute, count_execute = spout.next_tuple, split.execute, count.execute
    while done < sentences:
        calls = min(burst, sentences - done)
        for i in range(calls):
            next_tuple()
        done += calls
        for tup in spout_out.take():
            split_execute(tup)
        for tup in split_out.take():
            count_execute(tup)
