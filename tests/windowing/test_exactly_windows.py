"""A count-windowed StatefulWindowedBolt (stormlet/state/windowed.py, with_persistence) in
``topology.guarantee: effectively-once``: over an offset spout, with failures injected, every
window's content and the bolt's state, as committed, equal a failure-free run's; and what the
mode cannot protect there (processing-time windows) is refused at submit, saying why."""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest
from support import InjectedFault, exactly_conf, running, wait_until

from stormlet import Bolt, TopologyBuilder
from stormlet.errors import TopologyError
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state import StatefulWindowedBolt
from stormlet.state.embedded import state_file
from stormlet.state.store import decode_key, decode_value
from stormlet.windowing import Count, Duration

SENTENCES = [f"s{i} w{i % 7} w{i % 3}" for i in range(400)]
# The log gets these once a checkpoint has committed windows, and the faults come among them:
# a recovery rolls back to some windows, not to none.
HALF = 200
LATE = set(SENTENCES[HALF:])
LATE_WORDS = {sentence.split()[0] for sentence in LATE}   # s200, s201...
WORDS = [word for sentence in SENTENCES for word in sentence.split()]
SIZE, SLIDE = 9, 4   # a sliding count window: each word is in two or three windows
FAULT = InjectedFault()



class Split(Bolt):
    outputs = ["word"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        for word in tup["value"].split():
            self.collector.emit([word], anchors=[tup])
        # After its words went on: only a rewind with the state keeps their effect once.
        if tup["value"] in LATE and FAULT.fire("split raises"):
            raise RuntimeError("injected in split")
        self.collector.ack(tup)


class Windows(StatefulWindowedBolt):
    """Keeps each window's words under its number, and how many words it saw in all."""

    outputs = ["n"]

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        n = self.state.get("windows", 0)
        words = [tup["word"] for tup in window.get_iter()]
        self.state.put(("window", n), words)
        self.state.put("windows", n + 1)
        if LATE_WORDS.intersection(words) and FAULT.fire("window raises"):
            raise RuntimeError("injected in the window")
        self.collector.emit([n])


def expected_state() -> dict:
    """A failure-free run's: the sliding count windows over the words in order."""
    state: dict = {}
    n = 0
    for end in range(SLIDE, len(WORDS) + 1, SLIDE):
        state[("window", n)] = WORDS[max(0, end - SIZE):end]
        n += 1
    state["windows"] = n
    return state


def topology(log_path, bolt=None, split_tasks=1):
    builder = TopologyBuilder()
    # One partition, one task on each path: the window sees one order, the log's.
    builder.set_spout("sentences", LogSpout(str(log_path), spout_id="windows",
                                            commit_interval=0.05))
    builder.set_bolt("split", Split(), parallelism=split_tasks).shuffle_grouping("sentences")
    bolt = bolt or Windows().with_window(Count(SIZE), Count(SLIDE)).with_persistence()
    builder.set_bolt("windows", bolt).shuffle_grouping("split")
    return builder.build()



def committed_state(state_dir) -> dict:
    path = state_file(state_dir, "test")
    if not path.exists():
        return {}
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE 'test/windows/%' AND ns NOT LIKE "
                          "'%/window'")   # the bolt's state, not its window's tuples
        return {_plain(decode_key(k)): decode_value(v) for k, v in rows}
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()


def _plain(key):
    return tuple(key) if isinstance(key, list) else key


def sentence_log(tmp_path):
    """The log with the first half of the sentences."""
    log_path = tmp_path / "log"
    log = PartitionedLog.create(log_path, 1)
    log.append_many(SENTENCES[:HALF])
    log.close()
    return log_path


def second_half(tmp_path) -> None:
    """Once a checkpoint has committed windows, the rest of the sentences."""
    wait_until(lambda: committed_state(tmp_path / "state").get("windows"), 30,
               "a checkpoint with windows")
    log = PartitionedLog(tmp_path / "log")
    log.append_many(SENTENCES[HALF:])
    log.close()


@pytest.mark.parametrize("fault", ["none", "split raises", "window raises"])
def test_every_window_and_the_state_equal_a_failure_free_runs_after_failures(tmp_path, fault):
    FAULT.arm(fault)
    log_path = sentence_log(tmp_path)
    expected = expected_state()
    wrong: list = []

    with running(topology(log_path), exactly_conf(tmp_path)) as cluster:
        [spout] = cluster.instances("test", "sentences")
        second_half(tmp_path)

        def done() -> bool:
            state = committed_state(tmp_path / "state")
            # Never a window that a failure-free run does not have, nor one twice.
            wrong.extend(k for k, v in state.items() if expected.get(k) != v
                         and not (k == "windows" and v <= expected["windows"]))
            return sum(spout.saved.values()) == len(SENTENCES) and state == expected
        wait_until(done, 60, f"every window committed, exactly as without failures ({fault})")
    assert wrong == []
    if fault != "none":
        assert FAULT.fired(fault)


def test_with_two_senders_each_word_is_in_the_windows_once_after_a_failure(tmp_path):
    """Two split tasks interleave their words differently in any two runs, so the windows
    differ from one run to the next; but each word is in the tumbling windows' sequence once,
    failure or not."""
    FAULT.arm("split raises")
    # A length that divides the words: every word ends in a full window, so a word lost leaves
    # the last one unfired and a word twice shows in the count.
    tumbling = 10
    assert len(WORDS) % tumbling == 0
    bolt = Windows().with_tumbling_window(Count(tumbling)).with_persistence()
    full = len(WORDS) // tumbling
    with running(topology(sentence_log(tmp_path), bolt, split_tasks=2),
                 exactly_conf(tmp_path)) as cluster:
        [spout] = cluster.instances("test", "sentences")
        second_half(tmp_path)
        wait_until(lambda: sum(spout.saved.values()) == len(SENTENCES)
                   and committed_state(tmp_path / "state").get("windows") == full, 60,
                   "every window committed")
    state = committed_state(tmp_path / "state")
    windowed = Counter(word for n in range(full) for word in state[("window", n)])
    assert all(len(state[("window", n)]) == tumbling for n in range(full))
    assert windowed == Counter(WORDS)   # each word once: none lost, none twice
    assert FAULT.fired("split raises")


def test_processing_time_windows_are_refused_at_submit_saying_why(tmp_path):
    log_path = tmp_path / "log"
    PartitionedLog.create(log_path, 1).close()
    conf = exactly_conf(tmp_path)
    assert topology(log_path).config_problems(conf) == []
    for length, sliding in [(Duration(seconds=5), Duration(seconds=1)),
                            (Duration(seconds=5), Count(3)),
                            (Count(9), Duration(seconds=1))]:
        bolt = Windows().with_window(length, sliding).with_persistence()
        problems = topology(log_path, bolt).config_problems(conf)
        assert any("stateful windowed bolt 'windows'" in p and "processing-time" in p
                   for p in problems), (length, sliding, problems)
        assert topology(log_path, bolt).config_problems({}) == []   # at least once takes it
    from stormlet import LocalCluster
    bolt = Windows().with_window(Duration(seconds=5), Count(3)).with_persistence()
    with LocalCluster() as cluster, pytest.raises(TopologyError, match="processing-time"):
        cluster.submit("t", conf, topology(log_path, bolt))
