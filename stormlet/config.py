"""Topology configuration keys and their defaults, in one place.

Keys keep Apache Storm's names so that Storm users find what they know. A topology's config is
a plain ``dict``; a component's own config (``declarer.add_config``) overrides the topology's for
that component only.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shlex
from collections.abc import Callable
from typing import Any, NamedTuple

from .redaction import redact_config
from .serializers import TOPOLOGY_SERIALIZATION_REGISTER, registrations_problem

TOPOLOGY_WORKERS = "topology.workers"
TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
TOPOLOGY_DEBUG = "topology.debug"
TOPOLOGY_AUTO_TASK_HOOKS = "topology.auto.task.hooks"
TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE = "topology.executor.receive.buffer.size"
TOPOLOGY_TRANSFER_BATCH_SIZE = "topology.transfer.batch.size"
TOPOLOGY_SPOUT_WAIT_MS = "topology.spout.wait.ms"
TOPOLOGY_HANG_WARNING_SECS = "topology.hang.warning.secs"
TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS = "topology.spout.dead.letter.attempts"
TOPOLOGY_ERROR_THROTTLE_INTERVAL_SECS = "topology.error.throttle.interval.secs"
TOPOLOGY_MAX_ERROR_REPORT_PER_INTERVAL = "topology.max.error.report.per.interval"
TOPOLOGY_DISABLE_LOADAWARE_MESSAGING = "topology.disable.loadaware.messaging"
TOPOLOGY_LOCALITYAWARE_HIGHER_BOUND = "topology.localityaware.higher.bound"
TOPOLOGY_LOCALITYAWARE_LOWER_BOUND = "topology.localityaware.lower.bound"
STORMLET_TOPOLOGY_ID = "stormlet.topology.id"
STORMLET_ZOOKEEPER_CONNECT = "stormlet.zookeeper.connect"
STORMLET_ZOOKEEPER_ROOT = "stormlet.zookeeper.root"
STORMLET_FAILED_DIR = "stormlet.failed.dir"
OFFSETS_START_OVER = "offsets.start.over"
KAFKA_SPOUT_BOOTSTRAP_SERVERS = "kafka.spout.bootstrap.servers"
KAFKA_SPOUT_CONSUMER_CONFIG = "kafka.spout.consumer.config"
TOPOLOGY_METRICS_REPORT_SECS = "topology.metrics.report.secs"
TOPOLOGY_STATE_PROVIDER = "topology.state.provider"
TOPOLOGY_STATE_PROVIDER_CONFIG = "topology.state.provider.config"
TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS = "topology.state.checkpoint.interval.ms"
TOPOLOGY_STATE_CHECKPOINT_TIMEOUT_SECS = "topology.state.checkpoint.timeout.secs"
TOPOLOGY_GUARANTEE = "topology.guarantee"
AT_LEAST_ONCE = "at-least-once"
EFFECTIVELY_ONCE = "effectively-once"
GUARANTEES = (AT_LEAST_ONCE, EFFECTIVELY_ONCE)
STORMLET_STATE_DIR = "stormlet.state.dir"
STORMLET_STATE_EPOCH = "stormlet.state.epoch"
STORMLET_LOCAL_ONE_CPU = "stormlet.local.one.cpu"
STORMLET_EXECUTOR_SHARED_THREAD = "stormlet.executor.shared.thread"
STORMLET_LINK_HEARTBEAT_SECS = "stormlet.link.heartbeat.secs"
STORMLET_LINK_TIMEOUT_SECS = "stormlet.link.timeout.secs"
STORMLET_LINK_CONNECT_TIMEOUT_SECS = "stormlet.link.connect.timeout.secs"
STORMLET_TRANSPORT_SHARED_MEMORY = "stormlet.transport.shared.memory"
TOPOLOGY_ENVIRONMENT = "topology.environment"
TOPOLOGY_WORKER_CHILDOPTS = "topology.worker.childopts"
TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB = "topology.worker.max.heap.size.mb"
TOPOLOGY_BLOBSTORE_MAP = "topology.blobstore.map"
TOPOLOGY_EVENTS_MAX = "topology.events.max"
# The most events a topology's history may keep: its node's children are listed in one
# ZooKeeper reply, which must stay far below ZooKeeper's 1 MB limit.
EVENTS_MAX_LIMIT = 10_000
STORMLET_LOG_MAX_BYTES = "stormlet.log.max.bytes"
STORMLET_LOG_BACKUPS = "stormlet.log.backups"
STORMLET_LOG_FORMAT = "stormlet.log.format"
#: The formats of a log file: lines for people, or one JSON object a line for log shippers.
LOG_FORMATS = ("text", "json")


# ----- what a value must be (Storm checks a topology's config at submit the same way: its
# ConfigValidation annotations, @IsInteger, @IsPositiveNumber, @IsBoolean). A check returns what
# the value must be, as text for the error, when the value is not that; None when it is.
Check = Callable[[Any], "str | None"]


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    # An int is always finite (and math.isfinite overflows on one past a float's range).
    return isinstance(value, int) or isinstance(value, float) and math.isfinite(value)


# The largest whole number a setting may be, 2**MAX_WHOLE_BITS: counts are C integers in the
# compiled runtime.
MAX_WHOLE_BITS = 62
MAX_WHOLE = 2**MAX_WHOLE_BITS


def number(minimum: float, *, above: bool = False, whole: str | None = None,
           none_means: str | None = None) -> Check:
    """A finite number of at least ``minimum`` (more than it, with ``above``); with ``whole``,
    a whole number of those up to ``MAX_WHOLE`` (``1000.0`` counts, as a config file may give
    it); None too when ``none_means`` says what None means."""
    bound = f"above {minimum:g}" if above else f"at least {minimum:g}"
    wanted = (f"a whole number of {whole}, {bound} and at most 2**{MAX_WHOLE_BITS}" if whole
              else f"a number {bound}") + (f" (or None {none_means})" if none_means else "")

    def check(value: Any) -> str | None:
        if value is None and none_means is not None:
            return None
        if _is_number(value) and (value > minimum if above else value >= minimum) and (
                whole is None or (isinstance(value, int) or value.is_integer())
                and value <= MAX_WHOLE):
            return None
        return wanted
    return check


def _events_max(value: Any) -> str | None:
    problem = number(1, whole="events")(value)
    if problem is None and value > EVENTS_MAX_LIMIT:
        return f"a whole number of events from 1 to {EVENTS_MAX_LIMIT}"
    return problem


def flag(value: Any) -> str | None:
    """true or false."""
    return None if isinstance(value, bool) else "true or false"


def path_or_none(value: Any) -> str | None:
    """A path (a string or a ``pathlib.Path``), or None."""
    return None if value is None or isinstance(value, (str, os.PathLike)) else "a path or None"


def class_paths(value: Any) -> str | None:
    """A list of class paths (``package.module.Class`` or ``package.module:Class``), or None."""
    if value is None or (isinstance(value, (list, tuple)) and all(
            isinstance(p, str) and ("." in p or ":" in p) for p in value)):
        return None
    return "a list of class paths (package.module.Class), or None"


def guarantee(value: Any) -> str | None:
    """One of ``GUARANTEES``."""
    return None if value in GUARANTEES else " or ".join(GUARANTEES)


def anything(_value: Any) -> str | None:
    """Any value: set by stormlet, or checked where it is used (the state provider and its
    settings are checked with the topology's stateful bolts: stormlet/state/providers.py)."""
    return None


# ----- a worker's process: its environment and its interpreter's options (a supervisor starts
# it as ``python OPTIONS -m stormlet worker ...``: stormlet/cluster/worker_command.py).

#: Environment variables under this prefix are stormlet's own (a worker's credentials, the
#: cluster secret's file): a supervisor sets them, a topology never does.
RESERVED_ENV_PREFIX = "STORMLET_"

#: Python's options that take no value, and those that take one (in the same argument,
#: ``-Werror``, or the next, ``-W error``).
PYTHON_FLAGS = "bBdEIOPqRsuvx"
PYTHON_VALUE_OPTIONS = "WX"
# Options that would run something else than the worker, or not run it as a worker: why not.
_REFUSED_PYTHON_OPTIONS = {
    "c": "runs its own code instead of the worker",
    "m": "runs another module instead of the worker",
    "i": "waits at a prompt after the worker ends",
    "h": "prints help instead of running the worker",
    "?": "prints help instead of running the worker",
    "V": "prints the version instead of running the worker",
    "S": "leaves site-packages, where stormlet is installed, off the path",
}
# -X values that are a JVM's options (a Storm topology's childopts: -Xmx2g, -XX:+UseG1GC,
# -Xloggc:FILE): Python takes them as -X options of its own it does not know, and ignores them.
_JVM_X_OPTION = re.compile(r"(mx|ms|ss)[0-9]+[kKmMgG]?|X[:+-].*|loggc.*", re.DOTALL)


def environment(value: Any) -> str | None:
    """A map of environment variable names to strings, or None; no name of stormlet's own."""
    wanted = "a map of environment variable names to strings, or None"
    if value is None:
        return None
    if not isinstance(value, dict):
        return wanted
    for name, text in value.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            return f"{wanted} ({name!r} is no variable name: one is a non-empty string " \
                   f"without '=' or NUL)"
        if name.startswith(RESERVED_ENV_PREFIX):
            return (f"{wanted}, without {name}: every {RESERVED_ENV_PREFIX}* variable is "
                    f"stormlet's own, set by a supervisor for its workers (set it on the "
                    f"supervisor instead)")
        if not isinstance(text, str):
            return f"{wanted} (the value of {name} is not a string)"
        if "\0" in text:
            return f"{wanted} (the value of {name} holds a NUL character)"
    return None


def _python_options(value: Any) -> list[str]:
    """The options ``topology.worker.childopts`` gives, one argument each with its value
    attached; ``ValueError`` saying what is wrong (see ``worker_python_options``)."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split it into options: {exc}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(a, str) for a in value):
        raise ValueError("neither a list of strings nor a string")
    options: list[str] = []
    args = iter(value)
    for arg in args:
        if "\0" in arg:
            raise ValueError(f"{arg!r} holds a NUL character")
        if len(arg) < 2 or arg[0] != "-" or arg[1] == "-":
            raise ValueError(f"{arg!r} is not one of Python's short options (the program a "
                             f"worker runs is stormlet)")
        for i, letter in enumerate(arg[1:], 1):
            if letter in PYTHON_VALUE_OPTIONS:
                option_value = arg[i + 1:] or next(args, "")
                if not option_value:
                    raise ValueError(f"-{letter} needs a value")
                if letter == "X" and _JVM_X_OPTION.fullmatch(option_value):
                    raise ValueError(f"-X{option_value} is a JVM's option, which Python "
                                     f"ignores; for a worker's memory limit set "
                                     f"{TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB}")
                options.append(f"-{letter}{option_value}")
                break
            if letter in _REFUSED_PYTHON_OPTIONS:
                raise ValueError(f"-{letter} {_REFUSED_PYTHON_OPTIONS[letter]}")
            if letter not in PYTHON_FLAGS:
                raise ValueError(f"-{letter} (in {arg!r}) is not an option of Python's")
            options.append(f"-{letter}")
    return options


def python_options(value: Any) -> str | None:
    """Python's options, as a list of strings or one string a shell would split, that leave the
    worker to run as one (no -c, -m, -i, ...); or None."""
    try:
        _python_options(value)
    except ValueError as exc:
        return f"Python's options as a list of strings or one string, or None ({exc})"
    return None


def worker_environment(conf: dict[str, Any]) -> dict[str, str]:
    """``topology.environment`` of ``conf``: the variables to add to a worker's environment.
    ``ValueError`` naming the key for a value that is not a map of names to strings, or that
    names one of stormlet's own variables."""
    value = conf.get(TOPOLOGY_ENVIRONMENT)
    wrong = problem(TOPOLOGY_ENVIRONMENT, value)
    if wrong is not None:
        raise ValueError(wrong)
    return dict(value or {})


def worker_python_options(conf: dict[str, Any]) -> list[str]:
    """``topology.worker.childopts`` of ``conf``: the options a worker's Python gets before
    ``-m stormlet``, one argument each with its value attached (``["-X", "importtime", "-OW",
    "error"]`` gives ``["-Ximporttime", "-O", "-Werror"]``: stormlet/cluster/worker_command.py
    reads them back so). ``ValueError`` naming the key and the option for anything else: an
    argument that is no Python option, or one that would keep the worker from running."""
    value = conf.get(TOPOLOGY_WORKER_CHILDOPTS)
    wrong = problem(TOPOLOGY_WORKER_CHILDOPTS, value)
    if wrong is not None:
        raise ValueError(wrong)
    return _python_options(value)


def worker_memory_limit_mb(conf: dict[str, Any]) -> float | None:
    """``topology.worker.max.heap.size.mb`` of ``conf``: MB, or None for no limit.
    ``ValueError`` naming the key for anything else."""
    value = conf.get(TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB)
    wrong = problem(TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB, value)
    if wrong is not None:
        raise ValueError(wrong)
    return None if value is None else float(value)


def json_dict(value: Any) -> dict[str, Any]:
    """A setting that is a dict, or one as JSON text (as ``-c`` gives it); None or "" is an
    empty one. ``ValueError`` saying what is wrong."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"JSON text that does not parse: {value!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"not a map: {value!r}")
    return value


#: The librdkafka consumer settings a KafkaSpout's offsets depend on (stormlet/sources/kafka.py's
#: KafkaSource sets them): no consumer config may change them.
KAFKA_FIXED_CONSUMER_CONFIG: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # Report a position outside the log instead of silently jumping to either end, so the spout
    # decides (and knows that records were skipped).
    "auto.offset.reset": "error",
    "enable.partition.eof": False,
}


def kafka_consumer_config_problem(config: dict[str, Any]) -> str | None:
    """What in librdkafka consumer settings ``config`` a KafkaSpout cannot take; None if
    nothing."""
    for key, value in KAFKA_FIXED_CONSUMER_CONFIG.items():
        if key in config and config[key] != value:
            return f"config {key!r}={config[key]!r} is not supported; the source needs {value!r}"
    return None


def _consumer_config_check(value: Any) -> str | None:
    try:
        config = json_dict(value)
    except ValueError:
        return "a map, or one as JSON text, or None"
    wrong = kafka_consumer_config_problem(config)
    return None if wrong is None else f"librdkafka settings a KafkaSpout can take ({wrong})"


def _servers_check(value: Any) -> str | None:
    if value is None or isinstance(value, str) and value.strip():
        return None
    return "host:port[,host:port...] as text, or None"


def blobstore_map(value: Any) -> dict[str, str]:
    """``topology.blobstore.map`` as {blob key: local file name}. The value is Storm's map,
    ``{"model": {"localname": "model.bin"}}``, its short form ``{"model": "model.bin"}``, or
    either as JSON text (as ``-c`` gives it); None is no blobs. A local name is a plain file
    name (no directory), made in each worker's working directory, and no two keys share one.
    ``ValueError`` saying what is wrong, naming the blob."""
    value = json_dict(value)
    names: dict[str, str] = {}
    for key, entry in value.items():
        local = entry.get("localname", key) if isinstance(entry, dict) else entry
        if not isinstance(key, str) or not isinstance(local, str):
            raise ValueError(f'blob {key!r} must map to a local file name, or to '
                             f'{{"localname": NAME}}, not {entry!r}')
        if local in ("", ".", "..") or "/" in local or "\\" in local or "\0" in local:
            raise ValueError(f"blob {key!r} maps to {local!r}, which is not a plain file "
                             f"name: the file is made in each worker's working directory")
        if local in names.values():
            other = next(k for k, name in names.items() if name == local)
            raise ValueError(f"blobs {other!r} and {key!r} both map to {local!r}")
        names[key] = local
    return names


def log_format(value: Any) -> str | None:
    """One of LOG_FORMATS."""
    return None if value in LOG_FORMATS else " or ".join(LOG_FORMATS)


def _blobstore_map_check(value: Any) -> str | None:
    try:
        blobstore_map(value)
    except ValueError as exc:
        return f"a map of blob keys to local file names ({exc})"
    return None


class Setting(NamedTuple):
    default: Any
    doc: str
    check: Check


#: Every key stormlet reads: its default, what it means, and what a value of it must be.
DEFAULTS: dict[str, Setting] = {
    TOPOLOGY_WORKERS: Setting(
        1, "worker processes for the topology (local mode runs one)",
        number(1, whole="workers", none_means="for 1")),
    TOPOLOGY_ACKER_EXECUTORS: Setting(
        None,
        "acker executors; None means one per worker, 0 turns tracking off "
        "(spouts are acked as soon as they emit)",
        number(0, whole="executors", none_means="for one per worker")),
    TOPOLOGY_MESSAGE_TIMEOUT_SECS: Setting(
        30,
        "a tracked spout tuple not fully processed within T to 2T seconds fails with reason "
        "timeout",
        number(0, above=True)),
    TOPOLOGY_MAX_SPOUT_PENDING: Setting(
        None,
        "per spout task, next_tuple is not called while this many tracked tuples are in flight",
        number(0, whole="tuples", none_means="for no bound; 0 is no bound too")),
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: Setting(
        None, "deliver a tick tuple to a bolt every N seconds",
        number(0, none_means="for no ticks; 0 is none too")),
    TOPOLOGY_DEBUG: Setting(False, "log every emitted tuple", flag),
    TOPOLOGY_AUTO_TASK_HOOKS: Setting(
        None,
        "task hooks (stormlet.hooks.TaskHook subclasses) added to every spout and bolt task, "
        "each task its own instance made with no arguments, before open or prepare",
        class_paths),
    TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE: Setting(
        2,
        "batches an executor's inbox holds before senders in its worker wait (backpressure); "
        "they are woken when it takes one, so the tuples they hand over are still in the "
        "core's cache (data from other workers pauses its senders at a larger mark: "
        "stormlet/cluster/backpressure.py)",
        number(1, whole="batches")),
    TOPOLOGY_TRANSFER_BATCH_SIZE: Setting(
        512,
        "tuples buffered for one destination before the buffer is handed over early: a bolt "
        "hands it over after the batch it is executing, a spout's burst of next_tuple calls "
        "ends once it emitted this many",
        number(1, whole="tuples", none_means="for no bound")),
    TOPOLOGY_DISABLE_LOADAWARE_MESSAGING: Setting(
        False,
        "true: shuffle and local-or-shuffle groupings pick tasks evenly, wherever they run; "
        "false: load-aware, preferring the tasks in the sender's worker, then its host, "
        "weighted by their load (stormlet/runtime/load_aware.py)",
        flag),
    TOPOLOGY_LOCALITYAWARE_HIGHER_BOUND: Setting(
        0.8,
        "load-aware shuffle widens to the next scope (worker, host, every task) when the mean "
        "load of the tasks in its scope passes this (a load: the fraction of an inbox's "
        "capacity held, averaged over a second)",
        number(0, above=True)),
    TOPOLOGY_LOCALITYAWARE_LOWER_BOUND: Setting(
        0.2,
        "load-aware shuffle narrows back to the next smaller scope when the mean load of that "
        "scope's tasks falls below this",
        number(0, above=True)),
    TOPOLOGY_SPOUT_WAIT_MS: Setting(
        1.0,
        "how long a spout that emitted nothing waits for acks before calling next_tuple again",
        number(0)),
    TOPOLOGY_HANG_WARNING_SECS: Setting(
        30,
        "a component in one execute, next_tuple, ack or fail call (or one batch of them) this "
        "long is reported as hung, with its thread's stack; 0 turns the check off",
        number(0, none_means="to turn the check off")),
    TOPOLOGY_ERROR_THROTTLE_INTERVAL_SECS: Setting(
        10,
        "errors of one kind (same place, same exception type) beyond the first few are counted "
        "and summarized once per this many seconds, per task",
        number(0)),
    TOPOLOGY_MAX_ERROR_REPORT_PER_INTERVAL: Setting(
        5,
        "errors of one kind logged in full per task before the rest are only counted (again "
        "after the kind was quiet for an interval)",
        number(0, whole="errors")),
    STORMLET_TOPOLOGY_ID: Setting(
        None,
        "set by stormlet: this run of the topology (a resubmission gets a new id)",
        anything),
    STORMLET_ZOOKEEPER_CONNECT: Setting(
        None,
        "set by workers: the cluster's ZooKeeper hosts (offset spouts commit there)",
        anything),
    STORMLET_ZOOKEEPER_ROOT: Setting(
        None, "set by workers: the cluster's root node in ZooKeeper", anything),
    TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS: Setting(
        None,
        "after this many fails of one message id, a spout's message goes to the failed-message "
        "log instead of to fail() (Spout.dead_lettered is called); None: never",
        number(0, whole="fails", none_means="for never; 0 is never too")),
    STORMLET_FAILED_DIR: Setting(
        None,
        "directory of the failed-message log (dead letters); on a cluster, a shared path",
        path_or_none),
    TOPOLOGY_METRICS_REPORT_SECS: Setting(
        5,
        "how often each worker sends its metrics (one message per worker) to the nimbus leader",
        number(0, above=True)),
    TOPOLOGY_STATE_PROVIDER: Setting(
        "embedded",
        "where stateful bolts keep their state: embedded (a SQLite file in stormlet.state.dir), "
        "redis, or memory (lost when a worker stops: for tests)",
        anything),
    TOPOLOGY_STATE_PROVIDER_CONFIG: Setting(
        None,
        "the state provider's settings, a dict or JSON text: redis takes host, port, db, "
        "password; embedded takes dir",
        anything),
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: Setting(
        1000,
        "how often stateful bolts checkpoint their state; their acks wait for the checkpoint, "
        "so it must be shorter than the message timeout",
        number(0, above=True)),
    TOPOLOGY_STATE_CHECKPOINT_TIMEOUT_SECS: Setting(
        None,
        "a checkpoint action (prepare, commit, rollback, initstate) not done by every stateful "
        "bolt within T to 2T seconds fails and the checkpoint spout recovers; so does, in "
        "effectively-once, an offset spout that has not reported its positions within T. An "
        "action lost with a killed worker, or dropped while its link was down, is then sent "
        "again after T, not after the message timeout. Too short, and actions that are merely "
        "slow (behind a backlog) fail and recover over and over",
        number(0, above=True, none_means="for the message timeout")),
    TOPOLOGY_GUARANTEE: Setting(
        AT_LEAST_ONCE,
        "what a topology with stateful bolts promises after a failure: at-least-once (a "
        "replayed tuple may be applied to the state twice) or effectively-once (state rolls "
        "back to the last checkpoint and the offset spouts rewind to the positions saved with "
        "it; see stormlet/state/exactly.py)",
        guarantee),
    STORMLET_STATE_DIR: Setting(
        None,
        "directory of the embedded state store; None: stormlet-state in the working directory "
        "in local mode, DATA_DIR/state of the supervisor on a cluster",
        path_or_none),
    STORMLET_LOCAL_ONE_CPU: Setting(
        True,
        "local mode runs every executor thread of the process on one CPU: the interpreter lock "
        "lets one run Python at a time anyway, and on one core the tuples they hand each other "
        "stay in its cache (stormlet/runtime/cpu_affinity.py); false leaves them to the OS "
        "scheduler, for components whose own work runs outside the lock in parallel (threads and "
        "processes they start inherit the CPU). Workers are placed by their supervisor instead "
        "(stormlet/cluster/cpu_pinning.py)",
        flag),
    STORMLET_EXECUTOR_SHARED_THREAD: Setting(
        True,
        "a process's executors take turns on one thread instead of a thread each: a batch is "
        "run by the next executor while still in the core's caches (stormlet/runtime/threads.py). "
        "A component whose own config sets it false keeps a thread of its own: one that blocks "
        "(in I/O, say) would otherwise hold up every executor sharing the thread",
        flag),
    STORMLET_STATE_EPOCH: Setting(
        0,
        "set by a cluster's worker, not by topologies: the assignment version at which it took "
        "its tasks on. A state store a newer worker of the same task opened refuses this one's "
        "writes (stormlet/state/redis_store.py)",
        number(0, whole="versions")),
    STORMLET_LINK_HEARTBEAT_SECS: Setting(
        1.0,
        "a topology's workers send each other a heartbeat this often on every link, so that a "
        "broken one is noticed (stormlet/cluster/transport.py)",
        number(0, above=True)),
    STORMLET_LINK_TIMEOUT_SECS: Setting(
        4.0,
        "a link between two workers silent this long is taken for broken: both ends report it "
        "(`stormlet errors`, the UI, the peers_unreachable metric), what is sent there is "
        "dropped and replayed from its spout, and it is reconnected; keep it a few heartbeats "
        "long, so that a congested link is not taken for a broken one",
        number(0, above=True)),
    STORMLET_LINK_CONNECT_TIMEOUT_SECS: Setting(
        2.0,
        "a worker's connection attempt to another worker is abandoned and started again after "
        "this long, so that it reconnects within seconds of a link's return instead of at "
        "TCP's backoff",
        number(0, above=True)),
    STORMLET_TRANSPORT_SHARED_MEMORY: Setting(
        True,
        "a topology's workers on one host pass each other their frames through rings in shared "
        "memory instead of loopback TCP, with no system call while both are busy; on Linux "
        "x86-64, where the workers' network namespace is shared (stormlet/cluster/same_host.py)",
        flag),
    TOPOLOGY_BLOBSTORE_MAP: Setting(
        None,
        "blobs of the cluster's blob store each worker finds in its working directory: "
        '{key: {"localname": name}} as Storm has it, or {key: name}, or either as JSON text; '
        "nimbus refuses a key it does not hold (stormlet/cluster/blob_cache.py)",
        _blobstore_map_check),
    OFFSETS_START_OVER: Setting(
        False,
        "offset spouts ignore earlier topologies' commits and read from the earliest offset",
        flag),
    KAFKA_SPOUT_BOOTSTRAP_SERVERS: Setting(
        None,
        "the Kafka brokers (host:port, comma-separated) of every KafkaSpout not given "
        "bootstrap_servers when built: each task reads it at open, so the topology file needs "
        "no broker address (stormlet/sources/spouts.py)",
        _servers_check),
    KAFKA_SPOUT_CONSUMER_CONFIG: Setting(
        None,
        "librdkafka consumer settings for every KafkaSpout, a map or JSON text; a spout's own "
        "consumer_config wins over them, and the settings its offsets depend on "
        "(enable.auto.commit, auto.offset.reset...) cannot be changed",
        _consumer_config_check),
    TOPOLOGY_ENVIRONMENT: Setting(
        None,
        "on a cluster, environment variables added to (or replacing) those a worker inherits "
        "from its supervisor, a map of names to strings; STORMLET_* variables are stormlet's "
        "own and refused",
        environment),
    TOPOLOGY_WORKER_CHILDOPTS: Setting(
        None,
        "on a cluster, options for each worker's Python, given before -m stormlet: a list of "
        "strings (-X importtime, -W error) or one string split as a shell would",
        python_options),
    TOPOLOGY_WORKER_MAX_HEAP_SIZE_MB: Setting(
        None,
        "on a cluster, the memory (resident set size, MB) a worker may use: its supervisor "
        "checks every second, and kills and restarts a worker over it, reporting it in "
        "`stormlet errors` (stormlet/cluster/memory_limit.py)",
        number(0, above=True, none_means="for no limit")),
    TOPOLOGY_EVENTS_MAX: Setting(
        500,
        "how many of the topology's newest events (submits, activations, rebalances, "
        "reassignments, worker exits and restarts: `stormlet events`) its history keeps, in "
        "ZooKeeper on a cluster (stormlet/cluster/events.py); fixed at submit",
        _events_max),
    STORMLET_LOG_MAX_BYTES: Setting(
        20 * 1024 * 1024,
        "on a cluster, a worker's log file (worker.log) is rotated when it reaches this size; "
        "daemons take it as --log-max-bytes, and a supervisor cuts its workers' raw output "
        "(worker.out) to its last part at its own (stormlet/cluster/logging_setup.py)",
        number(1024, whole="bytes")),
    STORMLET_LOG_BACKUPS: Setting(
        5,
        "rotated log files kept besides the current one (worker.log.1 ... .N), so a worker's "
        "logs take at most (1 + this) times stormlet.log.max.bytes; daemons take it as "
        "--log-backups",
        number(1, whole="files")),
    TOPOLOGY_SERIALIZATION_REGISTER: Setting(
        None,
        "types tuples may hold beyond msgpack's own and the defaults (datetime, date, time, "
        "timedelta, Decimal, UUID, tuple, set, frozenset), Storm's topology.kryo.register: a "
        "list of class paths (dataclasses) or {class path: serializer's class path} maps "
        "(stormlet/serializers.py)",
        registrations_problem),
    STORMLET_LOG_FORMAT: Setting(
        "text",
        "how a worker writes its log: text, one line per event naming its topology, component "
        "and task, or json, one JSON object per line with the same fields, for log shippers; "
        "daemons take it as --log-format",
        log_format),
}


def default_config() -> dict[str, Any]:
    """A fresh dict holding every key's default."""
    return {key: setting.default for key, setting in DEFAULTS.items()}


def merged(*layers: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults overridden by each layer in turn (later layers win)."""
    conf = default_config()
    for layer in layers:
        if layer:
            conf.update(layer)
    return conf


def problems(conf: dict[str, Any] | None) -> list[str]:
    """What is wrong with the values ``conf`` gives stormlet's keys, one line each naming the
    key, what it must be and what it is. Keys stormlet does not know are the user's own (a
    topology's config carries them to its components, as in Storm) and are not checked."""
    found = (problem(key, value) for key, value in (conf or {}).items())
    return [text for text in found if text is not None]


# Where Storm's and stormlet's own keys live. A key there that stormlet does not read is a
# misspelling or a Storm setting stormlet has no use for: either way it changes nothing, and
# the user should hear so (Storm itself passes such keys silently).
OWN_PREFIXES = ("topology.", "storm.", "stormlet.", "offsets.", "kafka.spout.")
# Keys Storm sets for components to read, not settings.
RUNTIME_SET = frozenset({"topology.name"})


def unread(conf: dict[str, Any] | None) -> list[str]:
    """One line for each key of ``conf`` under Storm's or stormlet's prefixes that stormlet
    does not read, naming the key it reads that is spelt most like it, if one is close. A
    warning, not a refusal: a Storm topology's config may carry settings stormlet ignores."""
    lines = []
    for key in conf or {}:
        if (not isinstance(key, str) or key in DEFAULTS or key in RUNTIME_SET
                or not key.startswith(OWN_PREFIXES)):
            continue
        near = difflib.get_close_matches(key, DEFAULTS, n=1, cutoff=0.85)
        lines.append(f"{key} is not a setting stormlet reads, so it changes nothing"
                     + (f" (did you mean {near[0]}?)" if near else ""))
    return lines


def refusal(topology: str, found: list[str]) -> str:
    """The one-line refusal of topology ``topology`` for the problems ``found``."""
    return f"topology {topology!r} cannot run with this config: " + "; ".join(found)


def problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``key``, naming both; None if nothing (or if stormlet
    does not know the key)."""
    setting = DEFAULTS.get(key)
    wanted = setting.check(value) if setting is not None else None
    # A map shown as a reader without admin access would see it: a refused environment may
    # hold a database's password, and the refusal may be logged.
    shown = redact_config({key: value})[key] if isinstance(value, dict) else value
    return None if wanted is None else f"{key} must be {wanted}, not {shown!r}"


def transfer_batch_size(conf: dict[str, Any]) -> int | None:
    """``topology.transfer.batch.size`` of ``conf`` (defaults included): a whole number of
    tuples, or None for no bound. ``ValueError`` naming the key for anything else."""
    value = conf.get(TOPOLOGY_TRANSFER_BATCH_SIZE, DEFAULTS[TOPOLOGY_TRANSFER_BATCH_SIZE].default)
    wrong = problem(TOPOLOGY_TRANSFER_BATCH_SIZE, value)
    if wrong is not None:
        raise ValueError(wrong)
    return None if value is None else int(value)


def parse_cli_value(text: str) -> Any:
    """Turn ``-c key=value`` text into an int, float, bool, None or string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def parse_cli_pairs(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """Parse repeated ``key=value`` options; raises ``ValueError`` naming a malformed pair."""
    conf: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"config option {pair!r} is not of the form key=value")
        conf[key.strip()] = parse_cli_value(value)
    return conf
