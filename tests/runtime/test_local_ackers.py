"""A spout draws its roots for the ackers in its own process, when only some are there."""

from __future__ import annotations

import threading
from collections.abc import Callable

from stormlet.runtime.metrics import TaskMetrics
from stormlet.runtime.protocol import ACK_INIT
from stormlet.runtime.rotating_map import RotatingMap
from stormlet.runtime.routing import StreamRoute
from stormlet.runtime.task_collectors import SpoutCollector
from stormlet.runtime.transfer import Transfer
from stormlet.tuples import MAX_ID, StreamInfo

SPOUT, BOLT, ACKERS = 1, 2, [10, 11, 12]


class Inits:
    """A route that keeps the acker inits it is handed, by acker task."""

    def __init__(self) -> None:
        self.by_acker: dict[int, list[int]] = {}

    def put(self, message: tuple) -> None:
        kind, dest, _src, batch = message
        assert kind == ACK_INIT
        self.by_acker.setdefault(dest, []).extend(batch[0::3])  # (root, xor, spout task)

    def put_data(self, message: tuple, stopping: threading.Event | None = None,
                 wait: bool = True) -> None:
        return None

    def accepting(self, task: int) -> bool:
        return True

    def when_room(self, task: int, wake: Callable[[], object]) -> None:
        pass   # never full: no one waits


def roots_by_acker(drawn: list[int], local_ackers: list[int]) -> dict[int, list[int]]:
    """Emit one tracked tuple per id in ``drawn`` (the spout's random ids, edges included)."""
    inits = Inits()
    routes = [inits] * (max(ACKERS) + 1)
    metrics = TaskMetrics("spout", SPOUT, None, ["default"])
    transfer = Transfer(SPOUT, routes, [BOLT], ACKERS, threading.Event(), metrics)
    route = StreamRoute(StreamInfo("spout", "default", ["v"]), direct=False)
    route.choosers.append(lambda values: [BOLT])
    route.seal()
    ids = iter(drawn)
    collector = SpoutCollector("spout", SPOUT, {"default": route}, transfer, True, metrics,
                               random_bits=lambda _bits: next(ids), pending=RotatingMap(2),
                               dead_letters=None, local_ackers=local_ackers)
    for i in range(len(drawn) // 2):
        collector.emit([i], msg_id=i)
    transfer.flush()
    return inits.by_acker


# Roots as drawn (each followed by its one edge), the edges of 64 bits included.
DRAWN_ROOTS = [1, 2, 3, 4, 5, 0x1234_5678_9ABC_DEF0, MAX_ID, MAX_ID - 1, MAX_ID - 2, 2**63]


def drawn_with_edges() -> list[int]:
    return [x for root in DRAWN_ROOTS for x in (root, 0xE)]


def test_roots_go_to_the_one_local_acker_keeping_their_other_bits():
    by_acker = roots_by_acker(drawn_with_edges(), local_ackers=[1])
    assert list(by_acker) == [ACKERS[1]]
    roots = by_acker[ACKERS[1]]
    assert len(roots) == len(DRAWN_ROOTS)
    for drawn, root in zip(DRAWN_ROOTS, roots):
        assert 0 < root <= MAX_ID
        assert root % len(ACKERS) == 1
        assert abs(root - drawn) < len(ACKERS)   # only its residue changed


def test_roots_spread_over_several_local_ackers():
    drawn = [(i << 32) | 7 for i in range(64)]
    by_acker = roots_by_acker([x for root in drawn for x in (root, 0xE)], local_ackers=[0, 2])
    assert set(by_acker) == {ACKERS[0], ACKERS[2]}
    for acker, roots in by_acker.items():
        assert all(root % len(ACKERS) == ACKERS.index(acker) for root in roots)
        assert len(roots) >= 16


def test_roots_stay_as_drawn_when_every_acker_or_none_is_local():
    for local in ([0, 1, 2], []):
        by_acker = roots_by_acker(drawn_with_edges(), local_ackers=local)
        got = sorted(root for roots in by_acker.values() for root in roots)
        assert got == sorted(DRAWN_ROOTS)
        for acker, roots in by_acker.items():
            assert all(root % len(ACKERS) == ACKERS.index(acker) for root in roots)
