"""Choosing a state backend from a topology's config (Storm's keys).

    topology.state.provider         embedded (the default), redis or memory; Storm's provider
                                    class names for redis and memory are understood too
    topology.state.provider.config  a dict or JSON text: redis takes host, port, db, password
                                    (or Storm's jedisPoolConfig); embedded takes dir

Each namespace is ``<topology>/<component>/<task>`` for a stateful bolt's task and
``<topology>/<component>`` for the checkpoint spout, so a topology resubmitted under its name
resumes its state, and tasks and topologies never share keys.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from .. import config as cfg
from .embedded import EmbeddedStore, state_file
from .key_value import KeyValueState
from .store import MemoryStore, StateError, Store

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
REDIS = "redis"
MEMORY = "memory"
# The embedded store's directory in local mode, when neither the provider config nor
# stormlet.state.dir names one.
LOCAL_STATE_DIR = "stormlet-state"

_ALIASES = {
    EMBEDDED: EMBEDDED, "sqlite": EMBEDDED,
    REDIS: REDIS, "org.apache.storm.redis.state.RedisKeyValueStateProvider": REDIS,
    MEMORY: MEMORY, "org.apache.storm.state.InMemoryKeyValueStateProvider": MEMORY,
}


def namespace(topology: str, component: str, task: int | None = None) -> str:
    return f"{topology}/{component}" if task is None else f"{topology}/{component}/{task}"


def provider_name(conf: dict[str, Any]) -> str:
    """The backend ``conf`` asks for; raises ``StateError`` for one stormlet does not know."""
    asked = conf.get(cfg.TOPOLOGY_STATE_PROVIDER) or EMBEDDED
    try:
        return _ALIASES[asked]
    except (KeyError, TypeError):
        known = ", ".join(sorted(k for k in _ALIASES if "." not in k))
        raise StateError(f"{cfg.TOPOLOGY_STATE_PROVIDER} {asked!r} is not a state provider "
                         f"stormlet has (it has {known})") from None


def provider_config(conf: dict[str, Any]) -> dict[str, Any]:
    raw = conf.get(cfg.TOPOLOGY_STATE_PROVIDER_CONFIG)
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise StateError(f"{cfg.TOPOLOGY_STATE_PROVIDER_CONFIG} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise StateError(f"{cfg.TOPOLOGY_STATE_PROVIDER_CONFIG} must be a dict or JSON object, "
                         f"got {raw!r}")
    return raw


def config_problems(conf: dict[str, Any]) -> list[str]:
    """What is wrong with ``conf``'s state settings, as text for a submit error. Each value's
    own kind is checked before (``config.problems``): here, whether they work together."""
    problems = []
    try:
        provider_name(conf)
        provider_config(conf)
    except StateError as exc:
        problems.append(str(exc))
    interval = conf.get(cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS)
    timeout = conf.get(cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS)
    # As Storm's PersistentWindowedBoltExecutor: equal is fine.
    if interval is not None and timeout is not None and interval > timeout * 1000:
        problems.append(f"{cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS} ({interval:g} ms) must not "
                        f"be longer than the message timeout ({timeout:g} s, "
                        f"{cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS}): acks wait for the checkpoint")
    action = conf.get(cfg.TOPOLOGY_STATE_CHECKPOINT_TIMEOUT_SECS)
    if action is not None and timeout is not None and action > timeout:
        problems.append(f"{cfg.TOPOLOGY_STATE_CHECKPOINT_TIMEOUT_SECS} ({action:g} s) must not "
                        f"be longer than the message timeout ({timeout:g} s, "
                        f"{cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS}): it is there to recover sooner")
    return problems


def state_dir(conf: dict[str, Any]) -> Path:
    """The embedded store's directory under ``conf``."""
    return Path(provider_config(conf).get("dir") or conf.get(cfg.STORMLET_STATE_DIR)
                or LOCAL_STATE_DIR)


def open_state(conf: dict[str, Any], topology: str, name: str) -> KeyValueState:
    """The ``KeyValueState`` of namespace ``name`` of ``topology``, on ``conf``'s backend."""
    return KeyValueState(open_store(conf, topology, name))


def open_store(conf: dict[str, Any], topology: str, name: str) -> Store:
    provider = provider_name(conf)
    if provider == MEMORY:
        if conf.get(cfg.STORMLET_ZOOKEEPER_CONNECT):
            log.warning("state %s is in memory (%s=memory): it does not survive a worker "
                        "restart; use embedded or redis on a cluster", name,
                        cfg.TOPOLOGY_STATE_PROVIDER)
        return MemoryStore(name)
    if provider == REDIS:
        from .redis_store import RedisStore, connect
        return RedisStore(connect(provider_config(conf)), name,
                          owner=str(conf.get(cfg.STORMLET_TOPOLOGY_ID) or ""),
                          epoch=int(conf.get(cfg.STORMLET_STATE_EPOCH) or 0))
    return EmbeddedStore(state_file(state_dir(conf), topology), name)
