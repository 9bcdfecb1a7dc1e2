"""Where executors run: Storm's even scheduler, repair of assignments that lost workers, and
spreading a topology back over the workers it asked for once slots are free again.

Repair and spreading back move as little as they can: the executors of lost workers, and then
only those needed to fill the new workers. A worker whose own executors stay keeps running and
takes on or gives up executors while it runs (worker.py), so its in-flight trees survive.

A slot is a ``Slot(supervisor, host, port)``; an assignment's executors are a list of
``Executor(component, tasks, supervisor, host, port)`` (both in zk_state, which stores them).
"""

from __future__ import annotations

from typing import Any

from ..runtime.engine import plan_executors
from ..runtime.protocol import ACKER_COMPONENT
from ..topology import number_tasks
from .zk_state import Executor, Slot


class SchedulingError(Exception):
    pass


def plan_from_summary(summary: dict[str, Any], n_ackers: int,
                      executors: dict[str, int] | None = None) -> list[tuple[str, list[int]]]:
    """Executors as (component, tasks) from an inspected topology summary: the numbering and
    splitting of local mode (``runtime.engine.plan_executors``), with rebalance overrides."""
    components = summary["components"]
    counts = {cid: c["tasks"] for cid, c in components.items()}
    if n_ackers:
        counts[ACKER_COMPONENT] = n_ackers
    executor_counts = {cid: c["executors"] for cid, c in components.items()}
    executor_counts.update(executors or {})
    order = sorted(components, key=lambda cid: (not components[cid]["spout"], cid))
    return plan_executors(number_tasks(counts), executor_counts, order)


def pick_slots(free: list[Slot], n_workers: int) -> list[Slot]:
    """``n_workers`` slots (or as many as are free), spread over supervisors round-robin."""
    by_supervisor: dict[str, list[Slot]] = {}
    for supervisor, host, port in sorted(free):
        by_supervisor.setdefault(supervisor, []).append(Slot(supervisor, host, port))
    picked: list[Slot] = []
    queues = sorted(by_supervisor.values(), key=len, reverse=True)
    while len(picked) < n_workers and any(queues):
        for q in queues:
            if q and len(picked) < n_workers:
                picked.append(q.pop(0))
    return picked


def even_schedule(plan: list[tuple[str, list[int]]], slots: list[Slot]) -> list[Executor]:
    """Deal executors to slots round-robin, so each worker gets an even share of each component."""
    if not slots:
        raise SchedulingError("no free worker slots on any live supervisor")
    return [Executor(component, tasks, *slots[i % len(slots)])
            for i, (component, tasks) in enumerate(plan)]


def repair(assignment: list[Executor], live: set[str], free: list[Slot]) -> list[Executor] | None:
    """Move executors off dead supervisors: each dead worker's executors go to one free slot, or
    are spread over the surviving workers when no slot is free. None when nothing needs moving
    (a healthy assignment is never churned)."""
    dead_slots = sorted({e.slot for e in assignment if e.supervisor not in live})
    if not dead_slots:
        return None
    survivors = sorted({e.slot for e in assignment if e.supervisor in live})
    replacements = pick_slots([s for s in free if s not in survivors], len(dead_slots))
    moved = {}
    for i, dead in enumerate(dead_slots):
        if i < len(replacements):
            moved[dead] = replacements[i]
    repaired, spill = [], 0
    targets = survivors or replacements
    if not targets:
        raise SchedulingError("no live supervisor has a slot for the topology's workers")
    for executor in assignment:
        slot = executor.slot
        if slot in moved:
            slot = moved[slot]
        elif executor.supervisor not in live:
            slot = targets[spill % len(targets)]
            spill += 1
        repaired.append(Executor(executor.component, executor.tasks, *slot))
    return repaired


def spread_back(assignment: list[Executor], asked: int, free: list[Slot]) -> list[Executor] | None:
    """Spread a topology that runs in fewer workers than it ``asked`` for (repair piled lost
    executors onto survivors, or slots were short when it was scheduled) over ``free`` slots:
    each new worker takes executors from the busiest workers until it has its even share. None
    when there is nothing to do (as many workers as asked, no free slot, or too few executors
    to spread)."""
    current = sorted({e.slot for e in assignment})
    room = min(asked, len(assignment)) - len(current)
    new_slots = pick_slots([s for s in free if s not in current], room) if room > 0 else []
    if not new_slots:
        return None
    share = len(assignment) // (len(current) + len(new_slots))
    placed = list(assignment)
    for new_slot in new_slots:
        for _ in range(share):
            loads: dict[Slot, list[int]] = {}
            for i, executor in enumerate(placed):
                loads.setdefault(executor.slot, []).append(i)
            # From the busiest worker (the first such in slot order), its last executor.
            busiest = max(sorted(loads), key=lambda slot: len(loads[slot]))
            taken = placed[loads[busiest][-1]]
            placed[loads[busiest][-1]] = Executor(taken.component, taken.tasks, *new_slot)
    return placed
