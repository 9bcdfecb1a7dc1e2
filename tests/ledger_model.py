"""Random tuple DAGs built by the real collectors, checked edge by edge against a model.

``Run`` wires the runtime's ``SpoutCollector`` and ``BoltCollector`` (and the public
``BasicOutputCollector`` over the latter) to ``Transfer`` buffers whose routes only record what
is handed over, then plays a random forest of tuple trees: tracked and untracked spout emits,
bolt emits with no anchor, one anchor (as a Tuple, a one-item list, a tuple or a generator),
several anchors (within one tree, across trees, the same parent twice), basic bolts' emits, acks,
fails, errors and resets, and flushes at random points.

The collectors draw ids from ``Ids``: 64-bit ids, as the collectors hold them, that give each id
of one emit its own bit, so any XOR of one emit's ids says exactly which of them it holds. That
lets the model check the collectors without copying their arithmetic:

- a tracked spout emit draws one root and one edge per child; each child carries ``(root,
  edge)``; the init record holds the XOR of those edges and the spout task;
- an anchored emit gives every (child, tracked anchor occurrence) pair its own fresh edge: the
  child's entry for root r holds exactly the edges from anchors that carry r, and the anchor's
  ack value gains exactly the edges of its children; an emit with no tracked anchor draws none;
- an ack sends, per root of the tuple and combined per root per flush, the tuple's own edges
  for that root XOR the edges of its children; a fail sends (root, kind, message) per root.

The acker messages recorded this way are then what the ledger tests deliver to real ackers.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from stormlet.collectors import BasicOutputCollector
from stormlet.fail_reason import ERROR, FAIL
from stormlet.runtime.metrics import TaskMetrics
from stormlet.runtime.protocol import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    DATA,
    AckFail,
    AckInit,
    records,
)
from stormlet.runtime.rotating_map import RotatingMap
from stormlet.runtime.routing import StreamRoute
from stormlet.runtime.task_collectors import BoltCollector, SpoutCollector
from stormlet.runtime.transfer import Transfer
from stormlet.tuples import StreamInfo, Tuple

# Two spout tasks (component 1) feed three bolt components of two tasks each; two ackers.
SPOUT_TASKS = [1, 2]
BOLT_TASKS = [3, 4, 5, 6, 7, 8]
ACKER_TASKS = [9, 10]
N_ACKERS = len(ACKER_TASKS)
COMPONENT_OF = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3, 7: 4, 8: 4}
MAX_TUPLES = 40
TAG_BITS = 8     # a random tag in the low bits spreads roots over the ackers
EMIT_BITS = 16   # one bit per id of an emit (an emit draws at most 8)
HIGH_BITS = 64 - EMIT_BITS - TAG_BITS   # random: ids of different emits never cancel
KINDS = {ACK_INIT: "init", ACK_ACK: "ack", ACK_FAIL: "fail", ACK_RESET: "reset"}


def bits(value: int) -> set[int]:
    """Which ids of one emit (by their draw number in it) an XOR of its ids holds."""
    window = value >> TAG_BITS
    return {i for i in range(EMIT_BITS) if window >> i & 1}


def xor_by_root(pairs) -> dict[int, int]:
    """An ack batch's (root, value) pairs XORed together per root."""
    combined: dict[int, int] = defaultdict(int)
    for root, value in zip(pairs[::2], pairs[1::2]):
        combined[root] ^= value
    return dict(combined)


class Ids:
    """Each id of an emit its own bit, between a random tag and random high bits: XORs of one
    emit's ids decode exactly, and XORs of ids never cancel unless every id in them was XORed
    in twice."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.values: list[int] = []   # the current emit's ids, in draw order

    def new_emit(self) -> None:
        self.values = []

    def decode(self, value: int) -> set[int]:
        """Which of the current emit's ids (by draw number) ``value`` is the XOR of; fails if it
        is not made of them exactly (an id of an earlier emit, say)."""
        held = bits(value)
        made = 0
        for i in held:
            assert i < len(self.values), f"{value:#x} holds an id this emit did not draw"
            made ^= self.values[i]
        assert made == value, f"{value:#x} is not an XOR of this emit's ids"
        return held

    def __call__(self, bits: int) -> int:
        drawn = len(self.values)
        assert bits == 64 and drawn < EMIT_BITS
        value = (self.rng.getrandbits(HIGH_BITS) << (TAG_BITS + EMIT_BITS)) \
            | (1 << (TAG_BITS + drawn)) | self.rng.getrandbits(TAG_BITS)
        self.values.append(value)
        return value


class Recorder:
    """A route that only records: acker messages in order, data batches for the run to take."""

    def __init__(self, run: Run):
        self.run = run

    def put(self, message: tuple) -> None:
        self.run.on_control(message)

    def put_data(self, message: tuple, stopping: threading.Event | None = None,
                 wait: bool = True) -> float | None:
        assert message[0] == DATA
        return None

    def accepting(self, task: int) -> bool:
        return True

    def when_room(self, task: int, wake: Callable[[], object]) -> None:
        pass   # never full: no one waits


class Node:
    """The model's view of one tuple: the edges it carries per root, its children's edges."""

    __slots__ = ("tup", "task", "index", "own", "children", "fate")

    def __init__(self, tup: Tuple, task: int, index: int, own: dict[int, int]):
        self.tup = tup
        self.task = task
        self.index = index
        self.own = own          # root -> XOR of this tuple's edges for it ({} when untracked)
        self.children = 0       # XOR of the edges of tuples anchored to it
        self.fate = "pending"   # then ack, fail, error or drop


class Run:
    def __init__(self, rnd: random.Random, ids_seed: int):
        self.rnd = rnd
        self.ids = Ids(random.Random(ids_seed))
        self.messages: list[tuple] = []      # (kind, acker index, batch, src task, ack counts)
        self.root_task: dict[int, int] = {}  # root -> spout task
        self.tree: dict[int, list[Node]] = {}
        self.nodes: list[Node] = []
        self.node_of: dict[int, Node] = {}   # id(tuple) -> its node
        self.pool: list[Node] = []           # neither acked, failed nor dropped yet
        self.fail_message: dict[int, tuple[str, str]] = {}  # tuple index -> (kind, message)
        self.targets: list[int] = []
        # Acks folded into each task's buffer per acker since its last flush: root -> count.
        self.ack_counts: dict[int, list[defaultdict[int, int]]] = {
            t: [defaultdict(int) for _ in ACKER_TASKS] for t in COMPONENT_OF}
        # The XOR each task's buffered acks must hold per acker: root -> value.
        self.expected_acks: dict[int, list[defaultdict[int, int]]] = {
            t: [defaultdict(int) for _ in ACKER_TASKS] for t in COMPONENT_OF}
        routes = [Recorder(self) for _ in range(max(ACKER_TASKS) + 1)]
        self.transfers: dict[int, Transfer] = {}
        # A spout task's SpoutCollector or a bolt task's BoltCollector: each call below is to
        # the kind its task has.
        self.collectors: dict[int, Any] = {}
        for task, component in COMPONENT_OF.items():
            name = f"c{component}"
            metrics = TaskMetrics(name, task, None, ["default"])
            transfer = Transfer(task, routes, BOLT_TASKS, ACKER_TASKS, threading.Event(), metrics)
            route = StreamRoute(StreamInfo(name, "default", ["v"]), direct=False)
            route.choosers.append(lambda values: list(self.targets))
            route.seal()
            common = (name, task, {"default": route}, transfer, True, metrics)
            if task in SPOUT_TASKS:
                self.collectors[task] = SpoutCollector(*common, random_bits=self.ids,
                                                       pending=RotatingMap(2), dead_letters=None)
            else:
                self.collectors[task] = BoltCollector(*common, random_bits=self.ids)
            self.transfers[task] = transfer

    # ----- what the routes saw

    def on_control(self, message: tuple) -> None:
        kind, dest, src, batch = message
        i = ACKER_TASKS.index(dest)
        counts = None
        if kind == ACK_ACK:
            counts = dict(self.ack_counts[src][i])
            expected = self.expected_acks[src][i]
            assert xor_by_root(batch) == dict(expected), "combined acks differ from the model's"
            self.ack_counts[src][i] = defaultdict(int)
            self.expected_acks[src][i] = defaultdict(int)
        self.messages.append((KINDS[kind], i, batch, src, counts))

    def flush(self, task: int) -> None:
        self.transfers[task].flush()

    # ----- emits, each checked against the model

    def _emit(self, task: int, call) -> tuple[list[tuple[Tuple, int]], list[int], dict]:
        """Run one emit; the children it made (with their tasks), the ids it drew, the init
        records it added."""
        transfer = self.transfers[task]
        data_before = [len(buf) for buf in transfer.data]
        inits_before = [len(buf) for buf in transfer.inits]
        self.ids.new_emit()
        tasks = call()
        assert sorted(tasks) == sorted(self.targets)
        drawn = list(range(len(self.ids.values)))
        children = []
        for t in sorted(set(tasks)):
            new = transfer.data[t][data_before[t]:]
            assert len(new) == tasks.count(t)
            children += [(tup, t) for tup in new]
        inits = {i: transfer.inits[i][inits_before[i]:] for i in range(N_ACKERS)}
        return children, drawn, inits

    def _add(self, tup: Tuple, task: int, own: dict[int, int]) -> Node:
        node = Node(tup, task, len(self.nodes), own)
        self.nodes.append(node)
        self.node_of[id(tup)] = node
        self.pool.append(node)
        for root in own:
            self.tree[root].append(node)
        return node

    def spout_emit(self, task: int, tracked: bool) -> None:
        msg_id = len(self.root_task) if tracked else None
        collector = self.collectors[task]
        children, drawn, inits = self._emit(
            task, lambda: collector.emit([len(self.nodes)], msg_id=msg_id))
        if not tracked:
            assert drawn == [] and not any(inits.values())
            for tup, t in children:
                assert tup.roots is None
                self._add(tup, t, {})
            return
        # One root and one edge per child, all distinct; one init record at the root's acker.
        assert len(drawn) == 1 + len(children)
        [(i, batch)] = [(i, batch) for i, batch in inits.items() if batch]
        [(root, xor, spout_task)] = list(records(AckInit, batch))
        assert spout_task == task and i == root % N_ACKERS
        assert self.ids.decode(root) <= set(drawn)
        self.root_task[root] = task
        self.tree[root] = []
        edges = 0
        for tup, t in children:
            assert tup.roots is not None
            r, edge = tup.roots
            own_bit = self.ids.decode(edge)
            assert r == root and len(own_bit) == 1 and not own_bit & self.ids.decode(root)
            edges ^= edge
            self._add(tup, t, {root: edge})
        assert xor == edges and self.ids.decode(edges) | self.ids.decode(root) == set(drawn)

    def bolt_emit(self, task: int, parents: list[Node], form: str, basic: bool) -> None:
        """Emit from ``task`` anchored to ``parents`` (with repeats), handed over as ``form``, or
        through a basic bolt's collector anchored to ``parents[0]``."""
        collector = self.collectors[task]
        tups = [p.tup for p in parents]
        if basic:
            anchors_call = BasicOutputCollector(collector)
            anchors_call.input = tups[0]
            call = lambda: anchors_call.emit([len(self.nodes)])  # noqa: E731
        else:
            anchors = {"tuple": lambda: tups[0], "list": lambda: tups,
                       "tuple-of": lambda: tuple(tups), "generator": lambda: (t for t in tups),
                       "none": lambda: []}[form]()
            call = lambda: collector.emit([len(self.nodes)], anchors)  # noqa: E731
        before = {id(p): p.tup.ack_val for p in parents}
        children, drawn, inits = self._emit(task, call)
        assert not any(inits.values()), "a bolt emit told the acker"
        tracked = [p for p in parents if p.own] if form != "none" or basic else []
        assert len(drawn) == len(children) * len(tracked), "one edge per child per tracked anchor"
        # Which parent each drawn edge went to: the change in that parent's ack value.
        parent_of: dict[int, Node] = {}
        for p in {id(p): p for p in tracked}.values():
            gained = self.ids.decode(p.tup.ack_val ^ before[id(p)])
            assert len(gained) == len(children) * sum(q is p for q in tracked)
            for edge in gained:
                assert edge not in parent_of
                parent_of[edge] = p
            p.children ^= p.tup.ack_val ^ before[id(p)]
        for p in parents:
            if not p.own:
                assert p.tup.ack_val == before[id(p)], "an untracked anchor gained an edge"
        assert set(parent_of) == set(drawn)
        expected_roots = {root for p in tracked for root in p.own}
        seen: set[int] = set()
        for tup, t in children:
            if not tracked:
                assert tup.roots is None
                self._add(tup, t, {})
                continue
            assert tup.roots is not None
            own = dict(zip(tup.roots[::2], tup.roots[1::2]))
            assert set(own) == expected_roots and len(tup.roots) == 2 * len(own)
            mine = set().union(*(self.ids.decode(v) for v in own.values()))
            assert not mine & seen
            seen |= mine
            # Its edge from each anchor occurrence, and for each root exactly the edges from the
            # anchors that carry that root.
            for p in {id(p): p for p in tracked}.values():
                assert len([e for e in mine if parent_of[e] is p]) == sum(q is p for q in tracked)
            for root, value in own.items():
                assert self.ids.decode(value) == {e for e in mine if root in parent_of[e].own}
            self._add(tup, t, own)
        assert seen == set(drawn)

    # ----- acks, fails and resets

    def ack(self, node: Node) -> None:
        self.collectors[node.task].ack(node.tup)
        for root, edge in node.own.items():
            i = root % N_ACKERS
            self.expected_acks[node.task][i][root] ^= edge ^ node.children
            self.ack_counts[node.task][i][root] += 1

    def fail(self, node: Node, kind: str) -> None:
        transfer = self.transfers[node.task]
        before = [len(buf) for buf in transfer.fails]
        message = f"reason-{node.index}"
        if kind == ERROR:
            self.collectors[node.task].fail_with_error(node.tup, ValueError(message))
            message = f"ValueError: {message}"
        else:
            self.collectors[node.task].fail(node.tup, message)
        self.fail_message[node.index] = (kind, message)
        sent = {(i, record) for i, buf in enumerate(transfer.fails)
                for record in records(AckFail, buf[before[i]:])}
        assert sent == {(root % N_ACKERS, (root, kind, message)) for root in node.own}

    def reset(self, node: Node) -> None:
        transfer = self.transfers[node.task]
        before = [len(buf) for buf in transfer.resets]
        self.collectors[node.task].reset_timeout(node.tup)
        sent = {(i, root) for i, buf in enumerate(transfer.resets) for root in buf[before[i]:]}
        assert sent == {(root % N_ACKERS, root) for root in node.own}

    # ----- a random run

    def generate(self) -> None:
        rnd = self.rnd
        for _ in range(rnd.randint(1, 6)):
            task = rnd.choice(SPOUT_TASKS)
            self.targets = [rnd.choice(BOLT_TASKS) for _ in range(rnd.choice([0, 1, 1, 2, 3]))]
            self.spout_emit(task, tracked=rnd.random() < 0.9)
            if rnd.random() < 0.5:
                self.flush(task)
        while self.pool:
            node = rnd.choice(self.pool)
            action = rnd.random()
            if action < 0.45 and len(self.nodes) < MAX_TUPLES:
                self.targets = [rnd.choice(BOLT_TASKS) for _ in range(rnd.choice([1, 2]))]
                basic = rnd.random() < 0.25
                if basic:
                    self.bolt_emit(node.task, [node], "tuple", basic=True)
                else:
                    others = [n for n in self.pool if n is not node]
                    extra = rnd.sample(others, min(len(others), rnd.choice([0, 0, 1, 2])))
                    if rnd.random() < 0.1:
                        extra.append(node)   # the same parent twice
                    parents = [node] + extra
                    rnd.shuffle(parents)
                    form = rnd.choice(["list", "tuple-of", "generator", "none"])
                    if len(parents) == 1:
                        form = rnd.choice(["tuple", form])
                    self.bolt_emit(node.task, parents, form, basic=False)
            elif action < 0.52:
                self.reset(node)
            else:
                self.pool.remove(node)
                fate = rnd.choices(["ack", "fail", "error", "drop"], weights=[70, 8, 7, 15])[0]
                node.fate = fate
                if fate == "ack":
                    self.ack(node)
                elif fate in ("fail", "error"):
                    self.fail(node, FAIL if fate == "fail" else ERROR)
            if rnd.random() < 0.5:
                self.flush(node.task)
        for task in self.transfers:
            self.flush(task)

    def due(self, root: int) -> str | None:
        """The verdict a root's tree deserves once every message is delivered."""
        fates = [node.fate for node in self.tree[root]]
        if "fail" in fates or "error" in fates:
            return "fail"
        if all(f == "ack" for f in fates):
            return "ack"
        return None

    def acked_count(self, root: int) -> int:
        return sum(1 for node in self.tree[root] if node.fate == "ack")
