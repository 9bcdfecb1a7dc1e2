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

An entry is two numbers: the tree's XOR, and a low word ``last_component << 16 | spout_task``.
A bucket is an ``IntMap``, which keeps them in flat arrays (29 to 57 bytes per root, no object
each) and hands them to the acker as two numbers (compiled, two C integers, so an update makes no
int object). The compiled and interpreted builds run this same code on the same bucket type, so
a test of either tests the ledger the other runs. ``spout_task`` 0 means "init not seen yet";
component and task numbers must fit in 16 bits. A root failed before
its init arrived is held apart, as a ``_FailedEarly`` in a second rotating map, until the init
says which spout task to tell.

This class is pure bookkeeping: it reads flat batches and appends notifications to per-spout-task
lists, so the executor that owns it decides how they travel, and tests drive it directly.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from ..fail_reason import TIMEOUT
from .int_map import IntMap
from .protocol import AckFail, AckInit, SpoutFail, records
from .rotating_map import RotatingMap

TASK_MASK = 0xFFFF
COMPONENT_SHIFT = 16
MAX_TASK = TASK_MASK


class _FailedEarly(NamedTuple):
    kind: str
    component: int
    message: str | None


Notifications = dict[int, list]  # spout task -> flat batch of records for that task


def roots_in_acks(batch: array) -> int:
    """How many root updates (pairs) a batch for ``Acker.acks`` holds."""
    return len(batch) // 2


def _take(buckets: list, root: int) -> tuple[bool, int, int]:
    """Remove ``root``'s entry from the newest bucket holding it: (found, xor, low word)."""
    for bucket in buckets:
        found, xor, low = bucket.take_u64(root)   # compiled, key and parts C integers
        if found:
            return True, xor, low
    return False, 0, 0


class Acker:
    def __init__(self, buckets: int = 3):
        # Roots live in packed arrays (see runtime/int_map.py), in both builds. RotatingMap is
        # not generic: pending maps root -> packed entry (int), failed_early root -> _FailedEarly.
        self.pending: RotatingMap = RotatingMap(buckets, IntMap)
        self.failed_early: RotatingMap = RotatingMap(buckets)
        # False while failed_early is known to be empty (until a fail or after a rotation), so a
        # run without failures never looks there.
        self._any_failed_early = False

    def __len__(self) -> int:
        return len(self.pending) + len(self.failed_early)

    def __contains__(self, root: int) -> bool:
        return root in self.pending or root in self.failed_early

    def inits(self, batch: list, component: int, acked: Notifications,
              failed: Notifications) -> None:
        """``batch`` holds ``AckInit`` records from spout ``component``."""
        buckets = self.pending.buckets()
        newest = buckets[0]
        for root, value, task in records(AckInit, batch):
            found, xor, low = _take(buckets, root)
            last = component
            if found:
                # An ack arrived before this init: fold it in and keep who acked.
                value ^= xor
                last = low >> COMPONENT_SHIFT
            elif self._any_failed_early:
                early = self.failed_early.take(root)
                if early is not None:
                    failed.setdefault(task, []).extend(
                        SpoutFail(root, early.kind, early.component, early.message))
                    continue
            if value == 0:
                acked.setdefault(task, []).append(root)
            else:
                newest.put_u64(root, value, (last << COMPONENT_SHIFT) | task)

    def acks(self, batch: array, component: int, acked: Notifications) -> None:
        """``batch`` holds ``(root, value)`` pairs (``protocol.ack_pairs``) from a task of
        ``component``: each value the XOR of acks that task sent for its root (it combines the
        acks of one root in a row: XOR is associative). Read as C integers, compiled."""
        if type(batch) is not array or batch.typecode != "Q":
            raise TypeError(f"acks come as an array('Q') of (root, value) pairs, not "
                            f"{type(batch).__name__}")
        buckets = self.pending.buckets()
        newest = buckets[0]
        pairs = batch
        for i in range(0, len(pairs) - 1, 2):
            self._ack(buckets, newest, pairs[i], pairs[i + 1], component, acked)

    def _ack(self, buckets: list, newest: IntMap, root: int, value: int, component: int,
             acked: Notifications) -> None:
        found, xor, low = _take(buckets, root)
        if not found:
            if self._any_failed_early and self.failed_early.touch(root):
                return   # failed already; wait for the init to report it
            # The ack may arrive before the spout's init: start the entry without a task.
            newest.put_u64(root, value, component << COMPONENT_SHIFT)
            return
        value ^= xor
        task = low & TASK_MASK
        if value == 0 and task:
            acked.setdefault(task, []).append(root)
        else:
            newest.put_u64(root, value, (component << COMPONENT_SHIFT) | task)

    def fails(self, batch: list, component: int, failed: Notifications) -> None:
        """``batch`` holds ``AckFail`` records: a task of ``component`` failed these roots."""
        buckets = self.pending.buckets()
        for root, kind, message in records(AckFail, batch):
            found, _xor, low = _take(buckets, root)
            if found and low & TASK_MASK:
                failed.setdefault(low & TASK_MASK, []).extend(
                    SpoutFail(root, kind, component, message))
            elif not self.failed_early.touch(root):   # the first failure is the one to report
                self.failed_early.put_new(root, _FailedEarly(kind, component, message))
                self._any_failed_early = True

    def resets(self, roots: list[int], reset: Notifications) -> None:
        """Restart the expiry of these roots; tell their spout tasks to do the same."""
        buckets = self.pending.buckets()
        newest = buckets[0]
        for root in roots:
            found, xor, low = _take(buckets, root)
            if found:
                newest.put_u64(root, xor, low)
                if low & TASK_MASK:
                    reset.setdefault(low & TASK_MASK, []).append(root)
            else:
                self.failed_early.touch(root)

    def timeouts(self, roots: list[int], spout_task: int, failed: Notifications) -> None:
        """The spout timed these roots out: forget them and report who each tree last reached
        (component 0 when this acker never heard of the root)."""
        buckets = self.pending.buckets()
        out = failed.setdefault(spout_task, [])
        for root in roots:
            found, _xor, low = _take(buckets, root)
            early = self.failed_early.take(root)
            if early is not None:
                # A bolt failed it but the init never came: the failure is the better answer.
                out.extend(SpoutFail(root, early.kind, early.component, early.message))
                continue
            component = low >> COMPONENT_SHIFT if found else 0
            out.extend(SpoutFail(root, TIMEOUT, component, None))

    def rotate(self) -> int:
        """Drop entries untouched for two to three rotations; return how many were dropped."""
        dropped = len(self.pending.rotate()) + len(self.failed_early.rotate())
        self._any_failed_early = len(self.failed_early) > 0
        return dropped
