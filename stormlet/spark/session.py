"""The Spark session the batch jobs run in: local by default, any master when given one.

    with spark_session("stormlet-replay", master="local[2]") as spark:
        spark.read.json(...)

A local session binds only to loopback and needs no network. Progress bars are on when the
output is a terminal.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator

DEFAULT_MASTER = "local[*]"


class SparkUnavailable(RuntimeError):
    """PySpark (or the Java it runs on) is missing; the message says what to install."""


def _session_class() -> Any:
    """PySpark's ``SparkSession``, or ``SparkUnavailable`` saying what to install."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("this needs PySpark: pip install 'stormlet[spark]'") from None
    return SparkSession


def quiet_py4j() -> None:
    """Keep Py4J's connection chatter (at INFO) out of the log."""
    logging.getLogger("py4j").setLevel(logging.WARNING)


def build_session(app_name: str, master: str | None = None,
                  conf: dict[str, str] | None = None) -> Any:
    SparkSession = _session_class()
    master = master or DEFAULT_MASTER
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false",
        "spark.sql.shuffle.partitions": "8",
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers run PYSPARK_PYTHON, by default whatever `python3` is on the PATH; run
        # under an interpreter without stormlet (a venv's CLI called by its path), they could not
        # import the jobs' functions.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings.update({"spark.driver.host": "127.0.0.1",
                         "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Py4J and Java start-up errors come in many types
        raise SparkUnavailable(f"cannot start Spark (master {master}): {exc}") from None
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextmanager
def spark_session(app_name: str, master: str | None = None,
                  conf: dict[str, str] | None = None) -> Iterator[Any]:
    """A session for one job, stopped at the end (unless it was already running: a test's
    shared session is left for the others)."""
    SparkSession = _session_class()
    existing = SparkSession.getActiveSession()
    spark = existing or build_session(app_name, master, conf)
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()
