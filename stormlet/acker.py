"""The acker ledger: Storm's XOR trick for knowing when a tuple tree is fully processed.

Every edge of a tuple tree gets a random 64-bit id. The acker holds, per spout tuple (``root``),
the XOR of every edge id it has heard of: the spout reports the edges it created (``init``), and
each bolt that acks a tuple reports that tuple's edge id XOR the edge ids of the tuples it anchored
to it (``ack``). Each edge id is therefore XORed in exactly twice, once by its creator and once by
its consumer, and the value returns to zero exactly when the whole tree is acked (a false zero
needs a 2^-64 coincidence). State is a few dozen bytes per root whatever the tree's size.

Entries live in a 3-bucket rotating map rotated every message timeout, so an entry nobody touches
is dropped silently after 2T to 3T; the spout's own 2-bucket map times tuples out first (T to 2T)
and then asks the acker who the tree last reached (``timeouts``).

An entry is one int, ``xor << 32 | last_component << 16 | spout_task``; compiled, the buckets
(an ``IntMap`` each) keep entries in flat arrays, 29 to 57 bytes per root with no object each.
``spout_task`` 0 means "init not seen yet"; component and task numbers must fit in 16 bits. A
root failed before its init arrived is held as a ``_FailedEarly`` until the init says which spout
task to tell.

This class is pure bookkeeping: it reads flat batches and appends notifications to per-spout-task
lists, so the executor that owns it decides how they travel, and tests drive it directly.
"""

from __future__ import annotations

from typing import NamedTuple

import cython

from .fail_reason import TIMEOUT
from .int_map import IntMap
from .protocol import AckFail, AckInit, SpoutFail, records
from .rotating_map import RotatingMap

TASK_MASK = 0xFFFF
COMPONENT_SHIFT = 16
XOR_SHIFT = 32
MAX_TASK = TASK_MASK


class _FailedEarly(NamedTuple):
    kind: str
    component: int
    message: str | None


Notifications = dict[int, list]  # spout task -> flat batch of records for that task


class Acker:
    def __init__(self, buckets: int = 3):
        # Compiled, roots live in packed arrays (see int_map.py); interpreted, that code is
        # several times slower than a dict, so dicts it is, at about 82 bytes a root.
        bucket = IntMap if cython.compiled else dict
        self.pending: RotatingMap[int, int | _FailedEarly] = RotatingMap(buckets, bucket)

    def __len__(self) -> int:
        return len(self.pending)

    def inits(self, batch: list, component: int, acked: Notifications,
              failed: Notifications) -> None:
        """``batch`` holds ``AckInit`` records from spout ``component``."""
        newest = self.pending.newest()
        take = self.pending.take
        for root, value, task in records(AckInit, batch):
            entry = take(root)
            last = component
            if entry is not None:
                if type(entry) is _FailedEarly:
                    failed.setdefault(task, []).extend(
                        SpoutFail(root, entry.kind, entry.component, entry.message))
                    continue
                # An ack arrived before this init: fold it in and keep who acked.
                value ^= entry >> XOR_SHIFT
                last = (entry >> COMPONENT_SHIFT) & TASK_MASK
            if value == 0:
                acked.setdefault(task, []).append(root)
            else:
                newest[root] = (value << XOR_SHIFT) | (last << COMPONENT_SHIFT) | task

    def acks(self, batch: dict[int, int], component: int, acked: Notifications) -> None:
        """``batch`` maps root -> XOR of the ack values a task of ``component`` sent for it
        (senders combine acks for the same root before sending: XOR is associative)."""
        newest = self.pending.newest()
        pop_newest = newest.pop
        take = self.pending.take
        for root, value in batch.items():
            # Most entries are in the newest bucket: look there before asking the map.
            entry = pop_newest(root, None)
            if entry is None:
                entry = take(root)
                if entry is None:
                    # The ack may arrive before the spout's init: start the entry without a task.
                    newest[root] = (value << XOR_SHIFT) | (component << COMPONENT_SHIFT)
                    continue
            if type(entry) is not int:
                newest[root] = entry  # failed already; wait for the init to report it
                continue
            value ^= entry >> XOR_SHIFT
            task = entry & TASK_MASK
            if value == 0 and task:
                acked.setdefault(task, []).append(root)
            else:
                newest[root] = (value << XOR_SHIFT) | (component << COMPONENT_SHIFT) | task

    def fails(self, batch: list, component: int, failed: Notifications) -> None:
        """``batch`` holds ``AckFail`` records: a task of ``component`` failed these roots."""
        newest = self.pending.newest()
        take = self.pending.take
        for root, kind, message in records(AckFail, batch):
            entry = take(root)
            if type(entry) is int and entry & TASK_MASK:
                failed.setdefault(entry & TASK_MASK, []).extend(
                    SpoutFail(root, kind, component, message))
            elif type(entry) is _FailedEarly:
                newest[root] = entry  # the first failure is the one to report
            else:
                newest[root] = _FailedEarly(kind, component, message)

    def resets(self, roots: list[int], reset: Notifications) -> None:
        """Restart the expiry of these roots; tell their spout tasks to do the same."""
        touch = self.pending.touch
        newest = self.pending.newest()
        for root in roots:
            if touch(root):
                entry = newest[root]   # touch moved it there
                if type(entry) is int and entry & TASK_MASK:
                    reset.setdefault(entry & TASK_MASK, []).append(root)

    def timeouts(self, roots: list[int], spout_task: int, failed: Notifications) -> None:
        """The spout timed these roots out: forget them and report who each tree last reached
        (component 0 when this acker never heard of the root)."""
        take = self.pending.take
        out = failed.setdefault(spout_task, [])
        for root in roots:
            entry = take(root)
            if type(entry) is _FailedEarly:
                # A bolt failed it but the init never came: the failure is the better answer.
                out.extend(SpoutFail(root, entry.kind, entry.component, entry.message))
                continue
            component = (entry >> COMPONENT_SHIFT) & TASK_MASK if entry is not None else 0
            out.extend(SpoutFail(root, TIMEOUT, component, None))

    def rotate(self) -> int:
        """Drop entries untouched for two to three rotations; return how many were dropped."""
        return len(self.pending.rotate())
