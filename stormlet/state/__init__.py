"""Stateful bolts with checkpointed key-value state (Storm 2.x's ``docs/State-checkpointing.md``).

    from stormlet.state import StatefulBolt

See ``stormlet.state.bolt`` for the bolt, ``key_value`` for the state, ``checkpoint`` for the
checkpoint protocol and ``providers`` for the backends (embedded SQLite, Redis, memory).
"""

from .bolt import StatefulBolt
from .key_value import KeyValueState
from .store import StateError, UndecodableValue

__all__ = ["KeyValueState", "StateError", "StatefulBolt", "UndecodableValue"]
