"""A spout's roots are drawn so that their acker (``root % n_ackers``) is in the spout's own
worker whenever one is: the init and the spout's ack then never cross between workers."""

from __future__ import annotations

from collections import Counter

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.protocol import ACKER_COMPONENT
from stormlet.runtime.engine import TopologyRuntime


class Numbers(Spout):
    outputs = ["n"]


class Sink(Bolt):
    def execute(self, tup):
        pass


class Elsewhere:
    """A route to another worker that only records what it is given."""

    def __init__(self) -> None:
        self.messages: list[tuple] = []

    def put(self, message: tuple) -> None:
        self.messages.append(message)

    def put_data(self, message: tuple, stopping=None) -> float:
        self.messages.append(message)
        return 0.0

    def accepting(self, task: int) -> bool:
        return True


def spout_collector(n_ackers: int, local_ackers: list[int]):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("sink", Sink()).shuffle_grouping("numbers")
    topology = b.build()
    conf = {"topology.acker.executors": n_ackers}
    probe = TopologyRuntime("t", topology, conf)
    layout = probe.layout
    ackers = layout.acker_tasks
    here = [("numbers", layout.component_tasks["numbers"])] + \
        [(ACKER_COMPONENT, [ackers[i]]) for i in local_ackers]
    elsewhere = Elsewhere()
    remote = {task: elsewhere for task in layout.task_component
              if task not in {t for _c, tasks in here for t in tasks}}
    runtime = TopologyRuntime("t", topology, conf, plan=here, remote_routes=remote)
    (task,) = runtime.executors["numbers"][0].tasks
    return task.collector, ackers


def test_roots_go_to_an_acker_in_this_worker_and_stay_random_64_bit_ids():
    collector, ackers = spout_collector(n_ackers=3, local_ackers=[1])
    for i in range(3000):
        collector.emit([i], msg_id=i)
    roots = [root for bucket in collector._pending.buckets for root in bucket]
    assert len(set(roots)) == 3000
    assert {root % 3 for root in roots} == {1}
    assert all(0 < root < 2**64 for root in roots)
    # The high bits are still spread: no bias toward small ids.
    assert Counter(root >> 62 for root in roots).most_common()[-1][1] > 500


def test_with_two_local_ackers_of_four_both_share_the_roots():
    collector, _ = spout_collector(n_ackers=4, local_ackers=[0, 3])
    for i in range(2000):
        collector.emit([i], msg_id=i)
    residues = Counter(root % 4 for bucket in collector._pending.buckets for root in bucket)
    assert set(residues) == {0, 3}
    assert min(residues.values()) > 800


def test_with_no_acker_here_roots_are_spread_over_all_of_them():
    collector, _ = spout_collector(n_ackers=2, local_ackers=[])
    for i in range(1000):
        collector.emit([i], msg_id=i)
    residues = Counter(root % 2 for bucket in collector._pending.buckets for root in bucket)
    assert set(residues) == {0, 1}
