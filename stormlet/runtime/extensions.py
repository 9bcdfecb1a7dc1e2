"""What the features built on the runtime plug into it. The runtime calls these and never
imports the features (the layers point one way: API <- runtime <- daemons <- CLI, see
ARCHITECTURE.md); ``stormlet/__init__.py`` plugs the features in as the package loads, so every
process that runs a topology has them.

    dead_letter_box   makes a spout task's ``DeadLetters`` (the failed-message log's
                      ``stormlet.failed.DeadLetterBox``)
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class DeadLetters(Protocol):
    """Where a spout task's messages that finally failed go (``stormlet.failed``)."""

    attempts: int | None
    unflushed: int

    def failed(self, msg_id: Any) -> int: ...
    def exhausted(self, count: int) -> bool: ...
    def forget(self, msg_id: Any) -> None: ...
    def write(self, values: Any, msg_id: Any, reason: Any, attempts: int = 1) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


#: (failed-log directory or None, topology, component, task, attempts or None, registry=the
#: topology's serializers) -> DeadLetters
DeadLetterFactory = Callable[..., DeadLetters]

_dead_letter_box: DeadLetterFactory | None = None


def plug_dead_letters(factory: DeadLetterFactory) -> None:
    """Set what makes a spout task's dead-letter box (``stormlet/__init__.py`` does)."""
    global _dead_letter_box
    _dead_letter_box = factory


def dead_letter_box(directory: str | None, topology: str, component: str, task: int,
                    attempts: int | None, registry: Any = None) -> DeadLetters:
    """A spout task's dead-letter box, made by the plugged-in feature (``registry``: the
    topology's serializers, ``stormlet.serializers.Registry``; None: the default types)."""
    if _dead_letter_box is None:
        raise RuntimeError("stormlet runtime: no dead-letter box is plugged in "
                           "(stormlet/__init__.py plugs stormlet.failed's in; import stormlet)")
    return _dead_letter_box(directory, topology, component, task, attempts,
                            registry=registry)
