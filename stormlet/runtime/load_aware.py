"""Load-aware messaging: what weighs a load-aware shuffle's choice (Storm 2's
LoadAwareShuffleGrouping, docs/LocalityAwareness.md), off the per-tuple path.

A ``choosers.LoadAwareChooser`` walks a ring of its targets; once a second the runtime's timer
thread gives each a new ring made here by its ``Balancer``, from every target's load and place.

Place: a target is in one of four scopes, nearest first: ``WORKER_LOCAL`` (an inbox in this
process), ``HOST_LOCAL`` (a worker on this host), ``RACK_LOCAL`` (a worker on another host:
stormlet knows no racks, so every host is in one, as with Storm's default rack mapping) and
``EVERYTHING`` (a task with no route now). A scope holds its own tasks and those of the nearer
scopes. The balancer starts in the worker-local scope (widening at once past an empty one);
when its scope's mean load passes ``topology.localityaware.higher.bound`` it widens one step,
and when the next smaller scope's mean load falls below ``topology.localityaware.lower.bound``
it narrows back (bang-bang control, as Storm's).

Load: a target's load is a number from 0 to 1. Here, the fraction of its inbox's capacity that
its inbox held, sampled ten times a second and averaged over the last second (``LoadSampler``):
stormlet's inboxes hold a couple of batches, not Storm's 32,768 tuples, so one look at a
queue says little. A task in another worker has the load its route reports (``load(task)``):
1 while its worker asks for its data to be held (backpressure.py), else how full the sender's
queue is, Storm's "messages not yet through to the server".

Weights: within its scope each target has a weight from 0 to ``MAX_WEIGHT`` (all start at it,
and again at each change of scope); a target within ``CONGESTION_SLACK`` of the least loaded
gains 1 a refresh, any other loses 10, so a slowed task sheds its traffic in seconds and wins
it back slowly. The ring holds each target in proportion to its weight, shuffled.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from .choosers import LoadAwareChooser

log = logging.getLogger(__name__)

WORKER_LOCAL, HOST_LOCAL, RACK_LOCAL, EVERYTHING = range(4)
SCOPE_NAMES = ("worker-local", "host-local", "rack-local", "everything")
MAX_WEIGHT = 100
# A target this close to the least loaded one counts as not congested (Storm's 5 %).
CONGESTION_SLACK = 0.05
GROWTH, SHRINK = 1, 10
# How often loads are looked at, and how often the rings are made anew from them.
SAMPLE_SECS = 0.1
REFRESH_SECS = 1.0


def ring_capacity(targets: int) -> int:
    """The ring's length: Storm's, 1000 slots or 5 per target, whichever is more."""
    return 1 if targets == 1 else max(1000, 5 * targets)


def scope_of(route: Any, host: str | None) -> int:
    """The scope of a task reached through ``route`` from a worker on ``host``: an inbox here
    (a route with no ``host``) is worker-local; a route to another worker names its host."""
    if route is None:
        return EVERYTHING
    route_host = getattr(route, "host", None)
    if route_host is None:
        return WORKER_LOCAL
    return HOST_LOCAL if route_host == host else RACK_LOCAL


class Balancer:
    """One load-aware chooser's scope and weights, and the ring made from them (Storm's
    ``updateRing``). Called from one thread at a time (the runtime's timer thread)."""

    def __init__(self, chooser: LoadAwareChooser, higher_bound: float, lower_bound: float,
                 rng: random.Random | None = None):
        self.chooser = chooser
        self.tasks = [single[0] for single in chooser.singles]
        self._singles = {single[0]: single for single in chooser.singles}
        self.higher_bound = higher_bound
        self.lower_bound = lower_bound
        self.capacity = ring_capacity(len(self.tasks))
        self.weights = dict.fromkeys(self.tasks, MAX_WEIGHT)
        self.scope = WORKER_LOCAL
        self._rng = rng or random.Random()
        self._made: tuple | None = None   # the targets and weights of the ring in use

    def in_scope(self, scope: int, scopes: dict[int, int]) -> list[int]:
        """The targets in ``scope``: its own and the nearer scopes' (``scopes``: task ->
        scope; a task not in it has no route now)."""
        return [task for task in self.tasks if scopes.get(task, EVERYTHING) <= scope]

    def refresh(self, scopes: dict[int, int], load: Callable[[int], float] | None) -> None:
        """Move the scope as the loads say, adjust the weights and hand the chooser a new ring
        if they changed. ``load`` None: no loads known yet (the scope only widens past
        empty ones, as Storm's first ring)."""
        before = self.scope
        self.scope = self._next_scope(scopes, load)
        if self.scope != before:
            log.debug("load-aware shuffle to tasks %s: scope %s -> %s", self.tasks,
                      SCOPE_NAMES[before], SCOPE_NAMES[self.scope])
            self.weights = dict.fromkeys(self.tasks, MAX_WEIGHT)
        targets = self.in_scope(self.scope, scopes)
        if load is not None:
            loads = {task: load(task) for task in targets}
            least = min(loads.values())
            for task in targets:
                weight = self.weights[task]
                self.weights[task] = (min(MAX_WEIGHT, weight + GROWTH)
                                      if loads[task] <= least + CONGESTION_SLACK
                                      else max(0, weight - SHRINK))
        made = (tuple(targets), tuple(self.weights[task] for task in targets))
        if made != self._made:
            self._made = made
            self.chooser.use(self._ring(targets))

    def _next_scope(self, scopes: dict[int, int], load: Callable[[int], float] | None) -> int:
        scope = self.scope
        targets = self.in_scope(scope, scopes)
        while not targets and scope < EVERYTHING:   # nothing near: look further at once
            scope += 1
            targets = self.in_scope(scope, scopes)
        if load is None:
            return scope
        if _mean(load, targets) > self.higher_bound:
            return min(scope + 1, EVERYTHING)
        if scope > WORKER_LOCAL:
            nearer = self.in_scope(scope - 1, scopes)
            if nearer and _mean(load, nearer) < self.lower_bound:
                return scope - 1
        return scope

    def _ring(self, targets: list[int]) -> list[list[int]]:
        """About ``capacity`` slots, each target's share its share of the weights, shuffled.
        With equal weights (no target congested, the usual case) the ring is shuffled passes
        over the targets, each holding every target once: as even over any window as a
        plain shuffle."""
        singles = [self._singles[task] for task in targets]
        weights = {self.weights[task] for task in targets}
        if len(weights) == 1:
            ring: list[list[int]] = []
            for _ in range(max(1, self.capacity // len(singles))):
                self._rng.shuffle(singles)
                ring += singles
            return ring
        total = sum(self.weights[task] for task in targets)
        ring = []
        for task in targets:
            ring += [self._singles[task]] * (self.weights[task] * self.capacity // total)
        while len(ring) < self.capacity:   # what rounding left: drawn from the ring
            ring.append(ring[self._rng.randrange(len(ring))])
        self._rng.shuffle(ring)
        return ring


def _mean(load: Callable[[int], float], tasks: list[int]) -> float:
    return sum(load(task) for task in tasks) / len(tasks)


class LoadSampler:
    """The local inboxes' loads: each look adds how full each inbox is (at most 1), and
    ``loads`` gives the mean of the looks since the last call."""

    def __init__(self) -> None:
        self._sums: dict[int, float] = {}
        self._looks = 0

    def look(self, inboxes: dict[int, Any]) -> None:
        """One look at ``inboxes`` (task -> its executor's inbox)."""
        sums = self._sums
        for task, inbox in inboxes.items():
            sums[task] = sums.get(task, 0.0) + min(1.0, inbox.qsize() / inbox.capacity)
        self._looks += 1

    def loads(self) -> dict[int, float]:
        looks = self._looks
        loads = {task: total / looks for task, total in self._sums.items()} if looks else {}
        self._sums = {}
        self._looks = 0
        return loads


class LoadAwareness:
    """Every load-aware chooser of a runtime and what feeds them: ``tick(now, ...)`` from the
    runtime's timer thread looks at the inboxes every SAMPLE_SECS and refreshes the rings every
    REFRESH_SECS. ``balancers`` is replaced whole when executors come or go."""

    def __init__(self, higher_bound: float, lower_bound: float, host: str | None = None):
        self.higher_bound = higher_bound
        self.lower_bound = lower_bound
        self.host = host   # this worker's host, as its peers' routes name theirs
        self.balancers: dict[int, list[Balancer]] = {}   # by sending task
        self.sampler = LoadSampler()
        self._next_look = 0.0
        self._next_refresh = 0.0

    def add(self, task: int, choosers: list[LoadAwareChooser]) -> None:
        if choosers:
            self.balancers = {**self.balancers, task: [
                Balancer(chooser, self.higher_bound, self.lower_bound) for chooser in choosers]}

    def drop(self, tasks: set[int]) -> None:
        self.balancers = {t: b for t, b in self.balancers.items() if t not in tasks}

    def due(self) -> float | None:
        """When ``tick`` next has something to do (monotonic), or None with no balancers."""
        if not self.balancers:
            return None
        return min(self._next_look, self._next_refresh)

    def tick(self, now: float, routes: list[Any], inboxes: dict[int, Any]) -> None:
        """Look at ``inboxes`` (local task -> inbox) if due, and refresh every ring if due,
        with each target's scope read from ``routes`` (task -> route) now."""
        if not self.balancers:
            return
        if now >= self._next_look:
            self._next_look = now + SAMPLE_SECS
            self.sampler.look(inboxes)
        if now >= self._next_refresh:
            first = self._next_refresh == 0.0
            self._next_refresh = now + REFRESH_SECS
            self.refresh(routes, None if first else self.sampler.loads())

    def refresh(self, routes: list[Any], local: dict[int, float] | None) -> None:
        """Every balancer's refresh, with ``local`` the loads of the tasks here (None: none
        known yet) and the others' from their routes."""
        load = None if local is None else _loads(routes, local)
        scopes: dict[int, int] = {}
        for group in self.balancers.values():
            for balancer in group:
                for task in balancer.tasks:
                    if task not in scopes:
                        route = routes[task] if task < len(routes) else None
                        scopes[task] = scope_of(route, self.host)
                balancer.refresh(scopes, load)


def _loads(routes: list[Any], local: dict[int, float]) -> Callable[[int], float]:
    """A task's load: measured here for a local task, its route's word for another's (0 for
    a route that cannot tell; 1 for a task with no route, as Storm's "not connected")."""
    def load(task: int) -> float:
        found = local.get(task)
        if found is not None:
            return found
        route = routes[task] if task < len(routes) else None
        if route is None:
            return 1.0
        of = getattr(route, "load", None)
        return of(task) if of is not None else 0.0
    return load
