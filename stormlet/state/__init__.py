"""Stateful bolts with checkpointed key-value state (Storm 2.x's ``docs/State-checkpointing.md``).

    from stormlet.state import StatefulBolt, StatefulWindowedBolt

See ``stormlet.state.bolt`` for the bolt, ``windowed`` for the bolt whose window is
checkpointed with its state, ``key_value`` for the state, ``checkpoint`` for the
checkpoint protocol and ``providers`` for the backends (embedded SQLite, Redis, memory).
"""

from .bolt import StatefulBolt
from .key_value import KeyValueState
from .store import StateError, UndecodableValue
from .windowed import StatefulWindowedBolt

__all__ = ["KeyValueState", "StateError", "StatefulBolt", "StatefulWindowedBolt",
           "UndecodableValue"]
