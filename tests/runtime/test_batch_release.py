"""A bolt lets go of a batch once it has run it, not when the next message comes: held, each
bolt kept two batches alive, their tuples freed only after the next batch was made, in memory
the core's cache no longer held. The executor is driven by hand in the test's thread."""

from __future__ import annotations

import sys

from test_transfer_batch import WORDS_PER_SENTENCE, runtime

from stormlet.runtime.protocol import DATA, SYSTEM_TASK
from stormlet.tuples import StreamInfo, Tuple


def test_a_bolt_holds_no_reference_to_a_batch_it_has_run():
    rt = runtime()
    (split,) = rt.executors["split"]
    (split_task,) = split.tasks
    info = StreamInfo("sentences", "default", ["sentence"])
    batch = [Tuple([" ".join(["w"] * WORDS_PER_SENTENCE)], info, 1, None) for _ in range(3)]
    alone = sys.getrefcount(batch)   # this test's own name for it, and the call's argument
    steps = split.steps()
    next(steps)   # prepared, waiting for a message
    message = (DATA, split_task.task_id, SYSTEM_TASK, batch)
    steps.send(message)   # runs the batch, flushes its words, waits for the next message
    del message
    assert sys.getrefcount(batch) == alone
    steps.close()
