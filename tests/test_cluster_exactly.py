"""Effectively-once on a real loopback cluster (ZooKeeper, nimbus, a supervisor, two workers): a
stateful word count over the partitioned log, fed while it runs, one of its workers SIGKILLed
mid-stream; the committed state must then equal a failure-free run's exactly: every word's total
the true count, every (partition, offset, word) counted once.

Quick form (CI): one kill, the embedded store. Full form: ``STORMLET_EXACTLY_SEEDS=20`` runs that
many seeds on each store (embedded, and Redis when installed), each killing a worker (chosen and
timed by the seed) once or twice."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from cluster_support import after_test, serve_cluster, wait_until
from redis_server import RedisServer, redis_available
from zookeeper_server import zookeeper_available

from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state.checkpoint import CHECKPOINT_COMPONENT
from stormlet.state.exactly import PROGRESS_KEY
from stormlet.state.providers import namespace
from stormlet.state.redis_store import KEY_PREFIX
from stormlet.state.store import decode_key, decode_value, encode_key

pytestmark = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")

TOPOLOGY = Path(__file__).resolve().parent / "cluster_topologies" / "exactly_word_count.py"
SENTENCES = 1500
RATE = 300   # sentences a second, appended while the topology runs
SEEDS = int(os.environ.get("STORMLET_EXACTLY_SEEDS", "1"))
STORES = ["embedded"] + (["redis"] if SEEDS > 1 and redis_available() else [])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


@pytest.fixture(autouse=True)
def _logs_on_failure(request, cluster):
    yield
    after_test(request, cluster)


def sentence(i: int) -> str:
    return f"{i} a{i % 13} b{i % 5}"   # two different words


def failure_free_totals() -> dict[str, int]:
    totals = collections.Counter()
    for i in range(SENTENCES):
        totals.update(sentence(i).split()[1:])
    return dict(totals)


class Committed:
    """Reads the count bolt's committed totals and seen-counts, and the checkpoint progress,
    from the embedded store's file (``redis`` None) or from Redis."""

    def __init__(self, db_path: Path, name: str, redis: RedisServer | None):
        self.db_path, self.name, self.redis = db_path, name, redis

    def __call__(self) -> tuple[dict, dict, tuple]:
        if self.redis is None:
            return committed(self.db_path, self.name)
        client = self.redis.client()
        state = {}
        for key in client.scan_iter(match=KEY_PREFIX + namespace(self.name, "count", 0)[:-1]
                                    + "*"):
            if b"$" not in key:
                state.update((decode_key(k), decode_value(v))
                             for k, v in client.hgetall(key).items())
        raw = client.hget(KEY_PREFIX + namespace(self.name, CHECKPOINT_COMPONENT),
                          encode_key(PROGRESS_KEY))
        return split_state(state, decode_value(raw) if raw else (0, "", 0))


def split_state(state: dict, progress: tuple) -> tuple[dict, dict, tuple]:
    totals = {k: n for k, n in state.items() if isinstance(k, str)}
    seen = {k: n for k, n in state.items() if isinstance(k, tuple)}
    return totals, seen, tuple(progress)


def committed(db_path: Path, name: str) -> tuple[dict, dict, tuple]:
    """The count bolt's committed totals and seen-counts, and the checkpoint progress."""
    if not db_path.exists():
        return {}, {}, (0, "", 0)
    db = sqlite3.connect(db_path, timeout=10)
    try:
        rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE ?",
                          (namespace(name, "count", 0)[:-1] + "%",)).fetchall()
        progress = db.execute("SELECT v FROM kv WHERE ns = ? AND k = ?",
                              (namespace(name, CHECKPOINT_COMPONENT),
                               encode_key(PROGRESS_KEY))).fetchone()
    except sqlite3.OperationalError:
        return {}, {}, (0, "", 0)
    finally:
        db.close()
    state = {decode_key(k): decode_value(v) for k, v in rows}
    return split_state(state, decode_value(progress[0]) if progress else (0, "", 0))


def feed(log_path: Path, stop: threading.Event) -> None:
    log = PartitionedLog(log_path)
    try:
        for start in range(0, SENTENCES, RATE // 10):
            if stop.is_set():
                return
            log.append_many([sentence(i) for i in range(start, min(SENTENCES, start + RATE // 10))])
            log.flush()
            time.sleep(0.1)   # the feed's pace, not a wait for the system under test
    finally:
        log.close()


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_killed_worker_leaves_the_committed_word_count_exact(cluster, tmp_path, seed, store):
    if store == "redis":
        with RedisServer(tmp_path / "redis") as redis:
            run(cluster, tmp_path, seed, redis)
    else:
        run(cluster, tmp_path, seed, None)


def run(cluster, tmp_path: Path, seed: int, redis: RedisServer | None) -> None:
    rng = random.Random(seed)
    name = f"exactly{seed}{'r' if redis else ''}"
    log_path = tmp_path / "log"
    PartitionedLog.create(log_path, 2).close()
    committed_now = Committed(cluster.base / "s1" / "state" / f"{name}.sqlite3", name, redis)
    state = ["topology.state.provider=embedded"]
    if redis is not None:
        state = ["topology.state.provider=redis",
                 f"topology.state.provider.config={json.dumps(redis.provider_config)}"]
    cluster.submit(TOPOLOGY, name, "topology.workers=2", f"words.log={log_path}", *state)
    wait_until(lambda: len(cluster.topology_workers(name)) == 2, 40, "two workers")
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(log_path, stop), daemon=True)
    feeder.start()
    try:
        kills = 1 if SEEDS == 1 else rng.choice((1, 2))
        for k in range(kills):
            at = rng.randint(200, SENTENCES // 3) * (k + 1)   # both kills mid-stream
            wait_until(lambda: len(committed_now()[1]) > at * 2, 90,
                       f"{at} sentences' words committed")
            victim = rng.choice(sorted(cluster.topology_workers(name).values(),
                                       key=lambda b: b["pid"]))
            os.kill(victim["pid"], signal.SIGKILL)
            wait_until(lambda: len(cluster.topology_workers(name)) == 2 and victim["pid"] not in
                       {b["pid"] for b in cluster.topology_workers(name).values()},
                       60, "the worker to be restarted")
        expected = failure_free_totals()
        killed_at = time.monotonic()
        try:
            wait_until(lambda: committed_now()[0] == expected, 120,
                       "the committed totals to equal a failure-free run's")
        except AssertionError:
            totals, seen, progress = committed_now()
            off = {w: (totals.get(w), n) for w, n in expected.items() if totals.get(w) != n}
            twice = sorted(k for k, n in seen.items() if n > 1)[:10]
            raise AssertionError(f"committed (got, expected) differ: {off}; counted twice: "
                                 f"{twice}; progress {progress}") from None
        recovered_secs = time.monotonic() - killed_at
        totals, seen, progress = committed_now()
    finally:
        stop.set()
        feeder.join()
        cluster.kill_and_wait(name)
    assert totals == expected
    assert len(seen) == 2 * SENTENCES
    assert {n for n in seen.values()} == {1}, "a word of a record was counted twice"
    assert progress[2] >= 2, f"no recovery happened ({progress}): the kill tested nothing"
    print(f"seed {seed}: {kills} kill(s), exact again {recovered_secs:.1f} s after the last, "
          f"checkpoint progress {progress}")
