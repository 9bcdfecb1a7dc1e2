"""What a batch job needs to know about its Spark master before and after the session starts.

- **Where the master is.** ``local[N]`` runs in this process's JVM; a master on a loopback
  address (``spark://127.0.0.1:7077``, ``spark://localhost:7077``) has its workers on this
  machine, so the driver binds to loopback too and the executors can run this very interpreter
  (``loopback_master``). Anything else is a real cluster: the driver's address and the executors'
  Python are the user's to set (``SPARK_LOCAL_IP`` / ``spark.driver.host``, ``PYSPARK_PYTHON``).
- **Under spark-submit** the master is the one spark-submit was given (``submitted_conf``).
- **Failing fast.** Spark retries an unreachable standalone master for a minute before it gives
  up with an unrelated-looking error, and waits forever for executors that no worker can start.
  ``check_reachable`` tries the master's port first; ``wait_for_executors`` bounds the wait for
  the first executor (``spark.stormlet.executorTimeout`` seconds).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
from typing import Any

#: A Spark conf key (so ``spark-submit --conf`` and ``spark-defaults.conf`` can set it): seconds
#: to wait, on a cluster, for the application's first executor.
EXECUTOR_TIMEOUT_KEY = "spark.stormlet.executorTimeout"
DEFAULT_EXECUTOR_TIMEOUT = 60.0

_STANDALONE = re.compile(r"spark://(?P<hosts>[^/]+)/?")


class MasterUnavailable(RuntimeError):
    """The master cannot be reached, or gave the application no executor; says what to check."""


def is_local(master: str) -> bool:
    """Whether ``master`` runs everything in the driver's JVM (``local``, ``local[N]``, ...)."""
    return master == "local" or master.startswith("local[")


def standalone_hosts(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each master in a ``spark://`` URL (several with ZooKeeper
    recovery: ``spark://h1:7077,h2:7077``); empty for any other kind of master."""
    m = _STANDALONE.fullmatch(master.strip())
    if m is None:
        return []
    hosts = []
    for part in m["hosts"].split(","):
        host, _, port = part.strip().rpartition(":")
        if not host:   # no port given: Spark's default
            host, port = port, "7077"
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_master(master: str) -> bool:
    """Whether every worker of ``master`` is on this machine: a local master, or a standalone
    master on a loopback address (its workers can only reach it from here)."""
    hosts = standalone_hosts(master)
    return is_local(master) or (bool(hosts) and all(_is_loopback(h) for h, _ in hosts))


def submitted_conf() -> Any:
    """spark-submit's configuration, when spark-submit started this process; else None.

    spark-submit starts the JVM first and passes its port in ``PYSPARK_GATEWAY_PORT``; its
    ``--master`` (and ``--conf``, and ``spark-defaults.conf``) are that JVM's conf.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()    # connects to spark-submit's JVM; starts nothing
    return SparkConf()


def check_reachable(master: str, timeout: float = 5.0) -> None:
    """Raise ``MasterUnavailable`` unless some master of a ``spark://`` URL accepts a TCP
    connection (other masters are left to Spark)."""
    hosts = standalone_hosts(master)
    errors = []
    for host, port in hosts:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    if hosts:
        raise MasterUnavailable(
            f"cannot reach the Spark master {master} ({'; '.join(errors)}): is it running, and "
            f"is that the host and port it listens on (the first line of its log says)?")


def executor_timeout(spark: Any) -> float:
    """``spark.stormlet.executorTimeout`` of the session, in seconds."""
    value = spark.sparkContext.getConf().get(EXECUTOR_TIMEOUT_KEY, None)
    try:
        return float(value) if value is not None else DEFAULT_EXECUTOR_TIMEOUT
    except ValueError:
        raise MasterUnavailable(f"{EXECUTOR_TIMEOUT_KEY} is {value!r}, not a number of "
                                f"seconds") from None


def wait_for_executors(spark: Any, timeout: float) -> None:
    """Return once the application has an executor; raise ``MasterUnavailable`` after
    ``timeout`` seconds without one, or if the master ended the application. A no-op with
    dynamic allocation, which starts executors only once tasks wait for them."""
    sc = spark.sparkContext
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return
    jsc = sc._jsc.sc()
    deadline = time.monotonic() + timeout
    # The driver is listed among the executors too.
    while len(jsc.statusTracker().getExecutorInfos()) < 2:
        if jsc.isStopped():
            raise MasterUnavailable(f"the Spark master {sc.master} ended the application before "
                                    f"any executor started (its log says why)")
        if time.monotonic() > deadline:
            memory = conf.get("spark.executor.memory", "1g")
            raise MasterUnavailable(
                f"no executor started within {timeout:g} s on {sc.master}: are workers "
                f"registered with the master, with a free core and {memory} of memory free "
                f"each (spark.executor.memory)? The master's web UI lists them. "
                f"{EXECUTOR_TIMEOUT_KEY} sets this wait")
        time.sleep(0.2)
