"""topology.transfer.batch.size: how many tuples a task buffers for one destination before it
hands them over, whatever its executor's flush would do. The executors are driven by hand in
the test's thread, so each handover is seen as it lands in the next executor's inbox."""

from __future__ import annotations

import itertools

import pytest

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.runtime.engine import TopologyRuntime
from stormlet.runtime.protocol import DATA, STOP, SYSTEM_TASK
from stormlet.runtime.threads import OwnThread
from stormlet.tuples import StreamInfo, Tuple

WORDS_PER_SENTENCE = 5
DEFAULT = object()   # the configuration leaves the batch size out


class Sentences(Spout):
    outputs = {"default": ["sentence"]}

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = itertools.count()

    def next_tuple(self):
        self.collector.emit([" ".join(["w"] * WORDS_PER_SENTENCE)], msg_id=next(self.n))


class Split(Bolt):
    outputs = {"default": ["word"]}

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        for word in tup.values[0].split():
            self.collector.emit([word])


class Sink(Bolt):
    def execute(self, tup):
        pass


def runtime(batch_size=DEFAULT) -> TopologyRuntime:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", Split()).shuffle_grouping("sentences")
    builder.set_bolt("sink", Sink()).shuffle_grouping("split")
    # Inboxes with room for every handover: nothing takes from them while the test looks.
    # Its executors run on the test's thread, one at a time, as executors of their own threads.
    conf = {cfg.TOPOLOGY_ACKER_EXECUTORS: 0, cfg.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE: 64,
            cfg.STORMLET_EXECUTOR_SHARED_THREAD: False}
    if batch_size is not DEFAULT:
        conf[cfg.TOPOLOGY_TRANSFER_BATCH_SIZE] = batch_size
    return TopologyRuntime("batches", builder.build(), conf)


def handovers(inbox) -> list[int]:
    """The size of each data batch waiting in ``inbox``, in order."""
    sizes = []
    while not inbox.empty():
        kind, _dest, _src, batch = inbox.get_nowait()
        assert kind == DATA
        sizes.append(len(batch))
    return sizes


@pytest.mark.parametrize("batch_size, expected", [
    (10, [10, 10, 10, 10]),   # handed over after every second sentence
    (12, [15, 15, 10]),       # after the sentence that reaches 12
    (DEFAULT, [40]),          # 512, never reached: one flush after the eighth batch
])
def test_a_bolt_hands_a_destination_its_buffer_once_it_holds_a_transfer_batch(
        batch_size, expected):
    rt = runtime(batch_size)
    (split,) = rt.executors["split"]
    (sink,) = rt.executors["sink"]
    (split_task,) = split.tasks
    info = StreamInfo("sentences", "default", ["sentence"])
    # Eight one-sentence batches waiting at once, as when the executor is busy: without a
    # transfer batch it flushes after the eighth (executor.FLUSH_EVERY).
    for _ in range(8):
        split.inbox.put((DATA, split_task.task_id, SYSTEM_TASK,
                         [Tuple([" ".join(["w"] * WORDS_PER_SENTENCE)], info, 1, None)]))
    split.inbox.put((STOP, SYSTEM_TASK, SYSTEM_TASK, None))
    OwnThread(split, None).run()   # here, until the STOP
    assert handovers(sink.inbox) == expected


@pytest.mark.parametrize("batch_size, expected", [(7, 7), (DEFAULT, 100)])
def test_a_spout_burst_ends_once_it_emitted_a_transfer_batch(batch_size, expected):
    rt = runtime(batch_size)
    (spout,) = rt.executors["sentences"]
    (task,) = spout.tasks
    task.open()
    assert task.emit_burst() == expected   # without one, a burst is 100 next_tuple calls
    task.transfer.flush()
    (split,) = rt.executors["split"]
    assert handovers(split.inbox) == [expected]


@pytest.mark.parametrize("value", [0, -3, 2.5, float("inf"), float("nan"), "512", True])
def test_a_transfer_batch_that_is_not_a_whole_number_of_tuples_is_refused(value):
    with pytest.raises(ValueError, match=r"topology.transfer.batch.size must be a whole number "
                                         r"of tuples, at least 1 and at most 2\*\*62 \(or None "
                                         r"for no bound\), not "):
        runtime(value)


def test_no_transfer_batch_leaves_the_flushes_to_the_executor():
    rt = runtime(None)
    (split,) = rt.executors["split"]
    (task,) = split.tasks
    task.transfer.data[task.transfer.data_targets[0]].extend([None] * 100_000)
    assert not task.transfer.has_full_batch()


def test_a_spout_burst_ends_at_the_call_during_which_its_executor_was_deactivated():
    # Issue 51: a worker fenced off from ZooKeeper deactivates its spouts, but a spout whose
    # next_tuple was blocked (on a commit to the ZooKeeper it cannot reach) when the fence came
    # went on with its burst: a transfer batch of tuples after the fence.
    rt = runtime(DEFAULT)
    (spout,) = rt.executors["sentences"]
    (task,) = spout.tasks
    task.open()
    spout.want_active = True
    calls = 0
    next_tuple = task.obj.next_tuple

    def fenced_on_the_third_call() -> None:
        nonlocal calls
        calls += 1
        next_tuple()
        if calls == 3:
            spout.want_active = False   # as ask_active(False) from the fencing thread
    task.obj.next_tuple = fenced_on_the_third_call
    assert task.emit_burst(spout) == 3
