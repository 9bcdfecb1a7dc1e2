"""Chaos runs: a reliable topology on a real loopback cluster, real faults, and a report.

    with LoopbackCluster(base) as cluster:
        run = ChaosRun(cluster, base / "run", messages=20_000, rate=1000)
        run.start()
        run.inject("worker")            # SIGKILL one of the topology's workers
        ...
        report = run.finish()           # waits until every message is acked, then counts

The source is a 4-partition local log that a producer thread appends to at ``rate`` messages per
second, as a live stream would arrive; the topology (``chaos_topology.py``) tails it with an
offset-tracking spout. A message is lost if its id never reached the sink; the spout's commits
reaching the log's end, with retries that never give up, mean every message was acked. Progress is
sampled four times a second, so the report can say how long each fault held throughput down.
With ``history=True`` the run also keeps a history (tests/history.py: heartbeats and ZooKeeper
over time) and its report the checker's findings: offsets below the commits no sink saw, when
the cluster noticed each fault, and how long a spout task ran in two workers at once;
``report.table()`` is the run as a row of the scenario table.

With ``guarantee="effectively-once"`` (a stateful run) the topology runs in that mode, and the
checker's stateful count becomes exact equality: every message counted exactly once in the
committed state, as a failure-free run counts it; at-least-once runs report the messages
counted more than once too, which that mode allows. The topology then has a sink of that mode
too (``chaos_stateful_sink_topology.py``: a ``RedisUpsertBolt`` writing each message's id -> its
count), and the checker requires its committed hash to be a failure-free run's: every message's
id once, with 1, and nothing else. ``report.exact`` covers both.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chaos_stateful_sink_topology import SINK_HASH
from chaos_topology import ID_WIDTH
from cluster_support import LoopbackCluster, wait_until

from stormlet import config as cfg
from stormlet.cluster.security import Security
from stormlet.cluster.zk_state import ClusterState, connect, offsets_path
from stormlet.sources.offset_store import ZooKeeperOffsetStore
from stormlet.sources.partitioned_log import PartitionedLog
from stormlet.state.redis_store import KEY_PREFIX
from stormlet.state.store import decode_key, decode_value

if TYPE_CHECKING:   # imported where a run keeps a history (tests/ is on the path of every run)
    from history import Detection, History, RunningTwice

TOPOLOGY = Path(__file__).resolve().parent / "chaos_topology.py"
# The same pipeline with a stateful bolt whose state is on a Redis server (``redis=`` below).
STATEFUL_TOPOLOGY = Path(__file__).resolve().parent / "chaos_stateful_topology.py"
# And with a sink of effectively-once, for stateful runs in that mode.
SINK_TOPOLOGY = Path(__file__).resolve().parent / "chaos_stateful_sink_topology.py"
# How long the sink's committed hash may take to equal a failure-free run's once every message
# is acked: its last checkpoint's COMMIT (the publish) follows the spouts' commits.
SINK_SETTLE_SECS = 60.0
NAME = "chaos"
PARTITIONS = 4
FAULTS = ("worker", "supervisor", "nimbus", "zookeeper")


@dataclass
class Fault:
    kind: str
    at: float                    # seconds since the run started
    detail: str
    recovered_after: float | None = None
    wall: float = 0.0            # time.time() at injection
    lasts: float = 0.0           # seconds until it is undone (its down_secs; 0: a moment)
    detected: Detection | None = None   # where the run kept a history


# The report's table, one row per run (scenario): see ChaosReport.row.
ROW_FORMAT = "{:<28} {:>8} {:>6} {:>4} {:>6} {:>22} {:>9}  {}"
ROW_HEADER = ROW_FORMAT.format("scenario", "messages", "faults", "lost", "dups", "detected after",
                               "recovered", "running twice (longest; total)")


@dataclass
class ChaosReport:
    messages: int
    seconds: float
    faults: list[Fault]
    lost: int
    duplicates: int
    uncounted: int | None = None   # stateful runs: messages missing from the committed state
    overcounted: int | None = None  # stateful runs: messages counted more than once in it
    scenario: str = ""
    # With a history (tests/history.py): offsets below the final commits no sink saw, offsets
    # below a commit no sink had seen when it was made, and the longest stretch a spout task
    # ran in two workers at once (a history.RunningTwice).
    unprocessed: int | None = None
    acked_unseen: int | None = None
    twice: RunningTwice | None = None
    history: list[str] | None = None   # the history in brief (History.lines), printed last
    # Stateful runs on hosts: the state's writes as Redis ran them (a history.StateCheck), and
    # its lines (StateCheck.lines), printed before the history.
    state: object = None
    state_lines: list[str] | None = None
    # Runs with the sink of effectively-once (SINK_TOPOLOGY): its committed records, those of
    # a failure-free run missing from them, those there that differ from a failure-free run's
    # (a count other than 1, or an id it never writes), and the seconds from every message
    # acked until they equalled a failure-free run's (None: they never did).
    sink_records: int | None = None
    sink_missing: int | None = None
    sink_wrong: int | None = None
    sink_settled: float | None = None

    @property
    def exact(self) -> bool:
        """A stateful run's committed state is a failure-free run's: every message in it, each
        counted once; and so are its sink's committed records, where it has the sink."""
        sink = self.sink_records is None or (self.sink_missing == 0 and self.sink_wrong == 0)
        return self.uncounted == 0 and self.overcounted == 0 and sink

    def row(self) -> str:
        """This run as one row of the scenario table (``ROW_HEADER``): its faults' detection
        and recovery times, joined with "/" when there are several."""
        def join(values) -> str:
            return "/".join(values) or "-"

        detected = join(str(f.detected) if f.detected is not None else "not seen"
                        for f in self.faults)
        recovered = join("-" if f.recovered_after is None else
                         "no dip" if f.recovered_after == 0 else f"{f.recovered_after:.1f}s"
                         for f in self.faults)
        twice = "not measured" if self.twice is None else (
            f"{self.twice}; {self.twice.total:.1f}s" if self.twice.task is not None else "none")
        return ROW_FORMAT.format(self.scenario or "-", self.messages, len(self.faults),
                                 self.lost, self.duplicates, detected, recovered, twice)

    def table(self) -> list[str]:
        return [ROW_HEADER, self.row()]

    def lines(self) -> list[str]:
        out = [f"messages: {self.messages} in {self.seconds:.0f}s; faults injected: "
               f"{len(self.faults)}; lost: {self.lost}; duplicates delivered: {self.duplicates}"
               + ("" if self.uncounted is None
                  else f"; missing from the committed state: {self.uncounted}")
               + ("" if self.overcounted is None
                  else f"; counted more than once in it: {self.overcounted}")]
        if self.sink_records is not None:
            settled = ("never equal to a failure-free run's" if self.sink_settled is None
                       else f"equal to a failure-free run's {self.sink_settled:.1f}s after the "
                            f"last ack")
            out.append(f"  the sink's committed records: {self.sink_records}, {settled}; "
                       f"missing: {self.sink_missing}; other than a failure-free run's: "
                       f"{self.sink_wrong}")
        for f in self.faults:
            recovery = ("not measured: the run ended first" if f.recovered_after is None
                        else "throughput never fell below 80%" if f.recovered_after == 0
                        else f"throughput back after {f.recovered_after:.1f}s")
            detection = ("" if f.detected is None
                         else f"; noticed after {f.detected} {f.detected.detail}")
            out.append(f"  {f.at:7.1f}s  {f.kind:<10} {f.detail}: {recovery}{detection}")
        if self.unprocessed is not None:
            out.append(f"  offsets below the final commits no sink saw: {self.unprocessed}; "
                       f"below a commit, unseen when it was made: {self.acked_unseen}")
        if self.state_lines:
            out += self.state_lines
        if self.history:
            out += ["  history (seconds from the start of the stream):", *self.history]
        return out


class ChaosRun:
    def __init__(self, cluster: LoopbackCluster, workdir: Path, messages: int, rate: float,
                 workers: int = 3, seed: int | None = None, redis=None, scenario: str = "",
                 history: bool = False, topology: Path | None = None,
                 guarantee: str | None = None):
        """With ``redis`` (a ``RedisServer``), the stateful topology runs, its state there
        (``topology``: another stateful topology file, its stateful bolt ``tally`` too), in
        ``guarantee`` (``topology.guarantee``; None: the topology's, at-least-once); in
        effectively-once, by default with the sink of that mode (``SINK_TOPOLOGY``).
        With ``history``, a ``history.History`` records the run and ``finish`` checks it
        (tests/history.py; the watcher runs with ``watch_prefix()``)."""
        self.cluster = cluster
        if topology is None and redis is not None:
            topology = (SINK_TOPOLOGY if guarantee == cfg.EFFECTIVELY_ONCE
                        else STATEFUL_TOPOLOGY)
        self.topology = topology or TOPOLOGY
        self.scenario = scenario
        self.keep_history = history
        self.history: History | None = None
        self.redis = redis
        self.guarantee = guarantee
        # The cluster's credentials, to read its ZooKeeper as its daemons do.
        self.security = Security.load(cluster.secret_file)
        self.workdir = workdir
        self.messages = messages
        self.rate = rate
        self.workers = workers
        self.random = random.Random(seed)
        self.log_path = workdir / "log"
        self.seen_dir = workdir / "seen"
        self.faults: list[Fault] = []
        self.samples: list[tuple[float, int]] = []   # (seconds since start, messages seen)
        self.appended = 0
        self.started = 0.0
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----- running

    def start(self) -> None:
        self.seen_dir.mkdir(parents=True)
        PartitionedLog.create(self.log_path, PARTITIONS).close()
        state = []
        if self.redis is not None:
            state = ["-c", "topology.state.provider=redis", "-c",
                     f"topology.state.provider.config={json.dumps(self.redis.provider_config)}"]
        if self.guarantee is not None:
            state += ["-c", f"topology.guarantee={self.guarantee}"]
        result = self.cluster.cli("submit", str(self.topology),
                                  "--name", NAME, "-c", f"topology.workers={self.workers}",
                                  "-c", f"chaos.log={self.log_path}",
                                  "-c", f"chaos.dir={self.seen_dir}", *state)
        assert result.returncode == 0, result.stderr
        if self.keep_history:
            from history import History  # tests/ is on the path of every chaos run
            self.history = History(self.cluster, self.seen_dir, self.log_path, NAME)
            self.history.start(self.watch_prefix())
        wait_until(lambda: len(self.topology_workers()) == self.workers, 60, "the workers")
        self.started = time.monotonic()
        self.started_wall = time.time()
        for target in (self._produce, self._sample):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)

    def watch_prefix(self) -> tuple[str, ...]:
        """The command that runs the ZooKeeper watcher where ZooKeeper is reached."""
        return ()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _produce(self) -> None:
        log = PartitionedLog(self.log_path)
        step = 0.1
        while self.appended < self.messages and not self._done.is_set():
            due = min(self.messages, int(self.elapsed() * self.rate) + 1)
            if due > self.appended:
                log.append_many([f"{i:09d}" for i in range(self.appended, due)])
                log.flush()
                self.appended = due
            time.sleep(step)
        log.close()

    def _sample(self) -> None:
        while not self._done.is_set():
            self.samples.append((self.elapsed(), self.seen_count()))
            time.sleep(0.25)

    def seen_count(self) -> int:
        return sum(p.stat().st_size for p in self.seen_dir.glob("seen-*.log")) // ID_WIDTH

    def topology_workers(self) -> dict[tuple[str, int], dict]:
        return {slot: beat for slot, beat in self.cluster.heartbeats().items()
                if beat["topology_id"].startswith(NAME + "-")}

    # ----- faults

    def inject(self, kind: str, **options) -> Fault:
        at, wall = self.elapsed(), time.time()
        action = getattr(self, f"_kill_{kind}")
        lasts = options.get("down_secs")
        if lasts is None:
            default = inspect.signature(action).parameters.get("down_secs")
            lasts = 0.0 if default is None else default.default
        detail = action(**options)
        fault = Fault(kind, at, detail, wall=wall, lasts=lasts)
        self.faults.append(fault)
        return fault

    def _kill_worker(self) -> str:
        slot, beat = self.random.choice(sorted(self.topology_workers().items()))
        os.kill(beat["pid"], signal.SIGKILL)
        return f"SIGKILL worker {slot[0]}:{slot[1]} (pid {beat['pid']})"

    def _kill_supervisor(self, down_secs: float = 15.0) -> str:
        hosting = sorted({sid for sid, _port in self.topology_workers()})
        sid = self.random.choice(hosting)
        victims = [b["pid"] for (s, _p), b in self.topology_workers().items() if s == sid]
        daemon = self.cluster.supervisors[sid]
        daemon.kill()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._later(down_secs, daemon.start)
        return (f"SIGKILL supervisor {sid} and its {len(victims)} workers "
                f"(back after {down_secs:.0f}s)")

    def _kill_nimbus(self, down_secs: float = 5.0) -> str:
        # Right after a leader dies its record lingers until its session expires: wait for a
        # leader that is alive, or we would "kill" a dead one and start it twice.
        def live_leader():
            port = str(self._leader().get("port"))
            return next((d for d in self.cluster.nimbuses if port in d.args and d.alive()), None)

        wait_until(lambda: live_leader() is not None, 30, "a live leading nimbus")
        daemon = live_leader()
        daemon.kill()
        self._later(down_secs, daemon.start)
        return (f"SIGKILL the leading nimbus {daemon.name} "
                f"(back as a standby after {down_secs:.0f}s)")

    def _kill_zookeeper(self, down_secs: float = 12.0) -> str:
        self.cluster.zk.stop(hard=True)
        self._later(down_secs, self.cluster.zk.start)
        return f"ZooKeeper SIGKILLed, restarted after {down_secs:.0f}s"

    def _kill_redis(self, down_secs: float = 5.0) -> str:
        self.redis.kill()
        self._later(down_secs, self.redis.start)
        return f"Redis SIGKILLed, restarted after {down_secs:.0f}s"

    def _later(self, secs: float, action) -> None:
        timer = threading.Timer(secs, action)
        timer.daemon = True
        timer.start()
        self._threads.append(timer)

    def _leader(self) -> dict:
        client = connect(self.cluster.zk.hosts, security=self.security)
        try:
            return ClusterState(client).leader() or {}
        finally:
            client.stop()
            client.close()

    # ----- the end

    def committed(self) -> dict[int, int]:
        store = ZooKeeperOffsetStore(self.cluster.zk.hosts, offsets_path(), self.security)
        try:
            return {p: r["offset"] for p, r in store.all().get("chaos", {}).items()}
        except Exception:  # ZooKeeper may be down for a fault just now
            return {}
        finally:
            store.close()

    def finish(self, timeout: float = 300) -> ChaosReport:
        """Wait for the producer, then for every message to be acked (the commits reach the
        log's end); stop the topology and count what the sinks saw."""
        wait_until(lambda: self.appended >= self.messages, timeout, "the producer to finish")
        for thread in self._threads:
            if isinstance(thread, threading.Timer):
                thread.join()          # a daemon still down comes back before the end
        log = PartitionedLog(self.log_path)
        ends = {p: log.end_offset(p) for p in range(PARTITIONS)}
        log.close()
        wait_until(lambda: self.committed() == ends, timeout, "every message to be acked")
        seconds = self.elapsed()
        expected = {f"{i:09d}" for i in range(self.messages)}
        sink = self._settle_sink(expected) if self.topology == SINK_TOPOLOGY else None
        self._done.set()
        if self.history is not None:
            self.history.stop()
        result = self.cluster.cli("kill", NAME, "--wait", "2")
        assert result.returncode == 0, result.stderr
        counts: dict[str, int] = {}
        for path in self.seen_dir.glob("seen-*.log"):
            for line in path.read_text().split():
                counts[line] = counts.get(line, 0) + 1
        lost = len(expected - counts.keys())
        duplicates = sum(counts.values()) - len(counts)
        uncounted = overcounted = None
        if self.redis is not None:
            tallied = self.committed_counts()
            uncounted = len(expected - tallied.keys())
            overcounted = sum(1 for n in tallied.values() if n > 1)
        self._measure_recovery()
        report = ChaosReport(self.messages, seconds, self.faults, lost, duplicates, uncounted,
                             overcounted, scenario=self.scenario)
        if sink is not None:
            records, settled = sink
            report.sink_records, report.sink_settled = len(records), settled
            report.sink_missing = len(expected - records.keys())
            report.sink_wrong = sum(1 for key, value in records.items()
                                    if key not in expected or value != 1)
        if self.history is not None:
            self._check_history(report, ends)
        return report

    def _check_history(self, report: ChaosReport, ends: dict[int, int]) -> None:
        """The history's checks and measures, into the report and its faults."""
        history = self.history
        assert history is not None   # only where the run kept one
        end = self.started_wall + report.seconds
        for f in self.faults:
            f.detected = history.detection(f.kind, f.wall, until=end)
        report.unprocessed = len(history.unprocessed(ends))
        report.acked_unseen = len(history.acked_unseen())
        report.twice = history.running_twice()
        report.history = history.lines(self.started_wall)

    def sink_committed(self) -> dict[str, int]:
        """The sink's committed records (SINK_TOPOLOGY): message id -> count, from Redis."""
        fields = self.redis.hashes(SINK_HASH).get(SINK_HASH.encode(), {})
        return {key.decode(): int(value) for key, value in fields.items()}

    def _settle_sink(self, expected: set[str]) -> tuple[dict[str, int], float | None]:
        """The sink's committed records once they equal a failure-free run's (every id in
        ``expected`` once, with 1), or as they are after SINK_SETTLE_SECS without; and the
        seconds that took (None: they never did)."""
        start = time.monotonic()
        deadline = start + SINK_SETTLE_SECS
        while True:
            records = self.sink_committed()
            if records.keys() == expected and all(v == 1 for v in records.values()):
                return records, time.monotonic() - start
            if time.monotonic() > deadline:
                return records, None
            time.sleep(0.5)

    def committed_counts(self) -> dict[str, int]:
        """The stateful bolt's committed count of each message, read from Redis."""
        counts: dict[str, int] = {}
        for key, fields in self.redis.hashes(f"{KEY_PREFIX}{NAME}/tally/*").items():
            if b"$" not in key:
                counts.update({decode_key(k): decode_value(v) for k, v in fields.items()})
        return counts

    def _measure_recovery(self) -> None:
        """Per fault: seconds from it until the sink's rate over a second is back to 80% of the
        production rate (or above it, catching up; or, past the stream's end, the sink has
        caught up with everything) after the last second below that which began before the
        fault was undone (plus 2 s: its effect may lag). 0 when no second fell below it."""
        samples = self.samples
        stream_end = self.messages / self.rate
        for fault in self.faults:
            until = fault.at + fault.lasts + 2.0
            states = []
            for i, (t, seen) in enumerate(samples):
                if t < fault.at + 0.5:
                    continue
                before = next((s for s in reversed(samples[:i]) if s[0] <= t - 1.0), None)
                fast = (before is not None
                        and (seen - before[1]) / (t - before[0]) >= 0.8 * self.rate)
                states.append((t, fast or (t > stream_end and seen >= self.messages)))
            slow = [t for t, ok in states if not ok and t <= until]
            if not slow:
                fault.recovered_after = 0.0 if states else None
                continue
            back = next((t for t, ok in states if ok and t > slow[-1]), None)
            fault.recovered_after = None if back is None else round(back - fault.at, 1)
