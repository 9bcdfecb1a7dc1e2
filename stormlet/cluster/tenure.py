"""Tenures: which run of a worker slot holds its part of an assignment, so a stale one is fenced.

A worker cut off from ZooKeeper cannot learn that nimbus moved its tasks: it runs on, an orphan,
while their new worker runs them too (split brain). Its spouts stop after a while out of touch
(worker.py's fencing), but its bolts, and frames already on their way, would still reach the
workers that now hold the assignment. So each assignment says, for every slot in it, its
*tenure*: the assignment version at which that slot last entered the assignment. A slot that
stays in the assignment keeps its tenure (rebalances and repairs elsewhere leave its worker's
standing alone); a slot that left it (its supervisor's session expired) and comes back later has
a new one. Every frame a worker sends names its slot and its tenure (wire.py), and a receiver
admits it only if the assignment it knows gives that slot that tenure or an older one than the
sender's (``Fence.admits``): an orphan's frames are refused, and counted and reported.

A worker whose slot's tenure in the assignment is no longer its own ends (worker.py): a newer
worker holds that slot, or will.

    assignment = next_assignment(previous, executors)   # nimbus, at every change
    fence = Fence(); fence.update(assignment)            # a worker, at every change
    fence.admits(slot_key(supervisor, port), tenure)     # its receiver, per frame
"""

from __future__ import annotations

import time

from .zk_state import Executor, assigned_executors, valid_assignment, valid_tenures


def slot_key(supervisor: str, port: int) -> str:
    """A slot as frames and tenures name it."""
    return f"{supervisor}:{port}"


def assignment_version(assignment: dict | None) -> int:
    """An assignment's version (0 for none, or for one that names none that is a count)."""
    version = (assignment or {}).get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) and version > 0 \
        else 0


def tenures(assignment: dict | None) -> dict[str, int] | None:
    """Each slot's tenure in ``assignment``; None for an assignment that names none (written
    before tenures existed: nothing is fenced by it)."""
    if not assignment or not valid_tenures(assignment.get("tenures")):
        return None
    return dict(assignment["tenures"])


def next_assignment(previous: dict | None, executors: list[Executor]) -> dict:
    """The assignment that follows ``previous`` (None: the first) with ``executors``: its version
    one higher, each slot keeping its tenure if it was in ``previous``, else starting one now."""
    previous = previous or {}
    version = assignment_version(previous) + 1
    old = tenures(previous)
    if old is None:
        # Written before tenures: its workers run with tenure 0, and keep it where they stay.
        old = ({slot_key(e.supervisor, e.port): 0 for e in assigned_executors(previous)}
               if valid_assignment(previous) else {})
    slots = {slot_key(e.supervisor, e.port) for e in executors}
    return {"executors": executors, "time": time.time(), "version": version,
            "tenures": {key: old.get(key, version) for key in sorted(slots)}}


def slot_tenure(assignment: dict, supervisor: str, port: int) -> int | None:
    """The tenure ``assignment`` gives a slot: 0 when it names no tenures, None when the slot is
    not in it."""
    known = tenures(assignment)
    if known is None:
        return 0
    return known.get(slot_key(supervisor, port))


class Fence:
    """Which senders a worker's receiver admits, from the newest assignment it has seen.
    ``update`` runs on a ZooKeeper watch's thread and ``admits`` on the receiver's: each reads
    or replaces one tuple, which needs no lock."""

    def __init__(self) -> None:
        self._known: tuple[int, dict[str, int] | None] = (0, None)

    def update(self, assignment: dict) -> None:
        self._known = (assignment_version(assignment), tenures(assignment))

    def admits(self, sender: str, tenure: int) -> bool:
        """Whether a frame from ``sender`` (a slot key) with ``tenure`` comes from a worker that
        holds (or, for all this worker knows, newly holds) its slot."""
        version, known = self._known
        if known is None:
            return True
        held = known.get(sender)
        if held is not None:
            # An older tenure: that slot was given again since; the sender is its stale worker.
            # A newer one: the sender has seen an assignment this worker has not yet.
            return tenure >= held
        # Not in the assignment this worker knows: admitted only if the sender's tenure began
        # after it (the sender is ahead); else its slot was dropped: it is an orphan.
        return tenure > version

    def why_refused(self, sender: str, tenure: int) -> str:
        """Why ``admits`` refused this sender, for the operator."""
        version, known = self._known
        held = (known or {}).get(sender)
        if held is not None:
            return (f"its slot was given again at assignment version {held}, after the one it "
                    f"holds ({tenure})")
        return f"its slot is not in the topology's assignment (version {version})"
