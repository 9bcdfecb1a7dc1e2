"""The Spark session the batch jobs run in: local by default, any master when given one.

    with spark_session("stormlet-replay", master="local[2]") as spark:
        spark.read.json(...)

A local session binds only to loopback and needs no network. Progress bars are on when the
output is a terminal.

On a cluster (``spark://HOST:PORT``, or whatever spark-submit was given): the master is tried
before the session starts, and the session waits, bounded, for its first executor, so a master
that is down or has no worker to give is one clear error (``cluster``). A master on a loopback
address is treated like a local one: its workers are on this machine, so the driver binds to
loopback and the executors run this interpreter. On any other cluster the executors run
``PYSPARK_PYTHON`` (Spark's default: ``python3``), which must have stormlet installed.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from .cluster import (
    MasterUnavailable,
    check_reachable,
    executor_timeout,
    is_local,
    loopback_master,
    submitted_conf,
    wait_for_executors,
)

DEFAULT_MASTER = "local[*]"
#: The local driver JVM's options, unless ``SPARK_CONF_DIR`` or ``conf`` say otherwise.
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"
#: Spark's Python daemon for both jobs, unless the user's configuration names another.
DAEMON_MODULE = "stormlet.spark.daemon"
_DAEMON_KEY = "spark.python.daemon.module"


class SparkUnavailable(RuntimeError):
    """Spark cannot run the job: PySpark (or the Java it runs on) is missing, or the master cannot
    be reached or gives no executor; the message says what to install or check."""


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
    """A new session (or the active one) on ``master``: by default the master spark-submit was
    given, else ``local[*]``. On a cluster it returns once an executor has started; raises
    ``SparkUnavailable`` saying what to check when the master cannot be reached or gives no
    executor."""
    SparkSession = _session_class()
    try:
        submitted = submitted_conf()    # spark-submit's, read once
        if not master and submitted is not None:
            master = submitted.get("spark.master", None)
        master = master or DEFAULT_MASTER
        own_daemon = loopback_master(master) and not _user_sets(_DAEMON_KEY, submitted)
    except Exception as exc:  # spark-submit's JVM did not answer
        raise SparkUnavailable(f"cannot reach spark-submit's Spark: {exc}") from None
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {"spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false"}
    if own_daemon:
        # PySpark's daemon, from the installed package rather than Spark's source-only zip:
        # each worker's first task starts ~0.3-0.5 s sooner (stormlet/spark/daemon.py). Only
        # where the workers run this machine's stormlet: elsewhere it may come in --py-files,
        # which a daemon cannot be imported from.
        settings[_DAEMON_KEY] = DAEMON_MODULE
    if is_local(master):
        # Nobody watches a local job's web UI; on a cluster it is where its progress is seen
        # (spark.ui.enabled=false in spark-defaults.conf switches it off).
        settings["spark.ui.enabled"] = "false"
        if "SPARK_CONF_DIR" not in os.environ:
            # The local JVM runs the whole job: a throughput collector suits these batch jobs
            # better than Java's default G1 (a 1M-message replay plans ~20% faster). A
            # configuration directory of the user's decides for itself.
            settings["spark.driver.extraJavaOptions"] = LOCAL_JAVA_OPTIONS
    if loopback_master(master):
        # Everything runs on this machine: executors reach the driver on loopback (not on the
        # address the host name resolves to, which a loopback-only machine may not route).
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
        check_reachable(master)
        spark = builder.getOrCreate()
    except MasterUnavailable as exc:
        raise SparkUnavailable(str(exc)) from None
    except Exception as exc:  # Py4J and Java start-up errors come in many types
        raise SparkUnavailable(f"cannot start Spark (master {master}): {exc}") from None
    spark.sparkContext.setLogLevel("WARN")
    if not is_local(master):
        try:
            wait_for_executors(spark, executor_timeout(spark))
        except MasterUnavailable as exc:
            spark.stop()
            raise SparkUnavailable(str(exc)) from None
    return spark


def _user_sets(key: str, submitted: Any) -> bool:
    """Whether the user's Spark configuration sets ``key``: ``submitted``, spark-submit's
    (``submitted_conf``: its ``--conf`` and ``spark-defaults.conf``, in its JVM), else, when
    that is None, the ``spark-defaults.conf`` Spark will read."""
    if submitted is not None:
        return bool(submitted.contains(key))
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(
        os.environ.get("SPARK_HOME") or _pyspark_home(), "conf")
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf"), encoding="utf-8",
                  errors="replace") as defaults:
            # Java properties: the key ends at whitespace, "=" or ":".
            return any(re.split(r"[\s=:]", line.strip(), maxsplit=1)[0] == key
                       for line in defaults
                       if line.strip() and not line.lstrip().startswith(("#", "!")))
    except OSError:
        return False


def _pyspark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


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
