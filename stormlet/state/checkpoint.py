"""The checkpoint spout and its state machine (Storm's ``CheckpointSpout`` and
``CheckPointState``).

A topology with stateful bolts gets one extra spout, ``__checkpointspout``. It drives every
stateful bolt through checkpoints on the ``__checkpoint`` stream (fields ``txid``, ``action``),
one action at a time, each a tracked tuple whose tree reaches every stateful bolt:

    PREPARE t    stage the changes since the last checkpoint as checkpoint t
    COMMIT t     make checkpoint t the committed state; acks held since t's PREPARE go out
    ROLLBACK t   drop checkpoint t and every change since; held tuples fail (and are replayed)
    INITSTATE t  hand a bolt its committed state (once, before its first tuple)

The spout's own progress (the last txid and its phase: PREPARING, COMMITTING or COMMITTED) is
saved in the same backend before each action, so a restarted spout resumes where it was. At
start, and after any action fails, it *recovers*: it finishes a COMMITTING checkpoint with
COMMIT, rolls a PREPARING one back, then sends INITSTATE. Otherwise, once a checkpoint interval
has passed since the last one, it sends PREPARE for the next txid, then COMMIT once every bolt
has prepared.

An action whose tuple fails or times out starts a recovery. Its tuples time out after
``topology.state.checkpoint.timeout.secs`` (``action_timeout_secs``; the message timeout when
unset), so an action lost with a killed worker, or dropped by a sender whose link to the
restarted worker was still down, is sent again after that rather than after the message timeout;
and when one of its worker's links comes back, the action in flight is sent again at once
(``links_back``).

In effectively-once (``topology.guarantee``), PREPARE waits for every offset spout task's
positions for the checkpoint, and the end of each recovery starts a new epoch; see
``exactly``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import config as cfg
from ..components import Spout
from ..fail_reason import FailReason
from ..streams import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM  # noqa: F401 (re-exported)
from . import exactly
from .exactly import FAILED, PROGRESS_KEY
from .key_value import KeyValueState
from .providers import namespace, open_state

if TYPE_CHECKING:
    from ..collectors import SpoutOutputCollector
    from ..context import TopologyContext

log = logging.getLogger(__name__)

# The epoch is effectively-once's (``exactly``): 0 in at-least-once.
CHECKPOINT_FIELDS = ("txid", "action", "epoch")

PREPARE, COMMIT, ROLLBACK, INITSTATE = "PREPARE", "COMMIT", "ROLLBACK", "INITSTATE"
PREPARING, COMMITTING, COMMITTED = "PREPARING", "COMMITTING", "COMMITTED"

_PROGRESS_KEY = PROGRESS_KEY
# How long the spout waits, with nothing to send, before it looks again (an ack wakes it).
IDLE_WAIT_MS = 20


def action_timeout_secs(conf: dict[str, Any]) -> float:
    """How long a checkpoint action, or in effectively-once the offset spouts' reports of their
    positions, may take before the checkpoint spout recovers (the action's tuple times out, as a
    spout's does, within one to two of these): ``topology.state.checkpoint.timeout.secs``, else
    the message timeout."""
    timeout = conf.get(cfg.TOPOLOGY_STATE_CHECKPOINT_TIMEOUT_SECS)
    if timeout is None:
        timeout = conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
    return float(timeout)


@dataclass(frozen=True)
class Progress:
    """Where the checkpoints are: the last txid and its phase."""

    txid: int = 0
    phase: str = COMMITTED
    epoch: int = 0

    def next_action(self, recovering: bool) -> str:
        if self.phase == PREPARING:
            return ROLLBACK if recovering else PREPARE
        if self.phase == COMMITTING:
            return COMMIT
        return INITSTATE if recovering else PREPARE

    def next(self, recovering: bool) -> Progress:
        """Where the checkpoints are once this step's action is acked."""
        if self.phase == PREPARING:
            return (Progress(self.txid - 1, COMMITTED, self.epoch) if recovering
                    else Progress(self.txid, COMMITTING, self.epoch))
        if self.phase == COMMITTING:
            return Progress(self.txid, COMMITTED, self.epoch)
        return self if recovering else Progress(self.txid + 1, PREPARING, self.epoch)


class CheckpointSpout(Spout):
    """Emits one checkpoint action at a time; see the module's docstring.

    ``position_sources``: the offset spouts whose positions an effectively-once checkpoint
    holds (set when the topology is built)."""

    def __init__(self, position_sources: tuple[str, ...] = ()):
        self.position_sources = position_sources
        # Links of this worker's that came back after being down (``links_back``, from the
        # worker's sender thread), and how many had when the action in flight was sent.
        self.links_returned = 0
        self.links_returned_at_send = 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(list(CHECKPOINT_FIELDS), stream=CHECKPOINT_STREAM)

    def get_component_configuration(self) -> dict[str, Any]:
        # A checkpoint that fails is recovered from, never given up on.
        return {cfg.TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS: None,
                cfg.TOPOLOGY_MAX_SPOUT_PENDING: None,
                cfg.TOPOLOGY_SPOUT_WAIT_MS: IDLE_WAIT_MS}

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.interval_secs = float(conf[cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS]) / 1000
        self.state: KeyValueState = open_state(
            conf, context.topology_name, namespace(context.topology_name, context.component_id))
        self.progress = Progress(*self.state.get(_PROGRESS_KEY, (0, COMMITTED)))
        self.exactly = exactly.effectively_once(conf)
        self.positions_timeout = action_timeout_secs(conf)
        self.reporters = []
        if self.exactly:
            # Each offset spout task's namespace, where it saves its positions.
            self.reporters = [exactly.open_reader(conf, context.topology_name,
                                                  namespace(context.topology_name, source, task))
                              for source in self.position_sources
                              for task in context.get_component_tasks(source)]
        self.waiting_since: float | None = None
        self.recovering = True
        self.in_flight: tuple[int, str, int] | None = None
        self.sent = 0
        self.last_checkpoint = time.monotonic()

    def links_back(self) -> None:
        """A link from this worker to another came back after it was down (called from any
        thread). The action in flight, sent before, may have been dropped with the link (a
        sender drops what it has for a peer whose link is down): it is sent again, through a
        recovery, at the next call rather than left to time out."""
        self.links_returned += 1

    def next_tuple(self) -> None:
        if self.in_flight is not None:
            if self.links_returned == self.links_returned_at_send:
                return
            txid, action, _ = self.in_flight
            log.warning("checkpoint %s %d: a link that was down is back, and the action may "
                        "have been dropped with it: recovering", action, txid)
            self.in_flight = None   # its late answer, if it comes, is an earlier attempt's
            self.recovering = True
        if not self.recovering and self.progress.phase == COMMITTED:
            if time.monotonic() - self.last_checkpoint < self.interval_secs:
                return
            # Before the save: one that fails (the store unreachable, or refusing a worker cut
            # off from its tasks) is tried again an interval later, not at every call.
            self.last_checkpoint = time.monotonic()
            self._save(self.progress.next(recovering=False))
        action = self.progress.next_action(self.recovering)
        if action == PREPARE and self.reporters and not self._positions_ready():
            return
        self.sent += 1
        self.links_returned_at_send = self.links_returned
        self.in_flight = (self.progress.txid, action, self.sent)
        self.collector.emit([self.progress.txid, action, self.progress.epoch], self.in_flight,
                            CHECKPOINT_STREAM)

    def _positions_ready(self) -> bool:
        """Effectively-once: True once every offset spout task has saved its positions for the
        checkpoint being prepared; a task that reports a failure, or none within the action
        timeout (``action_timeout_secs``), turns the checkpoint into a recovery."""
        now = time.monotonic()
        if self.waiting_since is None:
            self.waiting_since = now
        txid = self.progress.txid
        epoch = self.progress.epoch
        saved = [exactly.read_report(store, txid) for store in self.reporters]
        # A report of an earlier epoch is of an attempt at this txid that was rolled back.
        reports = [r.positions if r is not None and r.epoch == epoch else None for r in saved]
        failed = any(r == FAILED for r in reports)
        if failed or now - self.waiting_since > self.positions_timeout:
            why = "a spout's tuple failed" if failed else "spouts did not report"
            log.warning("checkpoint %d: %s: recovering (epoch %d)", txid, why,
                        self.progress.epoch + 1)
            self.waiting_since = None
            self.recovering = True
            return False
        if any(report is None for report in reports):
            return False
        self.waiting_since = None
        return True

    def ack(self, msg_id: Any) -> None:
        if tuple(msg_id) != self.in_flight:
            return   # an earlier attempt's late answer
        self.in_flight = None
        following = self.progress.next(self.recovering)
        if self.recovering and following == self.progress:
            if self.exactly:
                # The offset spouts rewind when they read the new epoch.
                self._save(Progress(following.txid, following.phase, following.epoch + 1))
                log.info("recovered to checkpoint %d: epoch %d", following.txid,
                         following.epoch + 1)
            self.recovering = False   # INITSTATE is done: checkpoints resume
            return
        try:
            self._save(following)
        except Exception as exc:
            # Not saved, so not done: recover from what was saved (a PREPARING checkpoint is
            # rolled back, never committed unsaved).
            log.error("checkpoint spout cannot save its progress (%s): recovering", exc)
            self.recovering = True
            raise

    def fail(self, msg_id: Any, reason: FailReason) -> None:
        if tuple(msg_id) != self.in_flight:
            return
        txid, action, _ = self.in_flight
        log.warning("checkpoint %s %d failed (%s): recovering", action, txid, reason)
        self.in_flight = None
        self.recovering = True

    def _save(self, progress: Progress) -> None:
        self.state.put(_PROGRESS_KEY, (progress.txid, progress.phase, progress.epoch))
        self.state.commit()
        self.progress = progress

    def close(self) -> None:
        for store in self.reporters:
            store.close()
        self.state.close()
