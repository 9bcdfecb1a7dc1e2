"""Effectively-once (stormlet/state/exactly.py): the epoch gate, the refusals at submit, then a
stateful word count over the partitioned log in a LocalCluster with failures injected (a bolt
that raises, a tuple lost on its way), whose committed state must equal a failure-free run's
exactly, never more."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from support import exactly_conf, running, wait_until

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet import config as cfg
from stormlet.errors import TopologyError
from stormlet.sinks.checkpointed import Staged
from stormlet.sources import LogSpout
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state import StatefulBolt
from stormlet.state.embedded import state_file
from stormlet.state.exactly import FAILED, EpochGate, PositionsReport
from stormlet.state.store import decode_key, decode_value, encode_value
from stormlet.state.windowed import StatefulWindowedBolt
from stormlet.windowing import Count, WindowedBolt

SENTENCES = [f"w{i % 7} w{i % 3} common" for i in range(300)]


def expected_totals() -> dict[str, int]:
    totals: dict[str, int] = {}
    for sentence in SENTENCES:
        for word in sentence.split():
            totals[word] = totals.get(word, 0) + 1
    return totals


# ----- stored records

def test_reports_and_staged_writes_are_stored_as_plain_arrays_and_read_back_by_name():
    """A spout's positions report and a sink's staged writes are stored as the msgpack arrays
    of plain tuples (what checkpoints saved by earlier versions hold), and read back by name."""
    for record, plain in [(PositionsReport(3, [[0, 5], [1, 7]]), (3, [(0, 5), (1, 7)])),
                          (PositionsReport(4, FAILED), (4, FAILED)),
                          (Staged(9, [["k", 1]]), (9, [("k", 1)]))]:
        raw = encode_value("key", record)
        assert raw == encode_value("key", plain)
        assert type(record)(*decode_value(raw)) == record
    assert PositionsReport(*decode_value(encode_value("key", (3, [(0, 5)])))).epoch == 3


# ----- the gate

def test_the_gate_drops_a_senders_data_until_its_marker_of_the_bolts_epoch():
    gate = EpochGate([1, 2])
    assert gate.admits(1) and gate.admits(2)          # epoch 0: nothing rewound yet
    assert gate.arrive(1, 1)                          # a new epoch: the caller rolls back
    assert gate.admits(1) and not gate.admits(2)      # 2's data is from before its rewind
    assert gate.behind(1) == [2]
    assert not gate.arrive(2, 1)                      # the same epoch: nothing new
    assert gate.admits(2) and gate.behind(1) == []
    assert gate.behind(2) == [1, 2]                   # a PREPARE of an epoch not reached here
    assert not gate.arrive(1, 1)


# ----- refusals

class Sentences(Spout):
    outputs = ["value"]

    def next_tuple(self):
        pass


class Split(Bolt):
    outputs = ["word"]
    raise_on: str | None = None   # raise once, on this sentence
    lose: str | None = None       # lose once (never acked): it times out

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.raised = SHARED.setdefault("raised", threading.Event())
        self.lost = SHARED.setdefault("lost", threading.Event())

    def execute(self, tup):
        # Each failure comes after the words went on: their counts are applied, and only a
        # rewind of the spout with the state (not a replay of the sentence) keeps them once.
        sentence = tup["value"]
        for word in sentence.split():
            self.collector.emit([word], anchors=[tup])
        if sentence == self.raise_on and not self.raised.is_set():
            self.raised.set()
            raise RuntimeError("injected")
        if sentence == self.lose and not self.lost.is_set():
            self.lost.set()
            return   # neither acked nor failed: its tree times out
        self.collector.ack(tup)


SHARED: dict[str, threading.Event] = {}


class Count_(StatefulBolt):
    outputs = ["word", "n"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word = tup["word"]
        n = self.state.get(word, 0) + 1
        self.state.put(word, n)
        if word == SHARED_WORD_TO_FAIL.get("word") and n == 40 and "done" not in SHARED:
            SHARED["done"] = threading.Event()
            SHARED["done"].set()
            raise RuntimeError("injected in the stateful bolt")
        self.collector.emit([word, n], anchors=[tup])
        self.collector.ack(tup)


SHARED_WORD_TO_FAIL: dict[str, str] = {}


class Windowed(WindowedBolt):
    outputs = ["word"]

    def execute(self, window):
        pass


def word_count(spout, split=None, windowed=False):
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, parallelism=2)
    if windowed:
        builder.set_bolt("split", Windowed().with_tumbling_window(Count(5))).shuffle_grouping(
            "sentences")
    else:
        builder.set_bolt("split", split or Split(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count_(), parallelism=2).fields_grouping("split", ["word"])
    return builder.build()



def test_what_the_mode_cannot_protect_is_refused_at_submit_naming_it(tmp_path):
    log_path = tmp_path / "log"
    PartitionedLog.create(log_path, 2).close()
    conf = exactly_conf(tmp_path)
    problems = word_count(Sentences()).config_problems(conf)
    assert any("spout 'sentences' (Sentences) cannot rewind" in p for p in problems), problems
    problems = word_count(LogSpout(str(log_path), spout_id="s"), windowed=True
                          ).config_problems(conf)
    assert any("windowed bolt 'split' feeds stateful bolts" in p and "processing-time" in p
               for p in problems), problems
    problems = word_count(LogSpout(str(log_path), spout_id="s")).config_problems(
        {**conf, cfg.TOPOLOGY_STATE_PROVIDER: "memory"})
    assert any("memory cannot take part" in p for p in problems), problems
    problems = word_count(LogSpout(str(log_path), spout_id="s", guarantee="none")
                          ).config_problems(conf)
    assert any("guarantee='none'" in p for p in problems), problems
    assert word_count(LogSpout(str(log_path), spout_id="s")).config_problems(conf) == []
    # At least once (the default) takes them all, as before.
    assert word_count(Sentences()).config_problems({}) == []
    from stormlet import LocalCluster
    with LocalCluster() as cluster, pytest.raises(TopologyError, match="cannot rewind"):
        cluster.submit("t", conf, word_count(Sentences()))


# ----- exact state under failures

def committed_totals(state_dir, topology: str) -> dict[str, int]:
    path = state_file(state_dir, topology)
    if not path.exists():
        return {}
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE ?", (f"{topology}/count/%",))
        return {decode_key(k): decode_value(v) for k, v in rows}
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()


@pytest.mark.parametrize("failure", ["none", "split raises", "count raises", "tuple lost"])
def test_the_committed_word_count_is_exact_after_failures(tmp_path, failure):
    SHARED.clear()
    SHARED_WORD_TO_FAIL.clear()
    log_path = tmp_path / "log"
    log = PartitionedLog.create(log_path, 2)
    log.append_many(SENTENCES)
    log.flush()
    log.close()
    split = Split()
    if failure == "split raises":
        split.raise_on = SENTENCES[150]
    elif failure == "count raises":
        SHARED_WORD_TO_FAIL["word"] = "common"
    elif failure == "tuple lost":
        split.lose = SENTENCES[100]
    topology = word_count(LogSpout(str(log_path), spout_id="words", commit_interval=0.05),
                          split)
    expected = expected_totals()
    seen_too_many = []

    with running(topology, exactly_conf(tmp_path)) as cluster:
        spouts = cluster.instances("test", "sentences")

        def done() -> bool:
            # Every offset is committed (in this mode: by a committed checkpoint), and the
            # state committed since holds each sentence once.
            totals = committed_totals(tmp_path / "state", "test")
            seen_too_many.extend(w for w, n in totals.items() if n > expected.get(w, 0))
            committed = sum(sum(spout.saved.values()) for spout in spouts)
            return committed == len(SENTENCES) and totals == expected
        wait_until(done, 60, f"every offset committed, exactly once, after {failure}")
    assert seen_too_many == []
    if failure != "none":
        assert any(event.is_set() for event in SHARED.values())


def test_a_restarted_spout_task_never_replaces_its_first_instances_report_of_an_epoch():
    from stormlet.sources.checkpointed import CheckpointFollower
    from stormlet.state import KeyValueState
    from stormlet.state.exactly import FAILED, positions_key
    from stormlet.state.store import MemoryStore

    follower = CheckpointFollower.__new__(CheckpointFollower)
    follower.own, follower.epoch, follower.reported = KeyValueState(MemoryStore()), 2, -1
    follower._report(5, [[0, 10]])            # the first instance, drained: its positions
    follower.reported = -1                     # restarted: it knows nothing of that report
    follower._report(5, FAILED)
    assert follower.own.get(positions_key(5)) == (2, [[0, 10]]) and follower.reported == 5
    follower.epoch = 3                         # a new attempt at txid 5, after a rollback
    follower._report(5, FAILED)
    assert follower.own.get(positions_key(5)) == (3, FAILED)


# ----- a task restarted while its checkpoint was decided but not committed


class Keeper(StatefulBolt):
    outputs = None

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put(tup["word"], tup["n"])
        self.collector.ack(tup)


class WindowKeeper(StatefulWindowedBolt):
    outputs = None

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        for tup in window.get_iter():
            self.state.put(tup["word"], tup["n"])


def keeper_task(tmp_path, windowed):
    from stormlet.state.checkpoint import CHECKPOINT_FIELDS, CHECKPOINT_STREAM
    from stormlet.state.windowed import StatefulWindowedBoltRunner
    from stormlet.state.wrappers import StatefulBoltRunner
    from stormlet.testing import BoltHarness, make_tuple

    runner = (StatefulWindowedBoltRunner(WindowKeeper().with_tumbling_window(Count(1))
                                         .with_persistence()) if windowed
              else StatefulBoltRunner(Keeper()))
    runner.checkpoint_sources = runner.epoch_sources = ("up",)
    harness = BoltHarness(runner, {cfg.TOPOLOGY_GUARANTEE: cfg.EFFECTIVELY_ONCE,
                                   cfg.TOPOLOGY_STATE_PROVIDER: "embedded",
                                   cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: {"dir": str(tmp_path)}},
                          sources={"up": ["word", "n"]})
    up = harness.context.get_component_tasks("up")[0]

    def action(txid, what, epoch=1):
        harness.execute(make_tuple([txid, what, epoch], list(CHECKPOINT_FIELDS), "up",
                                   CHECKPOINT_STREAM, up))

    def data(word, n):
        harness.execute(make_tuple([word, n], ["word", "n"], "up", task=up))
    return runner, action, data


@pytest.mark.parametrize("windowed", [False, True], ids=["stateful", "stateful-windowed"])
def test_a_restarted_task_keeps_the_decided_checkpoint_its_predecessor_prepared(tmp_path,
                                                                                windowed):
    """A task killed after PREPARE 4 and before COMMIT 4, with 4 decided (COMMITTING): the
    restarted spouts send their marker of the current epoch, which reaches the restarted task
    (its gate at 0) before the recovery's COMMIT 4. The marker must not roll back checkpoint 4
    prepared in the store, or COMMIT 4 commits nothing and its effects are lost (seen on the
    cluster: an upsert sink's checkpoint never published, tests/state/test_cluster_exactly.py)."""
    from stormlet.state.checkpoint import COMMIT, INITSTATE, PREPARE
    from stormlet.state.exactly import EPOCH

    runner, action, data = keeper_task(tmp_path, windowed)
    action(0, EPOCH)
    action(0, INITSTATE)
    data("w", 7)
    action(4, PREPARE)
    runner.state.close()   # killed: checkpoint 4 stays prepared in the store

    runner, action, data = keeper_task(tmp_path, windowed)
    action(0, EPOCH)       # the restarted spouts' marker, within epoch 1
    action(4, COMMIT)      # the recovery finishes the decided checkpoint
    action(4, INITSTATE)
    assert runner.inner.state.get("w") == 7
    if windowed:   # and the window's own checkpoint (its bookkeeping), kept apart
        assert runner.window_state.get("system") is not None
