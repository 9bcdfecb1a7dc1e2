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
from collections.abc import Callable
from typing import Any, NamedTuple

TOPOLOGY_WORKERS = "topology.workers"
TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
TOPOLOGY_DEBUG = "topology.debug"
TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE = "topology.executor.receive.buffer.size"
TOPOLOGY_TRANSFER_BATCH_SIZE = "topology.transfer.batch.size"
TOPOLOGY_SPOUT_WAIT_MS = "topology.spout.wait.ms"
TOPOLOGY_HANG_WARNING_SECS = "topology.hang.warning.secs"
TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS = "topology.spout.dead.letter.attempts"
TOPOLOGY_ERROR_THROTTLE_INTERVAL_SECS = "topology.error.throttle.interval.secs"
TOPOLOGY_MAX_ERROR_REPORT_PER_INTERVAL = "topology.max.error.report.per.interval"
STORMLET_TOPOLOGY_ID = "stormlet.topology.id"
STORMLET_ZOOKEEPER_CONNECT = "stormlet.zookeeper.connect"
STORMLET_ZOOKEEPER_ROOT = "stormlet.zookeeper.root"
STORMLET_FAILED_DIR = "stormlet.failed.dir"
OFFSETS_START_OVER = "offsets.start.over"
TOPOLOGY_METRICS_REPORT_SECS = "topology.metrics.report.secs"
TOPOLOGY_STATE_PROVIDER = "topology.state.provider"
TOPOLOGY_STATE_PROVIDER_CONFIG = "topology.state.provider.config"
TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS = "topology.state.checkpoint.interval.ms"
STORMLET_STATE_DIR = "stormlet.state.dir"
STORMLET_STATE_EPOCH = "stormlet.state.epoch"
STORMLET_LOCAL_ONE_CPU = "stormlet.local.one.cpu"
STORMLET_EXECUTOR_SHARED_THREAD = "stormlet.executor.shared.thread"
STORMLET_LINK_HEARTBEAT_SECS = "stormlet.link.heartbeat.secs"
STORMLET_LINK_TIMEOUT_SECS = "stormlet.link.timeout.secs"
STORMLET_LINK_CONNECT_TIMEOUT_SECS = "stormlet.link.connect.timeout.secs"
TOPOLOGY_BLOBSTORE_MAP = "topology.blobstore.map"


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


def flag(value: Any) -> str | None:
    """true or false."""
    return None if isinstance(value, bool) else "true or false"


def path_or_none(value: Any) -> str | None:
    """A path (a string or a ``pathlib.Path``), or None."""
    return None if value is None or isinstance(value, (str, os.PathLike)) else "a path or None"


def anything(_value: Any) -> str | None:
    """Any value: set by stormlet, or checked where it is used (the state provider and its
    settings are checked with the topology's stateful bolts: stormlet/state/providers.py)."""
    return None


def blobstore_map(value: Any) -> dict[str, str]:
    """``topology.blobstore.map`` as {blob key: local file name}. The value is Storm's map,
    ``{"model": {"localname": "model.bin"}}``, its short form ``{"model": "model.bin"}``, or
    either as JSON text (as ``-c`` gives it); None is no blobs. A local name is a plain file
    name (no directory), made in each worker's working directory, and no two keys share one.
    ``ValueError`` saying what is wrong, naming the blob."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"JSON text that does not parse: {value!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"not a map: {value!r}")
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
        "a tracked spout tuple not fully processed within T to 2T seconds fails with reason timeout",
        number(0, above=True)),
    TOPOLOGY_MAX_SPOUT_PENDING: Setting(
        None,
        "per spout task, next_tuple is not called while this many tracked tuples are in flight",
        number(0, whole="tuples", none_means="for no bound; 0 is no bound too")),
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: Setting(
        None, "deliver a tick tuple to a bolt every N seconds",
        number(0, none_means="for no ticks; 0 is none too")),
    TOPOLOGY_DEBUG: Setting(False, "log every emitted tuple", flag),
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
        "run by the next executor while still in the core's caches (stormlet/runtime/runner.py). "
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
OWN_PREFIXES = ("topology.", "storm.", "stormlet.", "offsets.")
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
    return None if wanted is None else f"{key} must be {wanted}, not {value!r}"


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
