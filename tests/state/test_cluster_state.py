"""Checkpointed state and windows on a real loopback cluster: a stateful word count with Redis
whose worker is SIGKILLed mid-stream, the same through a Redis crash and restart, a persistent
stateful window whose worker is SIGKILLed mid-window, and an event-time window whose late tuple
comes from a spout in another worker."""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path

import pytest
from cluster_support import acked_ids, serve_cluster, wait_until
from redis_server import SKIP_REASON, RedisServer, redis_available
from zookeeper_server import zookeeper_available

from stormlet.state.providers import namespace
from stormlet.state.redis_store import KEY_PREFIX
from stormlet.state.store import decode_key, decode_value

pytestmark = [
    pytest.mark.skipif(not zookeeper_available(),
                       reason="ZooKeeper is not installed: run deploy/zookeeper.sh install"),
    pytest.mark.skipif(not redis_available(), reason=SKIP_REASON),
]

TOPOLOGIES = Path(__file__).resolve().parents[1] / "cluster_topologies"
STATEFUL = TOPOLOGIES / "stateful_ledger.py"
STATEFUL_WINDOWS = TOPOLOGIES / "stateful_windows.py"
MESSAGES = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


@pytest.fixture
def redis(tmp_path):
    with RedisServer(tmp_path / "redis") as server:
        yield server


def submit_stateful(cluster, redis, name, ledger_dir):
    """Submit the stateful ledger on two workers, its state on ``redis`` (None: embedded)."""
    ledger_dir.mkdir()
    state = ["topology.state.provider=embedded"]
    if redis is not None:
        state = ["topology.state.provider=redis",
                 f"topology.state.provider.config={json.dumps(redis.provider_config)}"]
    # A message timeout of 4 s, not the topology's 10: the tuples a killed worker held are
    # replayed 4 to 8 s after it died, and the tests wait for that.
    cluster.submit(STATEFUL, name, "topology.workers=2", f"ledger.dir={ledger_dir}",
                   f"ledger.messages={MESSAGES}", "ledger.rate=250",
                   "topology.message.timeout.secs=4", *state)
    wait_until(lambda: len(cluster.topology_workers(name)) == 2, 40, "two workers")


def committed_state(redis, name):
    """Every committed key and value of the totals bolt's tasks, merged."""
    client = redis.client()
    state = {}
    prefix = KEY_PREFIX + namespace(name, "totals", 0)[:-1]
    for key in client.scan_iter(match=prefix + "*"):
        if b"$" in key:
            continue
        for k, v in client.hgetall(key).items():
            state[decode_key(k)] = decode_value(v)
    return state


def embedded_state(path, name):
    import sqlite3
    db = sqlite3.connect(path)
    rows = db.execute("SELECT k, v FROM kv WHERE ns LIKE ?",
                      (namespace(name, "totals", 0)[:-1] + "%",))
    state = {decode_key(k): decode_value(v) for k, v in rows}
    db.close()
    return state


def emitted_counts(ledger_dir):
    counts = collections.Counter()
    for path in ledger_dir.glob("emitted-*.log"):
        counts.update(int(line) for line in path.read_text().split())
    return counts


def check_accounting(state, emitted):
    """Nothing lost, nothing counted more often than it was emitted, and every word's total is
    the sum of its messages' counts (a checkpoint is applied whole)."""
    seen = {key[1]: n for key, n in state.items() if isinstance(key, tuple)}
    totals = {key: n for key, n in state.items() if isinstance(key, str)}
    assert set(seen) == set(range(MESSAGES)), "a message's count is missing"
    over = {m: (n, emitted[m]) for m, n in seen.items() if n > emitted[m]}
    assert not over, f"counted more often than emitted: {sorted(over.items())[:10]}"
    true_counts = collections.Counter(f"w{m % 13}" for m in range(MESSAGES))
    by_word = collections.Counter()
    for m, n in seen.items():
        by_word[f"w{m % 13}"] += n
    assert totals == dict(by_word)
    assert all(totals[w] >= true_counts[w] for w in true_counts)
    return sum(seen.values()) - MESSAGES   # duplicates


def stateful_worker(cluster, name):
    """A worker running a task of the stateful bolt."""
    for beat in cluster.topology_workers(name).values():
        if "totals" in beat["metrics"]:
            return beat
    raise AssertionError("no worker runs the stateful bolt")


def finish(cluster, redis, name, ledger_dir):
    wait_until(lambda: len(acked_ids(ledger_dir)) == MESSAGES, 120, "every message acked")
    # The last acks come with a commit: the committed state holds every message now.
    cluster.kill_and_wait(name)
    if redis is None:   # embedded: the supervisor's state directory
        state = embedded_state(cluster.base / "s1" / "state" / f"{name}.sqlite3", name)
    else:
        state = committed_state(redis, name)
    return check_accounting(state, emitted_counts(ledger_dir))


def test_a_stateful_word_count_with_redis_survives_a_killed_worker(cluster, redis, tmp_path):
    ledger_dir = tmp_path / "ledger"
    submit_stateful(cluster, redis, "stkill", ledger_dir)
    wait_until(lambda: len(acked_ids(ledger_dir)) > 600, 60, "600 messages acked")
    victim = stateful_worker(cluster, "stkill")
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(lambda: len(cluster.topology_workers("stkill")) == 2
               and victim["pid"] not in {b["pid"]
                                         for b in cluster.topology_workers("stkill").values()},
               60, "the worker to be restarted")
    duplicates = finish(cluster, redis, "stkill", ledger_dir)
    emitted = emitted_counts(ledger_dir)
    assert sum(emitted.values()) > MESSAGES, "the kill replayed nothing: it tested nothing"
    print(f"killed worker: {duplicates} duplicate counts, "
          f"{sum(emitted.values()) - MESSAGES} re-emits")


def test_the_embedded_store_serves_two_workers_from_the_supervisor_s_state_directory(
        cluster, tmp_path):
    ledger_dir = tmp_path / "ledger"
    submit_stateful(cluster, None, "stembed", ledger_dir)
    wait_until(lambda: len(acked_ids(ledger_dir)) > 300, 60, "300 messages acked")
    victim = stateful_worker(cluster, "stembed")
    os.kill(victim["pid"], signal.SIGKILL)
    duplicates = finish(cluster, None, "stembed", ledger_dir)
    print(f"embedded, killed worker: {duplicates} duplicate counts")


def test_a_stateful_word_count_with_redis_survives_a_redis_crash(cluster, redis, tmp_path):
    ledger_dir = tmp_path / "ledger"
    submit_stateful(cluster, redis, "stredis", ledger_dir)
    wait_until(lambda: len(acked_ids(ledger_dir)) > 600, 60, "600 messages acked")
    committed_before = committed_state(redis, "stredis")
    redis.kill()
    time.sleep(3)   # checkpoints fail meanwhile; nothing committed may be lost
    acked_while_down = len(acked_ids(ledger_dir))
    time.sleep(2)
    assert len(acked_ids(ledger_dir)) == acked_while_down, "acked while Redis was down"
    redis.start()
    after = committed_state(redis, "stredis")
    assert all(after.get(k, 0) >= v for k, v in committed_before.items())
    duplicates = finish(cluster, redis, "stredis", ledger_dir)
    print(f"redis crash: {duplicates} duplicate counts")


def embedded_rows(path, ns):
    """The committed keys and values of namespace ``ns`` in the embedded store ``path``."""
    import sqlite3
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT k, v FROM kv WHERE ns = ?", (ns,)).fetchall()
    finally:
        db.close()
    return {decode_key(k): decode_value(v) for k, v in rows}


# STORMLET_STATEFUL_WINDOW_FULL=1: the stateful window's full form, 6,000 ids and three kills.
WINDOW_FULL = os.environ.get("STORMLET_STATEFUL_WINDOW_FULL", "") not in ("", "0")


def test_a_persistent_stateful_window_survives_a_worker_killed_mid_window(cluster, tmp_path):
    """Its committed window comes back with the restarted worker (those ids were acked: their
    spouts never send them again), the ids since are replayed, and every window holds fifty."""
    name, window = "stwin", 50   # stateful_windows.WINDOW
    messages, kills = (6000, 3) if WINDOW_FULL else (MESSAGES // 2, 1)
    ledger_dir = tmp_path / "ledger"
    ledger_dir.mkdir()
    # A 4 s message timeout, as submit_stateful's: the killed worker's ids come back sooner.
    cluster.submit(STATEFUL_WINDOWS, name, "topology.workers=2", f"ledger.dir={ledger_dir}",
                   f"ledger.messages={messages}", "ledger.rate=250",
                   "topology.message.timeout.secs=4")
    wait_until(lambda: len(cluster.topology_workers(name)) == 2, 40, "two workers")
    db = cluster.base / "s1" / "state" / f"{name}.sqlite3"

    def bolt_worker():
        return next((beat for beat in cluster.topology_workers(name).values()
                     if "windows" in beat["metrics"]), None)

    def window_rows():
        return [embedded_rows(db, ns) for ns in _namespaces(db, name, "windows")
                if ns.endswith("/window")]

    def half_full():
        """A committed window holding ids of a window not yet fired (acked: only it has them)."""
        return any(rows.get("partitions", {}).get("count", 0) % window for rows in window_rows())

    killed: set[int] = set()
    for kill in range(1, kills + 1):
        at = kill * messages // (kills + 2)
        wait_until(lambda: len(acked_ids(ledger_dir)) > at and half_full()
                   and (bolt_worker() or {}).get("pid") not in killed | {None}, 60,
                   f"{at} ids acked and a half-full window committed")
        victim = bolt_worker()
        killed.add(victim["pid"])
        os.kill(victim["pid"], signal.SIGKILL)
    wait_until(lambda: len(acked_ids(ledger_dir)) == messages, 90 * kills, "every id acked")
    cluster.kill_and_wait(name)
    state = {}
    for ns in _namespaces(db, name, "windows"):
        if not ns.endswith("/window"):
            state.update(embedded_rows(db, ns))
    emitted = emitted_counts(ledger_dir)
    assert sum(emitted.values()) > messages, "the kill replayed nothing: it tested nothing"
    windows = [state[("window", k)] for k in range(state["windows"])]
    assert all(len(ids) == window for ids in windows), "a window does not hold fifty"
    seen = {key[1]: n for key, n in state.items() if isinstance(key, tuple) and key[0] == "seen"}
    assert collections.Counter(i for ids in windows for i in ids) == collections.Counter(seen)
    # Nothing lost: the ids no window has fired with are in the window still, fewer than fifty
    # (the committed half window came back with the restarted worker: its ids were acked, and
    # no spout sent them again).
    waiting = {event[5][0] for rows in window_rows() for key, events in rows.items()
               if isinstance(key, tuple) for event in events}
    missing = set(range(messages)) - set(seen)
    assert missing <= waiting and len(missing) < window, f"ids lost: {sorted(missing)[:10]}"
    # And none counted more often than it was emitted.
    over = {i: (n, emitted[i]) for i, n in seen.items() if n > emitted[i]}
    assert not over, f"counted more often than emitted: {sorted(over.items())[:10]}"
    print(f"stateful window, killed worker: {sum(seen.values()) - len(seen)} duplicate counts, "
          f"{sum(emitted.values()) - messages} re-emits")


def _namespaces(db, name, component):
    import sqlite3
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT DISTINCT ns FROM kv WHERE ns LIKE ?",
                            (namespace(name, component) + "/%",)).fetchall()
    finally:
        conn.close()
    return [ns for (ns,) in rows]


def test_event_time_windows_across_two_workers_pin_their_contents_and_late_tuples_cross(
        cluster, tmp_path):
    BASE = 1_700_000_000_000   # event_windows.BASE
    out = tmp_path / "out"
    out.mkdir()
    cluster.submit(TOPOLOGIES / "event_windows.py", "ewin", "topology.workers=2",
                   f"windows.dir={out}")
    wait_until(lambda: len(cluster.topology_workers("ewin")) == 2, 40, "two workers")
    workers = cluster.topology_workers("ewin")
    spout_workers = [slot for slot, beat in workers.items() if "stamped" in beat["metrics"]]
    assert len(spout_workers) == 2, "each spout task in its own worker"

    def records():
        lines = [json.loads(line) for path in out.glob("out-*.jsonl")
                 for line in path.read_text().splitlines()]
        return lines

    wait_until(lambda: sum(r["stream"] == "late" for r in records()) == 2, 60,
               "both late tuples")
    cluster.kill_and_wait("ewin")
    windows = [r["values"] for r in records()
               if r["stream"] == "default" and r["component"] == "totals"]
    # Count windows in processing time: whichever order the two spouts' tuples interleave in,
    # six windows of fifty hold every id once.
    counted = [r["values"][2] for r in records() if r["component"] == "counted"]
    assert [len(ids) for ids in counted] == [50] * 6
    assert sorted(i for ids in counted for i in ids) == list(range(300))
    late = sorted(r["values"] for r in records() if r["stream"] == "late")
    # ids 0..299 at BASE + id*10 ms: 100 ids per 1 s window; the last window (200..299) never
    # fires, as nothing later moves the watermark past its end.
    assert windows == [[BASE, BASE + 1000, list(range(0, 100))],
                       [BASE + 1000, BASE + 2000, list(range(100, 200))]]
    assert late == [[[-2, BASE + 5]], [[-1, BASE + 5]]]
    assert "totals" in workers[spout_workers[0]]["metrics"] or \
        "totals" in workers[spout_workers[1]]["metrics"]
