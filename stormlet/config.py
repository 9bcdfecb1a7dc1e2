"""Topology configuration keys and their defaults, in one place.

Keys keep Apache Storm's names so that Storm users find what they know. A topology's config is
a plain ``dict``; a component's own config (``declarer.add_config``) overrides the topology's for
that component only.
"""

from __future__ import annotations

from typing import Any

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

#: Every key stormlet reads, with its default and what it means.
DEFAULTS: dict[str, tuple[Any, str]] = {
    TOPOLOGY_WORKERS: (1, "worker processes for the topology (local mode runs one)"),
    TOPOLOGY_ACKER_EXECUTORS: (
        None,
        "acker executors; None means one per worker, 0 turns tracking off "
        "(spouts are acked as soon as they emit)",
    ),
    TOPOLOGY_MESSAGE_TIMEOUT_SECS: (
        30,
        "a tracked spout tuple not fully processed within T to 2T seconds fails with reason timeout",
    ),
    TOPOLOGY_MAX_SPOUT_PENDING: (
        None,
        "per spout task, next_tuple is not called while this many tracked tuples are in flight",
    ),
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: (None, "deliver a tick tuple to a bolt every N seconds"),
    TOPOLOGY_DEBUG: (False, "log every emitted tuple"),
    TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE: (
        64,
        "batches an executor's inbox holds before senders wait (backpressure)",
    ),
    TOPOLOGY_TRANSFER_BATCH_SIZE: (
        512,
        "tuples buffered for one destination before the buffer is handed over early: a bolt "
        "hands it over after the batch it is executing, a spout's burst of next_tuple calls "
        "ends once it emitted this many",
    ),
    TOPOLOGY_SPOUT_WAIT_MS: (
        1.0,
        "how long a spout that emitted nothing waits for acks before calling next_tuple again",
    ),
    TOPOLOGY_HANG_WARNING_SECS: (
        30,
        "a component in one execute, next_tuple, ack or fail call (or one batch of them) this "
        "long is reported as hung, with its thread's stack; 0 turns the check off",
    ),
    TOPOLOGY_ERROR_THROTTLE_INTERVAL_SECS: (
        10,
        "errors of one kind (same place, same exception type) beyond the first few are counted "
        "and summarized once per this many seconds, per task",
    ),
    TOPOLOGY_MAX_ERROR_REPORT_PER_INTERVAL: (
        5,
        "errors of one kind logged in full per task before the rest are only counted (again "
        "after the kind was quiet for an interval)",
    ),
    STORMLET_TOPOLOGY_ID: (
        None,
        "set by stormlet: this run of the topology (a resubmission gets a new id)",
    ),
    STORMLET_ZOOKEEPER_CONNECT: (
        None,
        "set by workers: the cluster's ZooKeeper hosts (offset spouts commit there)",
    ),
    STORMLET_ZOOKEEPER_ROOT: (None, "set by workers: the cluster's root node in ZooKeeper"),
    TOPOLOGY_SPOUT_DEAD_LETTER_ATTEMPTS: (
        None,
        "after this many fails of one message id, a spout's message goes to the failed-message "
        "log instead of to fail() (Spout.dead_lettered is called); None: never",
    ),
    STORMLET_FAILED_DIR: (
        None,
        "directory of the failed-message log (dead letters); on a cluster, a shared path",
    ),
    TOPOLOGY_METRICS_REPORT_SECS: (
        5,
        "how often each worker sends its metrics (one message per worker) to the nimbus leader",
    ),
    TOPOLOGY_STATE_PROVIDER: (
        "embedded",
        "where stateful bolts keep their state: embedded (a SQLite file in stormlet.state.dir), "
        "redis, or memory (lost when a worker stops: for tests)",
    ),
    TOPOLOGY_STATE_PROVIDER_CONFIG: (
        None,
        "the state provider's settings, a dict or JSON text: redis takes host, port, db, "
        "password; embedded takes dir",
    ),
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: (
        1000,
        "how often stateful bolts checkpoint their state; their acks wait for the checkpoint, "
        "so it must be shorter than the message timeout",
    ),
    STORMLET_STATE_DIR: (
        None,
        "directory of the embedded state store; None: stormlet-state in the working directory "
        "in local mode, DATA_DIR/state of the supervisor on a cluster",
    ),
    OFFSETS_START_OVER: (
        False,
        "offset spouts ignore earlier topologies' commits and read from the earliest offset",
    ),
}


def default_config() -> dict[str, Any]:
    """A fresh dict holding every key's default."""
    return {key: default for key, (default, _doc) in DEFAULTS.items()}


def merged(*layers: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults overridden by each layer in turn (later layers win)."""
    conf = default_config()
    for layer in layers:
        if layer:
            conf.update(layer)
    return conf


def transfer_batch_size(conf: dict[str, Any]) -> int | None:
    """``topology.transfer.batch.size`` of ``conf`` (defaults included): a whole number of
    tuples, or None for no bound. ``ValueError`` naming the key for anything else."""
    value = conf.get(TOPOLOGY_TRANSFER_BATCH_SIZE, DEFAULTS[TOPOLOGY_TRANSFER_BATCH_SIZE][0])
    if value is None:
        return None
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 1:
        raise ValueError(f"{TOPOLOGY_TRANSFER_BATCH_SIZE} must be a whole number of tuples, at "
                         f"least 1 (or None for no bound), not {value!r}")
    return int(value)


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
