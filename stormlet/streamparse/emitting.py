"""What spouts and bolts share when they emit, and how a Python component is named as a
shell command (streamparse runs each as ``streamparse_run module.Class``)."""

from __future__ import annotations

from typing import Any

# The command streamparse gives every Python component; its script is the class's dotted path.
PYTHON_COMPONENT_COMMAND = "streamparse_run"


def python_command(cls: type) -> tuple[str, str]:
    """``(command, script)`` of the shell component that runs ``cls``."""
    return PYTHON_COMPONENT_COMMAND, f"{cls.__module__}.{cls.__name__}"


def checked_values(tup: Any) -> list[Any] | tuple[Any, ...]:
    """``tup`` if it is a list or tuple of values, as streamparse requires of every emit."""
    if not isinstance(tup, (list, tuple)):
        raise TypeError(f"All Tuples must be either lists or tuples, received {type(tup)!r} "
                        f"instead.")
    return tup
