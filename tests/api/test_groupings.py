"""Stream groupings: how each grouping spreads a stream's tuples over the subscribing tasks.

Most tests run a real topology in a LocalCluster: a spout emitting tracked tuples and a
recording bolt with several tasks, whose instances are read back once every tuple is acked.
Unit tests of ``make_chooser`` pin the details the cluster tests cannot see cheaply.
"""

from __future__ import annotations

import os
import random
import string
import subprocess
import sys
import zlib
from collections import Counter, defaultdict

import pytest

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet import groupings as g
from stormlet.groupings import Grouping
from stormlet.runtime import choosers
from stormlet.runtime.choosers import make_chooser, stable_hash
from stormlet.runtime.routing import StreamRoute
from stormlet.tuples import StreamInfo

# Plain shuffle, whose evenness these tests pin: a load-aware one (the default) weighs tasks by
# their load, and has its own tests (test_load_aware.py).
CONF = {"topology.message.timeout.secs": 10, "topology.disable.loadaware.messaging": True}
WAIT = 15


# --------------------------------------------------------------------------- components


class KeySpout(Spout):
    """Emits ``count`` tracked tuples ``[n, key]``; keys cycle through ``keys``."""

    outputs = ["n", "key"]

    def __init__(self, count: int, keys: list | None = None):
        self.count = count
        self.keys = keys

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.task_id
        self.i = 0
        self.acked = 0
        self.failed = 0

    def key(self, i: int):
        return self.keys[i % len(self.keys)] if self.keys else i

    def next_tuple(self):
        if self.i < self.count:
            i = self.i
            self.collector.emit([i, self.key(i)], msg_id=i)
            self.i += 1

    def ack(self, msg_id):
        self.acked += 1

    def fail(self, msg_id, reason):
        self.failed += 1


class DirectSpout(KeySpout):
    """Emits on a direct stream: tuple ``n`` goes to ``sink`` task number ``chosen[n % len]``
    (indexes into the sink's task list, resolved in ``open``)."""

    def __init__(self, count: int, chosen: list[int]):
        super().__init__(count)
        self.chosen = chosen

    def declare_output_fields(self, declarer):
        declarer.declare(["n", "key"], direct=True)

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        tasks = context.get_component_tasks("sink")
        self.targets = [tasks[i] for i in self.chosen]
        self.sent_to = {}

    def next_tuple(self):
        if self.i < self.count:
            i = self.i
            task = self.targets[i % len(self.targets)]
            self.sent_to[i] = task
            self.collector.emit_direct(task, [i, i], msg_id=i)
            self.i += 1


class Recorder(Bolt):
    """Records ``(source task, n, key)`` of every tuple it receives, and acks it."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.task_id
        self.got = []

    def execute(self, tup):
        self.got.append((tup.source_task, tup["n"], tup["key"]))
        self.collector.ack(tup)


class EvenOddGrouping:
    """A custom grouping: even ``n`` to the first target task, odd ``n`` to the last two, and
    every tenth tuple to nobody at all."""

    def prepare(self, context, stream, target_tasks):
        self.stream = stream
        self.targets = list(target_tasks)
        self.source = context.task_id

    def choose_tasks(self, task_id, values):
        n = values[0]
        if n % 10 == 9:
            return []
        if n % 2 == 0:
            return [self.targets[0]]
        return self.targets[-2:]


class PrepareRecordingGrouping:
    """Records which object was prepared for which source task (class-level: the object the
    runtime uses may not be the one the test holds)."""

    prepared: list = []

    def prepare(self, context, stream, target_tasks):
        PrepareRecordingGrouping.prepared.append((id(self), context.task_id))
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        return [self.targets[values[0] % len(self.targets)]]


# --------------------------------------------------------------------------- helpers


def run(builder: TopologyBuilder, total_acks: int, name: str = "groupings"):
    """Run the topology until the spouts saw ``total_acks`` acks; return (spouts, sinks...)."""
    topology = builder.build()
    with LocalCluster() as cluster:
        cluster.submit(name, CONF, topology)

        def spouts():
            return cluster.instances(name, "spout")

        cluster.wait_for(lambda: sum(s.acked for s in spouts()) >= total_acks, timeout=WAIT)
        assert sum(s.failed for s in spouts()) == 0
        assert sum(s.acked for s in spouts()) == total_acks
        assert cluster.errors(name) == []
        result = {c: list(cluster.instances(name, c)) for c in topology.components}
    return result


def received(sinks) -> dict[int, list]:
    """task id -> list of (source task, n, key) it received."""
    return {s.task: list(s.got) for s in sinks}


def counts(sinks) -> dict[int, int]:
    return {s.task: len(s.got) for s in sinks}


def where_each(sinks) -> dict:
    """(source task, n) -> list of tasks that received it."""
    found = defaultdict(list)
    for s in sinks:
        for src, n, _key in s.got:
            found[(src, n)].append(s.task)
    return found


# --------------------------------------------------------------------------- cluster tests


def test_shuffle_spreads_evenly_within_one_per_task():
    n = 1003  # not a multiple of the task count
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n))
    b.set_bolt("sink", Recorder(), parallelism=4).shuffle_grouping("spout")
    out = run(b, n)
    c = counts(out["sink"])
    assert len(c) == 4
    assert sum(c.values()) == n
    assert max(c.values()) - min(c.values()) <= 1, c
    # Every tuple exactly once.
    found = where_each(out["sink"])
    assert len(found) == n and all(len(tasks) == 1 for tasks in found.values())


def test_shuffle_is_even_per_source_task_with_two_spout_tasks():
    n = 401
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n), parallelism=2)
    b.set_bolt("sink", Recorder(), parallelism=3).shuffle_grouping("spout")
    out = run(b, 2 * n)
    spout_tasks = [s.task for s in out["spout"]]
    assert len(set(spout_tasks)) == 2
    for src in spout_tasks:
        per_task = Counter()
        for sink in out["sink"]:
            per_task[sink.task] += sum(1 for s, _n, _k in sink.got if s == src)
        assert sum(per_task.values()) == n
        assert len(per_task) == 3
        assert max(per_task.values()) - min(per_task.values()) <= 1, (src, per_task)


def test_groupings_count_tasks_not_executors():
    # 2 executors running 6 tasks: shuffle spreads over all 6 tasks, fields keeps keys per task,
    # global picks the lowest task even though it shares an executor.
    n = 600
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n, [f"k{i}" for i in range(30)]))
    b.set_bolt("shuf", Recorder(), parallelism=2).set_num_tasks(6).shuffle_grouping("spout")
    b.set_bolt("glob", Recorder(), parallelism=2).set_num_tasks(3).global_grouping("spout")
    b.set_bolt("keyed", Recorder(), parallelism=2).set_num_tasks(5).fields_grouping("spout",
                                                                                    ["key"])
    out = run(b, n)
    shuf = counts(out["shuf"])
    assert len(shuf) == 6 and set(shuf.values()) == {100}
    glob = counts(out["glob"])
    assert glob[min(glob)] == n and sum(glob.values()) == n
    key_tasks = defaultdict(set)
    for s in out["keyed"]:
        for _src, _n, key in s.got:
            key_tasks[key].add(s.task)
    assert len(out["keyed"]) == 5
    assert all(len(t) == 1 for t in key_tasks.values()) and len(key_tasks) == 30


def test_none_grouping_delivers_each_tuple_once_and_evenly():
    n = 302
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n))
    b.set_bolt("sink", Recorder(), parallelism=3).none_grouping("spout")
    out = run(b, n)
    found = where_each(out["sink"])
    assert len(found) == n and all(len(t) == 1 for t in found.values())
    c = counts(out["sink"])
    assert max(c.values()) - min(c.values()) <= 1, c


def test_local_or_shuffle_in_local_mode_spreads_over_all_tasks():
    # In local mode every task is local, so local-or-shuffle is a shuffle over all of them.
    n = 402
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n))
    b.set_bolt("sink", Recorder(), parallelism=4).local_or_shuffle_grouping("spout")
    out = run(b, n)
    found = where_each(out["sink"])
    assert len(found) == n and all(len(t) == 1 for t in found.values())
    c = counts(out["sink"])
    assert len(c) == 4 and min(c.values()) > 0
    assert max(c.values()) - min(c.values()) <= 1, c


def test_fields_grouping_sends_a_key_to_one_task_across_spout_tasks():
    keys = [f"word-{i}" for i in range(23)] + ["é", "日本", ""]
    n = 520
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n, keys), parallelism=2)
    b.set_bolt("sink", Recorder(), parallelism=4).fields_grouping("spout", ["key"])
    out = run(b, 2 * n)
    key_tasks = defaultdict(set)
    key_sources = defaultdict(set)
    for sink in out["sink"]:
        for src, _n, key in sink.got:
            key_tasks[key].add(sink.task)
            key_sources[key].add(src)
    assert set(key_tasks) == set(keys)
    for key, tasks in key_tasks.items():
        assert len(tasks) == 1, (key, tasks)
        assert len(key_sources[key]) == 2  # both spout tasks sent it, to the same task
    # Not trivially everything to one task.
    assert len({next(iter(t)) for t in key_tasks.values()}) >= 3
    # The task is the one stable_hash picks, counted over the sorted task list.
    sink_tasks = sorted(s.task for s in out["sink"])
    for key, tasks in key_tasks.items():
        assert tasks == {sink_tasks[stable_hash([key]) % 4]}


def test_fields_grouping_on_two_fields_and_int_keys():
    b = TopologyBuilder()
    n = 300
    b.set_spout("spout", KeySpout(n, list(range(-5, 10))), parallelism=2)
    b.set_bolt("sink", Recorder(), parallelism=3).fields_grouping("spout", ["key", "n"])
    b.set_bolt("by_key", Recorder(), parallelism=3).fields_grouping("spout", ["key"])
    out = run(b, 2 * n)
    # Each (key, n) pair is sent twice (once per spout task), always to the same task.
    pair_tasks = defaultdict(set)
    for sink in out["sink"]:
        for _src, num, key in sink.got:
            pair_tasks[(key, num)].add(sink.task)
    assert len(pair_tasks) == n
    assert all(len(t) == 1 for t in pair_tasks.values())
    assert len({next(iter(t)) for t in pair_tasks.values()}) == 3
    key_tasks = defaultdict(set)
    for sink in out["by_key"]:
        for _src, _num, key in sink.got:
            key_tasks[key].add(sink.task)
    assert len(key_tasks) == 15 and all(len(t) == 1 for t in key_tasks.values())


def test_all_grouping_sends_every_tuple_to_every_task():
    n = 150
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n))
    b.set_bolt("sink", Recorder(), parallelism=4).all_grouping("spout")
    b.set_bolt("other", Recorder(), parallelism=2).shuffle_grouping("spout")
    out = run(b, n)
    for sink in out["sink"]:
        assert sorted(num for _s, num, _k in sink.got) == list(range(n))
    # A second subscriber still gets its own single copy of each tuple.
    assert sorted(num for s in out["other"] for _s, num, _k in s.got) == list(range(n))


def test_global_grouping_sends_everything_to_the_lowest_task():
    n = 200
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n), parallelism=2)
    b.set_bolt("sink", Recorder(), parallelism=4).global_grouping("spout")
    out = run(b, 2 * n)
    c = counts(out["sink"])
    lowest = min(c)
    assert c[lowest] == 2 * n
    assert all(v == 0 for task, v in c.items() if task != lowest), c


def test_direct_grouping_delivers_only_to_the_chosen_tasks():
    n = 120
    b = TopologyBuilder()
    b.set_spout("spout", DirectSpout(n, chosen=[0, 2]))
    b.set_bolt("sink", Recorder(), parallelism=4).direct_grouping("spout")
    out = run(b, n)
    spout = out["spout"][0]
    sink_tasks = sorted(s.task for s in out["sink"])
    assert set(spout.targets) == {sink_tasks[0], sink_tasks[2]}
    got = received(out["sink"])
    for task, tuples in got.items():
        expected = sorted(i for i, t in spout.sent_to.items() if t == task)
        assert sorted(num for _s, num, _k in tuples) == expected
    assert len(got[sink_tasks[1]]) == 0 and len(got[sink_tasks[3]]) == 0
    assert len(got[sink_tasks[0]]) == n // 2 and len(got[sink_tasks[2]]) == n // 2


def splittable_key(n_tasks: int = 4) -> str:
    """A key whose two partial-key choices differ. With any pair of hashes a quarter of keys
    (with 4 tasks) get the same task twice and cannot be split, so tests of splitting pick a key
    that can be; candidates have different lengths."""
    for key in ["hot", "hotkey", "h", "ho", "hott", "hotte", "hotter", "hottest", "hottest!"]:
        choose = make_chooser(Grouping(g.PARTIAL_KEY, ("key",)), ["key"], list(range(n_tasks)),
                              source_task=1)
        assert choose is not None
        if len({choose([key])[0] for _ in range(8)}) == 2:
            return key
    raise AssertionError("no candidate key has two distinct partial-key choices")


def test_partial_key_grouping_uses_at_most_two_tasks_and_balances_a_skewed_key():
    # Half the traffic is one hot key; the rest is spread over 40 cold keys.
    hot = splittable_key(4)
    keys = []
    for i in range(40):
        keys += [hot, f"k{i:02d}"]
    n = 1600
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n, keys))
    b.set_bolt("pkg", Recorder(), parallelism=4).partial_key_grouping("spout", ["key"])
    b.set_bolt("fields", Recorder(), parallelism=4).fields_grouping("spout", ["key"])
    out = run(b, n)

    def loads(sinks):
        key_tasks = defaultdict(set)
        for s in sinks:
            for _src, _n, key in s.got:
                key_tasks[key].add(s.task)
        return key_tasks, counts(sinks)

    pkg_keys, pkg_load = loads(out["pkg"])
    fields_keys, fields_load = loads(out["fields"])
    assert sum(pkg_load.values()) == n
    assert all(len(t) <= 2 for t in pkg_keys.values()), pkg_keys
    assert len(pkg_keys[hot]) == 2  # the hot key is split
    assert max(fields_load.values()) >= n // 2  # fields grouping cannot split it
    assert max(pkg_load.values()) < 0.8 * max(fields_load.values()), (pkg_load, fields_load)


def test_partial_key_grouping_gives_single_letter_keys_two_tasks():
    # 52 single-letter keys, each sent 20 times in random order, to 4 tasks. With two
    # independent choices about three keys in four have two distinct candidate tasks, and the
    # load-aware pick uses both.
    keys = list(string.ascii_letters) * 20
    random.Random(7).shuffle(keys)
    n = len(keys)
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n, keys))
    b.set_bolt("pkg", Recorder(), parallelism=4).partial_key_grouping("spout", ["key"])
    out = run(b, n)
    key_tasks = defaultdict(set)
    for s in out["pkg"]:
        for _src, _n, key in s.got:
            key_tasks[key].add(s.task)
    assert all(len(t) <= 2 for t in key_tasks.values())
    split = sum(len(t) == 2 for t in key_tasks.values())
    assert split >= 26, f"only {split} of {len(key_tasks)} keys had two tasks"


def test_custom_grouping_choose_tasks_is_honoured():
    n = 200
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n))
    b.set_bolt("sink", Recorder(), parallelism=4).custom_grouping("spout", EvenOddGrouping())
    out = run(b, n)
    sink_tasks = sorted(s.task for s in out["sink"])
    found = where_each(out["sink"])
    spout_task = out["spout"][0].task
    for i in range(n):
        tasks = sorted(found.get((spout_task, i), []))
        if i % 10 == 9:
            assert tasks == []
        elif i % 2 == 0:
            assert tasks == [sink_tasks[0]]
        else:
            assert tasks == sink_tasks[-2:]
    assert received(out["sink"])[sink_tasks[1]] == []


def test_custom_grouping_gets_its_own_instance_per_source_task():
    PrepareRecordingGrouping.prepared = []
    n = 50
    b = TopologyBuilder()
    b.set_spout("spout", KeySpout(n), parallelism=2)
    b.set_bolt("sink", Recorder(), parallelism=3).custom_grouping("spout",
                                                                  PrepareRecordingGrouping())
    run(b, 2 * n)
    prepared = PrepareRecordingGrouping.prepared
    assert len(prepared) == 2
    assert len({source for _obj, source in prepared}) == 2
    assert len({obj for obj, _source in prepared}) == 2, "one object prepared for two tasks"


# --------------------------------------------------------------------------- make_chooser units


TASKS = [7, 3, 5, 9]  # deliberately unsorted


def chooser(kind, fields=(), source_fields=("n", "key"), tasks=TASKS, **kw):
    kw.setdefault("source_task", 1)
    return make_chooser(Grouping(kind, tuple(fields)), list(source_fields), list(tasks), **kw)


def test_make_chooser_shuffle_is_a_permutation_in_every_window():
    choose = chooser(g.SHUFFLE, rng=random.Random(1))
    picks = [choose([i, "x"])[0] for i in range(400)]
    for start in range(0, 400, 4):
        assert sorted(picks[start:start + 4]) == sorted(TASKS)
    # The order is reshuffled between passes, not a fixed rotation.
    windows = {tuple(picks[s:s + 4]) for s in range(0, 400, 4)}
    assert len(windows) > 1


def test_make_chooser_shuffle_passes_are_uniform_over_orders():
    # Every order of three tasks is about equally likely on each pass: the chooser's own
    # generator (not random.Random's) must not favour some, or fall into a cycle.
    choose = chooser(g.SHUFFLE, tasks=[1, 2, 3], rng=random.Random(11))
    passes = Counter(tuple(choose([i, "x"])[0] for i in range(3)) for _ in range(6000))
    assert len(passes) == 6
    assert all(850 <= seen <= 1150 for seen in passes.values()), passes


def _xorshift64star(state):
    """The ShuffleChooser's generator, written out here in Python ints."""
    mask = (1 << 64) - 1
    while True:
        state ^= state >> 12
        state ^= (state << 25) & mask
        state ^= state >> 27
        yield ((state * 0x2545F4914F6CDD1D) & mask) >> 32


def test_make_chooser_shuffle_draws_what_its_generator_says():
    # Compiled, the generator runs in C integers: it must pick exactly what the same steps in
    # Python ints pick (so a seeded topology shuffles alike in both modes).
    tasks = [7, 3, 5, 9, 11]
    choose = chooser(g.SHUFFLE, tasks=tasks, rng=random.Random(4))
    draws = _xorshift64star(random.Random(4).getrandbits(64))
    order = [[t] for t in sorted(tasks)]
    for _ in range(50):
        for i in range(len(order) - 1, 0, -1):
            j = next(draws) % (i + 1)
            order[i], order[j] = order[j], order[i]
        assert [choose([0, "x"]) for _ in order] == order


def test_make_chooser_fields_on_several_fields_matches_stable_hash():
    # Several fields hash as stable_hash does (what backfill and every worker agree on), with
    # the chooser's own packer: a value it cannot pack is refused, and the next pick is right.
    choose = chooser(g.FIELDS, ("key", "n"))
    ordered = sorted(TASKS)
    for n, key in [(0, "a"), (1, "a"), (2**40, "bb"), (-3, "ünïcödé"), (5, b"raw"), (7, None)]:
        assert choose([n, key]) == [ordered[stable_hash([key, n]) % 4]], (n, key)
        with pytest.raises(TypeError):
            choose([object(), key])
        assert choose([n, key]) == [ordered[stable_hash([key, n]) % 4]], (n, key)


def test_make_chooser_single_target_shuffle_and_fields():
    for kind, fields in ((g.SHUFFLE, ()), (g.NONE, ()), (g.FIELDS, ("key",)),
                         (g.LOCAL_OR_SHUFFLE, ()), (g.PARTIAL_KEY, ("key",))):
        choose = chooser(kind, fields, tasks=[4])
        assert {tuple(choose([i, str(i)])) for i in range(20)} == {(4,)}


def test_make_chooser_all_global_direct():
    assert chooser(g.ALL)([1, "a"]) == sorted(TASKS)
    assert chooser(g.GLOBAL)([1, "a"]) == [3]
    assert chooser(g.DIRECT) is None
    with pytest.raises(ValueError, match="unknown grouping kind"):
        chooser("round_robin")


def test_a_route_names_the_tasks_its_choosers_do_for_every_grouping():
    # StreamRoute.tasks_for answers the usual shapes without calling the chooser (a grouping
    # that always names the same tasks, a one-field fields grouping as a C call): it must
    # answer as the choosers do, alone and with a second subscriber.
    info = StreamInfo("src", "default", ["n", "key"])
    shapes = [(g.SHUFFLE, (), TASKS), (g.SHUFFLE, (), [4]), (g.FIELDS, ("key",), TASKS),
              (g.FIELDS, ("key",), [4]), (g.FIELDS, ("key", "n"), TASKS), (g.ALL, (), TASKS),
              (g.GLOBAL, (), TASKS), (g.PARTIAL_KEY, ("key",), TASKS),
              (g.PARTIAL_KEY, ("key",), [4]), (g.LOCAL_OR_SHUFFLE, (), [4])]
    for kind, fields, tasks in shapes:
        for other in (None, (g.GLOBAL, (), [7, 8])):
            route, expected = StreamRoute(info, direct=False), []
            for k, f, t in [(kind, fields, tasks)] + ([other] if other else []):
                # Two choosers alike: one for the route, one to say what it should answer
                # (shuffle and partial-key choosers keep state).
                route.choosers.append(chooser(k, f, tasks=t, rng=random.Random(5)))
                expected.append(chooser(k, f, tasks=t, rng=random.Random(5)))
            route.seal()
            for i in range(40):
                values = [i, f"key-{i % 7}"]
                assert route.tasks_for(values) == [t for e in expected for t in e(values)], \
                    (kind, fields, tasks, other)
    nobody = StreamRoute(info, direct=False)   # a stream no one subscribes to
    nobody.seal()
    assert nobody.tasks_for([1, "a"]) == []


def test_groupings_whose_answer_never_changes_are_constant_choosers():
    # What lets a route answer them from a field, with no call per emit.
    for kind, fields in ((g.SHUFFLE, ()), (g.NONE, ()), (g.FIELDS, ("key",)),
                         (g.LOCAL_OR_SHUFFLE, ()), (g.PARTIAL_KEY, ("key",))):
        assert type(chooser(kind, fields, tasks=[4])) is choosers.Always, kind
        assert type(chooser(kind, fields)) is not choosers.Always, kind
    assert type(chooser(g.ALL)) is choosers.Always and type(chooser(g.GLOBAL)) is choosers.Always
    for kind, fields in ((g.FIELDS, ("key",)), (g.ALL, ()), (g.SHUFFLE, ())):
        choose = chooser(kind, fields, rng=random.Random(2))
        as_function = choosers.as_function(chooser(kind, fields, rng=random.Random(2)))
        assert [as_function([i, f"k{i}"]) for i in range(20)] == \
            [choose([i, f"k{i}"]) for i in range(20)]


def test_make_chooser_fields_matches_stable_hash_and_ignores_other_fields():
    choose = chooser(g.FIELDS, ("key",))
    ordered = sorted(TASKS)
    for key in ["a", "bb", "", "ünïcödé", "\ud800", 0, 5, -1, 2**63, 3.5, None, b"raw", True]:
        first = choose([0, key])
        assert all(choose([i, key]) == first for i in range(1, 10))
        assert first == [ordered[stable_hash([key]) % 4]]
    # Three tasks (a remainder a power of two would hide), and hashes on both sides of 2**32:
    # the compiled chooser's C arithmetic picks what Python's does.
    three = chooser(g.FIELDS, ("key",), tasks=[4, 2, 6])
    for key in ["a", "bb", "ünïcödé", 2**32 - 1, 2**32, 2**32 + 5, 2**62 + 7, 2**63 - 1]:
        assert three([0, key]) == [[2, 4, 6][stable_hash([key]) % 3]], key
    two = chooser(g.FIELDS, ("key", "n"))
    assert two([1, "a"]) == [ordered[stable_hash(["a", 1]) % 4]]
    # Field order in the grouping, not in the stream, decides the hash input.
    other = chooser(g.FIELDS, ("n", "key"))
    assert other([1, "a"]) == [ordered[stable_hash([1, "a"]) % 4]]


def test_a_str_key_hashes_as_zlib_crc32_of_its_utf8_compiled_or_not():
    # Workers built either way must route a key alike, and alike with older workers: compiled,
    # an ASCII str's CRC-32 is computed over its own characters, which must give zlib's value.
    rng = random.Random(7)
    keys = ["", "a", "the", "\x00\x7f", "ünïcödé", "\ud800", "日本"] + [
        "".join(rng.choice(string.printable) for _ in range(rng.randrange(64)))
        for _ in range(2000)]
    for key in keys:
        assert stable_hash([key]) == zlib.crc32(key.encode("utf-8", "surrogatepass")), key
        if key.isascii():
            assert choosers.ascii_crc32(key) == zlib.crc32(key.encode()), key


def test_make_chooser_fields_spreads_keys():
    choose = chooser(g.FIELDS, ("key",))
    load = Counter(choose([0, f"user-{i}"])[0] for i in range(4000))
    assert set(load) == set(TASKS)
    assert min(load.values()) > 800, load


def test_make_chooser_local_or_shuffle_prefers_local_tasks():
    choose = chooser(g.LOCAL_OR_SHUFFLE, local_tasks={5, 9, 100})
    picks = Counter(choose([i, "x"])[0] for i in range(100))
    assert picks == {5: 50, 9: 50}
    remote = chooser(g.LOCAL_OR_SHUFFLE, local_tasks={100})
    assert set(Counter(remote([i, "x"])[0] for i in range(100))) == set(TASKS)


def test_local_or_shuffle_with_one_local_task_sends_there_without_reshuffling():
    # The cluster word count's spout feeds one splitter in its own worker: a reshuffle of a
    # one-task order per tuple cost that worker a third of its throughput.
    class NoShuffles(random.Random):
        def shuffle(self, x):
            raise AssertionError("a one-task order was reshuffled")

    choose = chooser(g.LOCAL_OR_SHUFFLE, local_tasks={9}, rng=NoShuffles(3))
    assert {tuple(choose([i, "x"])) for i in range(50)} == {(9,)}


def test_make_chooser_partial_key_two_choices_and_balance():
    hot_key = splittable_key(4)
    choose = chooser(g.PARTIAL_KEY, ("key",))
    seen = defaultdict(Counter)
    for i in range(2000):
        seen[hot_key][choose([i, hot_key])[0]] += 1
        if i % 2:
            key = f"cold-{i % 37}"
            seen[key][choose([i, key])[0]] += 1
    assert all(len(tasks) <= 2 for tasks in seen.values())
    assert len(seen) == 38
    hot = seen[hot_key]
    assert len(hot) == 2
    a, b = hot.values()
    assert abs(a - b) <= 0.2 * (a + b), hot


def test_make_chooser_partial_key_choices_are_independent_of_key_length():
    two_choices = 0
    letters = string.ascii_letters
    for key in letters:
        choose = chooser(g.PARTIAL_KEY, ("key",))  # fresh load counts per key
        tasks = {choose([i, key])[0] for i in range(10)}
        assert len(tasks) <= 2
        two_choices += len(tasks) == 2
    # Independent hashes collide for 1/4 of keys: expect ~39 of 52 with two choices.
    assert two_choices >= len(letters) // 2, two_choices


def _partial_key_hash(key: bytes, offset: int) -> int:
    """Partial-key grouping's hash, written out here in Python ints: 64-bit FNV-1a from
    ``offset``, then splitmix64's finaliser."""
    mask = (1 << 64) - 1
    h = offset
    for byte in key:
        h = ((h ^ byte) * 0x100000001B3) & mask
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
    return h ^ (h >> 31)


PARTIAL_KEY_OFFSETS = (0xCBF29CE484222325, 0x6A09E667F3BCC908)


def test_partial_key_hash_is_what_its_steps_say():
    # Compiled, the hash runs in C integers over the key's bytes (or an ASCII str's characters
    # where they are): it must give exactly what the same steps in Python ints give.
    import msgpack
    keys = [b"", b"a", b"\xff" * 3, bytes(range(256)), msgpack.packb(["hot", 7])]
    for offset in PARTIAL_KEY_OFFSETS:
        for key in keys:
            assert choosers.key_hash(key, offset) == _partial_key_hash(key, offset)
        for text in ("", "w", "hotkey", string.printable):
            assert choosers.ascii_key_hash(text, offset) == _partial_key_hash(text.encode(), offset)


def test_partial_key_candidates_are_the_two_hashes_of_the_key():
    # The two candidates of a one-str key are its characters' two hashes; of any other key,
    # its msgpack bytes'. The first candidate wins a tie, then the one sent less to.
    import msgpack
    tasks = [10, 11, 12, 13, 14, 15, 16]
    for key, packed in (("hotkey", b"hotkey"), ("\u00e9t\u00e9", msgpack.packb(["\u00e9t\u00e9"])),
                        (1234, msgpack.packb([1234]))):
        first, second = (tasks[_partial_key_hash(packed, offset) % len(tasks)]
                         for offset in PARTIAL_KEY_OFFSETS)
        choose = chooser(g.PARTIAL_KEY, ("key",), tasks=tasks)
        picks = [choose([0, key])[0] for _ in range(4)]
        assert picks == ([first, second, first, second] if first != second else [first] * 4)
    choose = chooser(g.PARTIAL_KEY, ("key", "n"), tasks=tasks)
    packed = msgpack.packb(["k", 3])
    first = tasks[_partial_key_hash(packed, PARTIAL_KEY_OFFSETS[0]) % len(tasks)]
    assert choose([3, "k"]) == [first]


def test_make_chooser_custom_is_prepared_with_sorted_targets():
    calls = []  # shared even if make_chooser works on a copy of the grouping

    class Custom:
        def prepare(self, context, stream, target_tasks):
            calls.append(("prepare", context, stream, list(target_tasks)))
            self.targets = list(target_tasks)

        def choose_tasks(self, task_id, values):
            calls.append(("choose", task_id, list(values)))
            return [self.targets[-1]]

    ctx = "the-context"
    choose = make_chooser(Grouping(g.CUSTOM, custom=Custom()), ["n"], TASKS, source_task=42,
                          context=ctx, stream="s1")
    assert calls == [("prepare", ctx, "s1", sorted(TASKS))]
    assert choose([7]) == [9]
    assert calls[-1] == ("choose", 42, [7])


def test_stable_hash_is_deterministic_across_processes():
    values = [["word"], ["日本語"], [12345], [-7], [b"\x00\xff"], ["a", 1], [1.5], [None],
              [["nested", 1]], [{"k": "v"}], [True]]
    here = [stable_hash(v) for v in values]
    assert here == [stable_hash(list(v)) for v in values]
    assert len(set(here)) == len(values)
    code = ("import sys, json; from stormlet.runtime.choosers import stable_hash; "
            "print(json.dumps([stable_hash(v) for v in " + repr(values) + "]))")
    outputs = set()
    for seed in ("1", "2", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=30, check=True)
        outputs.add(res.stdout.strip())
    assert len(outputs) == 1
    import json
    assert json.loads(outputs.pop()) == here
    # Known values: a str key hashes as CRC-32 of its UTF-8, an int as itself.
    import zlib
    assert stable_hash(["word"]) == zlib.crc32(b"word")
    assert stable_hash([12345]) == 12345
    assert stable_hash([-1]) >= 0
