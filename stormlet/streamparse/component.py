"""What streamparse's spouts and bolts share: the attributes and helpers a component's code uses
(``self.logger``, ``self.storm_conf``, ``self.task_id``, ``log``, ``raise_exception``,
``report_metric``) and the ``Tuple`` a bolt receives.

streamparse components run as separate processes talking JSON to a JVM; here they run inside a
stormlet executor, wrapped by ``stormlet.streamparse.adapters``, which binds each instance to its
task with ``_stormlet_bind`` before ``initialize`` is called. Nothing else about the class
changes, so a project's components run as they are.
"""

from __future__ import annotations

import logging
import os
from collections import namedtuple
from typing import Any

from ..context import TopologyContext

Tuple = namedtuple("Tuple", "id component stream task values")
Tuple.__doc__ = """What ``process`` receives. ``values`` is a named tuple of the source stream's
declared fields, so ``tup.values.word`` works as well as ``tup.values[0]``."""

# Storm's multilang log levels by name, as ``log(message, level=...)`` takes them.
_LOG_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
               "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR}


class Component:
    """Base of every streamparse spout and bolt. Subclasses set ``outputs`` (field names, or
    ``Stream`` objects for named and direct streams), ``par`` (the default parallelism) and
    ``config`` (the component's own Storm config), and override ``initialize``."""

    outputs: list[Any] | None = None
    par: int = 1
    config: dict[str, Any] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # streamparse's constructor takes the process's streams and a serializer; none apply.
        self.topology_name: str | None = None
        self.task_id: int | None = None
        self.component_name: str | None = None
        self.debug: bool | None = None
        self.storm_conf: dict[str, Any] | None = None
        self.context: dict[str, Any] | None = None
        self.pid = os.getpid()
        self.logger = logging.getLogger("streamparse")
        self._stormlet_context: TopologyContext | None = None

    @classmethod
    def spec(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Specifications should either be bolts or spouts. Given: {cls!r}")

    def initialize(self, storm_conf: dict[str, Any], context: dict[str, Any]) -> None:
        """Called once, before the first ``next_tuple`` or ``process``."""

    def log(self, message: Any, level: str | None = None) -> None:
        """Log ``message`` at Storm's level name (``trace``, ``debug``, ``info``, ``warn``,
        ``error``; default ``info``)."""
        self.logger.log(_LOG_LEVELS.get(level or "info", logging.INFO), "%s", message)

    def raise_exception(self, exception: BaseException, tup: Any = None) -> None:
        """Report ``exception`` as this task's error (logged, counted, shown by ``stormlet
        errors``) without stopping the component."""
        where = f" while processing {tup!r}" if tup else ""
        self.logger.error("%s raised%s: %s", type(exception).__name__, where, exception,
                          exc_info=(type(exception), exception, exception.__traceback__))

    def report_metric(self, name: str, value: Any) -> None:
        """Add ``value`` to this task's counter ``name`` (Storm's multilang metrics are usually
        counts), shown with the task's metrics."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"component {self.component_name!r}: report_metric({name!r}, "
                             f"{value!r}) takes a count, a whole number of at least 0")
        assert self._stormlet_context is not None, "report_metric before the component runs"
        self._stormlet_context.register_counter(name).inc(value)

    def _stormlet_bind(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Fill in what streamparse fills in from Storm's handshake, then ``initialize``."""
        self._stormlet_context = context
        self.topology_name = context.topology_name
        self.task_id = context.task_id
        self.component_name = context.component_id
        self.debug = bool(conf.get("topology.debug", False))
        self.storm_conf = dict(conf, **{"topology.name": context.topology_name})
        self.context = _handshake_context(context)
        self.logger = logging.getLogger(f"streamparse.{self.component_name}")
        self.initialize(self.storm_conf, self.context)


def _handshake_context(context: TopologyContext) -> dict[str, Any]:
    """The context dict Storm's multilang handshake gives a component (its JSON keys)."""
    task_component = {str(task): component
                      for component in context.get_component_ids()
                      for task in context.get_component_tasks(component)}
    return {"taskid": context.task_id, "componentid": context.component_id,
            "task->component": task_component}
