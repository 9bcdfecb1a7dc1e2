"""The errors of a backfill, and Spark's failures turned into one of them.

``BackfillError`` is raised on the driver, before or after Spark runs the job;
``BackfillWorkerError`` on Spark's workers, when a task cannot run. A worker's error reaches the
driver inside a Spark failure pages long: ``spark_failure_message`` finds the one line that says
what went wrong, and gives a ``BackfillWorkerError``'s message as it is (it is already written for
the user).
"""

from __future__ import annotations

import re


class BackfillError(Exception):
    """A backfill that cannot run: the message names the file, component, stream or path."""


class BackfillWorkerError(RuntimeError):
    """A task cannot run on a Spark worker (its code does not load, its input cannot be read)."""


def is_spark_failure(exc: BaseException) -> bool:
    """Whether ``exc`` comes from Spark (Py4J or PySpark), not from the driver's own code."""
    kinds = []
    try:
        from py4j.protocol import Py4JError
        kinds.append(Py4JError)
        from pyspark.errors import PySparkException
        kinds.append(PySparkException)
    except ImportError:
        pass
    return isinstance(exc, tuple(kinds))


_PYTHON_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", re.M)
_JAVA_ERROR = re.compile(r"^(?:: )?(?:[\w$]+\.)+(\w+(?:Exception|Error)): (.+)$", re.M)


def spark_failure_message(exc: BaseException, input_path: str) -> str:
    """The line that says what went wrong in a failed Spark job: the worker's Python exception
    when there is one, else the Java exception's message."""
    text = str(exc)
    if "Input path does not exist" in text or "InvalidInputException" in text:
        return f"input {input_path}: no such file or directory"
    worker = [m for m in _PYTHON_ERROR.finditer(text) if m.group(1) != "PythonException"]
    if worker:
        kind, message = worker[-1].groups()
        prefix = "" if kind == BackfillWorkerError.__name__ else f"a Spark task failed: {kind}: "
        return prefix + message.strip()
    java = _JAVA_ERROR.search(text)
    if java:
        message = java.group(2).split("; For more details see")[0].strip()
        return f"Spark failed: {java.group(1)}: {message}"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"Spark failed: {first}"
