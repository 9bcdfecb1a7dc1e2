"""``StatefulBolt``: a bolt whose state is checkpointed (Storm's ``IStatefulBolt``).

    class WordTotals(StatefulBolt):
        outputs = ["word", "total"]
        def init_state(self, state):
            self.state = state
        def execute(self, tup):
            n = self.state.get(tup["word"], 0) + 1
            self.state.put(tup["word"], n)
            self.collector.emit([tup["word"], n], anchors=[tup])
            self.collector.ack(tup)

``init_state`` is called once, with the committed state, before the first ``execute``. Changes
are checkpointed every ``topology.state.checkpoint.interval.ms``; a tuple's ack is held until
the checkpoint holding its changes is committed, and a tuple whose changes are rolled back is
failed and replayed by its spout. That is at least once, as in Storm: after a failure, a tuple
can be applied to the state twice. A tuple whose ``execute`` raises is failed and replayed,
and what it changed is undone. A stored value that cannot be decoded raises
``UndecodableValue`` from its ``get``: the tuple fails with it as the reason (see ``poison``).
Emits must be anchored: an unanchored emit raises ``StateError``.
"""

from __future__ import annotations

from ..components import Bolt
from .key_value import KeyValueState


class StatefulBolt(Bolt):
    """Subclass this, implement ``init_state`` and ``execute``; see the module's docstring."""

    def init_state(self, state: KeyValueState) -> None:
        raise NotImplementedError

    def pre_init_state(self, txid: int) -> None:
        """Called before ``init_state``, with the txid of the committed checkpoint whose
        state it is handed."""

    def pre_prepare(self, txid: int) -> None:
        """Called before the state stages checkpoint ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Called before the state commits checkpoint ``txid``."""

    def pre_rollback(self) -> None:
        """Called before the state drops its uncommitted changes."""
