"""A chaos run's history, and the checker over it (issue 51), in the spirit of Jepsen's.

While a run streams, ``History`` records what the cluster did, from outside it:

- **heartbeats**: every ~0.25 s, the file each worker writes on its own host (each supervisor's
  data directory is on the filesystem the hosts share: ``<base>/<sid>/heartbeats/<port>.json``,
  stormlet/cluster/heartbeat.py), keeping each new beat: its pid, slot, time, the spout
  component's ``emitted`` count and the worker's recent errors (link events and fencing lines
  among them, under ``__links``);
- **ZooKeeper**, through a watcher process on a host that reaches it (``ZooKeeperWatch``): the
  leading nimbus, the topology's assignment, the spout's commits, the registered supervisors
  and, for an ensemble, each member's mode, every change timestamped;
- at every change of the commits it saw, how far each sink's ``seen`` file reached then.

Then it checks and measures:

- ``unprocessed(committed)``: the (partition, offset)s below each partition's final commit whose
  message is in no sink's file. An id is the message's position in the stream (``%09d``), and
  the log holds it at some (partition, offset): the log is read back to map one to the other.
- ``acked_unseen()``: for every commit the watcher saw, the offsets below it that were not yet in
  a sink's file at that moment. A commit says every offset below it was acked, and the sink writes
  the id before acking, so this is "nothing acked was lost", checked when the ack was claimed
  rather than after replays had a chance to cover it up.
- ``detection(fault, since)``: seconds from the fault to the first sign that the cluster noticed
  it, and which sign (``SIGNALS``; ``DETECTED_BY`` says which signs count for which fault).
- ``running_twice()``: the longest stretch a spout task ran in two live workers (different pids)
  at once, both emitting. A worker's tasks are its slot's in the assignment it started under
  (the heartbeat counts per component, not per task); it "emitted" between two of its beats
  when its spout component's ``emitted`` grew from one to the next, so a stretch is measured to
  a heartbeat interval (1 s), from the beats' own times.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster_support import REPO, Cluster
from zookeeper_server import SRVR_SOURCE

from stormlet.sources.partitioned_log import PartitionedLog

SPOUT = "source"               # the chaos topology's spout component
COMPONENTS = ("source", "relay", "sink")
SAMPLE_SECS = 0.25

# The signs of a fault the history can see, by name: see History.signals.
SIGNALS = {
    "fenced": "a worker said it is out of touch with ZooKeeper and stopped its spouts",
    "link lost": "a worker said it lost its link to another worker",
    "reassigned": "nimbus wrote a new assignment for the topology",
    "supervisor lost": "a supervisor's registration left ZooKeeper (its session expired)",
    "new leader": "another nimbus became the leader",
    "zk re-elected": "the ZooKeeper ensemble's leader changed",
}
# Which signs count as the cluster noticing each kind of fault.
DETECTED_BY = {
    "cut_off": ("fenced", "link lost", "supervisor lost", "reassigned"),
    "isolate": ("fenced", "supervisor lost", "reassigned"),
    "link_cut": ("link lost",),
    "slow_link": ("fenced", "link lost", "supervisor lost", "reassigned"),
    "loss": ("fenced", "link lost", "supervisor lost", "reassigned"),
    "host_crash": ("link lost", "supervisor lost", "reassigned"),
    "leader_cut_off": ("new leader",),
    "zk_member_cut_off": ("zk re-elected", "fenced"),
}


# A process on a host that reaches ZooKeeper prints one JSON line each time what it reads
# changes (polled every 0.25 s): {"t", "leader", "assignments": {tid: executors}, "committed":
# {partition: offset}, "supervisors": [...], "modes": {member: mode}} or {"t", "error"}.
_WATCH = r"""
import json, socket, sys, threading, time
from stormlet.cluster.security import Security
from stormlet.cluster.zk_state import (assignments_path, connect, leader_path, offset_path,
                                       offsets_path, spout_offsets_path, supervisors_path)

hosts, secret, topology, spout = sys.argv[1:5]
LEADER, ASSIGNMENTS, SUPERVISORS = leader_path(), assignments_path(), supervisors_path()
OFFSETS = offsets_path()
COMMITS = spout_offsets_path(OFFSETS, spout)
members = hosts.split(",") if "," in hosts else []
modes, lock = {}, threading.Lock()

""" + SRVR_SOURCE + r"""
def poll_modes():
    while True:
        for member in members:
            mode = srvr(member)
            with lock:
                modes[member] = mode
        time.sleep(0.25)

if members:
    threading.Thread(target=poll_modes, daemon=True).start()
client = connect(hosts, timeout=60, session_timeout=6.0, security=Security.load(secret or None))

def read(path):
    data, _stat = client.get_async(path).get(timeout=1.0)
    return json.loads(data)

def children(path):
    return client.get_children_async(path).get(timeout=1.0)

last = None
while True:
    try:
        state = {"leader": None, "assignments": {}, "committed": {}}
        if client.exists_async(LEADER).get(timeout=1.0):
            state["leader"] = read(LEADER)
        for tid in children(ASSIGNMENTS):
            if tid.startswith(topology + "-"):
                state["assignments"][tid] = read(f"{ASSIGNMENTS}/{tid}")["executors"]
        if client.exists_async(COMMITS).get(timeout=1.0):
            for p in children(COMMITS):
                state["committed"][p] = read(offset_path(OFFSETS, spout, int(p)))["offset"]
        state["supervisors"] = sorted(children(SUPERVISORS))
    except Exception as exc:
        state = {"error": type(exc).__name__}
    if members:
        with lock:
            state["modes"] = dict(modes)
    if state != last:
        print(json.dumps({"t": time.time(), **state}), flush=True)
        last = state
    time.sleep(0.25)
"""


class ZooKeeperWatch:
    """The watcher process (``_WATCH``), run with ``prefix`` (``ip netns exec HOST`` for a
    host that reaches ZooKeeper; nothing on loopback); ``on_line`` gets each parsed line."""

    def __init__(self, hosts: str, secret_file: Path | None, topology: str, spout_id: str,
                 prefix: tuple[str, ...], on_line, log_path: Path):
        self.args = [*prefix, sys.executable, "-c", _WATCH, hosts, str(secret_file or ""),
                     topology, spout_id]
        self.on_line = on_line
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> "ZooKeeperWatch":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=log,
                                            text=True, cwd=REPO, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True, name="zk-watch")
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None   # started
        for line in self.process.stdout:
            try:
                self.on_line(json.loads(line))
            except ValueError:
                pass

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)
        if self._reader is not None:
            self._reader.join(timeout=5)


@dataclass(frozen=True)
class Beat:
    t: float              # when the worker wrote it (its "time")
    pid: int
    slot: tuple[str, int]  # (supervisor, port)
    topology_id: str
    emitted: int          # the spout component's
    tasks: tuple          # (component, number of tasks) per component, as the beat counts them
    held: frozenset | None = None   # every task it runs now, as the beat lists them (if it does)


@dataclass(frozen=True)
class Signal:
    t: float              # wall-clock time
    name: str             # a key of SIGNALS
    detail: str


@dataclass
class Detection:
    after: float          # seconds from the fault
    signal: str
    detail: str

    def __str__(self) -> str:
        return f"{self.after:.1f}s ({self.signal})"


@dataclass
class RunningTwice:
    """The longest stretch one spout task ran in two live workers at once, both emitting."""
    task: int | None = None
    seconds: float = 0.0
    workers: tuple = ()      # the two (supervisor, port, pid)
    at: float | None = None  # when it began, wall clock
    total: float = 0.0       # every such stretch of every task, summed

    def __str__(self) -> str:
        if self.task is None:
            return "none"
        return f"{SPOUT}:{self.task} {self.seconds:.1f}s"


@dataclass
class History:
    cluster: Cluster
    seen_dir: Path
    log_path: Path
    topology: str
    beats: dict[int, list[Beat]] = field(default_factory=dict)      # by pid, in time order
    errors: dict[tuple, dict] = field(default_factory=dict)         # (pid, time, text) -> entry
    zk: list[dict] = field(default_factory=list)                    # the watcher's lines
    # (time the watcher saw a change of the commits, the commits, each sink file's size then)
    commits: list[tuple[float, dict[int, int], dict[str, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.watch: ZooKeeperWatch | None = None

    # ----- recording

    def start(self, watch_prefix: tuple[str, ...] | None = None) -> "History":
        """Sample the heartbeats, and watch ZooKeeper with the watcher run with
        ``watch_prefix`` (None: no watcher, and no ZooKeeper history)."""
        if watch_prefix is not None:
            zk = getattr(self.cluster, "zk")
            self.watch = ZooKeeperWatch(zk.hosts, getattr(self.cluster, "secret_file", None),
                                        self.topology, self.topology, watch_prefix,
                                        self._on_zookeeper,
                                        self.cluster.base / "zk-watch.log").start()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="history")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.watch is not None:
            self.watch.stop()

    def _on_zookeeper(self, line: dict) -> None:
        with self._lock:
            previous = next((z for z in reversed(self.zk) if "error" not in z), None)
            self.zk.append(line)
        if "error" in line:
            return
        committed = {int(p): o for p, o in line.get("committed", {}).items()}
        if previous is None or committed != {int(p): o for p, o in
                                             previous.get("committed", {}).items()}:
            sizes = {}
            for path in self.seen_dir.glob("seen-*.log"):
                try:
                    sizes[path.name] = path.stat().st_size
                except OSError:
                    pass
            self.commits.append((time.time(), committed, sizes))

    def latest_committed(self) -> dict[int, int] | None:
        """The newest commits the watcher saw (None: it saw none yet). Commits only move
        forward, so an old answer is never ahead of the truth."""
        return self.commits[-1][1] if self.commits else None

    def _sample(self) -> None:
        last_time: dict[tuple[str, int], float] = {}
        while not self._done.is_set():
            for sid in list(self.cluster.supervisors):
                for path in (self.cluster.base / sid / "heartbeats").glob("*.json"):
                    try:
                        beat = json.loads(path.read_text())
                        slot = (sid, int(path.stem))
                        t, pid = float(beat["time"]), int(beat["pid"])
                        tid = str(beat["topology_id"])
                    except (OSError, ValueError, KeyError, TypeError):
                        continue
                    if last_time.get(slot) == t or not tid.startswith(self.topology + "-"):
                        continue
                    last_time[slot] = t
                    metrics = beat.get("metrics") or {}
                    tasks = tuple(sorted((c, metrics.get(c, {}).get("tasks", 0))
                                         for c in COMPONENTS if c in metrics))
                    with self._lock:
                        held = beat.get("tasks")
                        self.beats.setdefault(pid, []).append(Beat(
                            t, pid, slot, tid, metrics.get(SPOUT, {}).get("emitted", 0), tasks,
                            frozenset(held) if isinstance(held, list) and held else None))
                        for error in beat.get("errors") or []:
                            key = (pid, error.get("time"), error.get("error"))
                            self.errors.setdefault(key, {**error, "slot": slot, "pid": pid})
            self._done.wait(SAMPLE_SECS)

    # ----- the checks

    def _log_values(self) -> dict[int, list[str]]:
        """Every message of the log, by partition, in offset order (offsets start at 0 and
        are dense: the harness's log is never compacted)."""
        values: dict[int, list[str]] = {}
        with PartitionedLog(self.log_path) as log:
            for p in range(log.partitions):
                out = values[p] = []
                while records := log.read(p, len(out), max_records=5000):
                    for record in records:
                        assert record.offset == len(out), (p, record.offset, len(out))
                        value = record.value
                        out.append(value.decode() if isinstance(value, bytes) else value)
        return values

    def _seen(self, sizes: dict[str, int] | None = None) -> set[str]:
        """The ids in the sinks' files (only their first ``sizes`` bytes, if given)."""
        seen: set[str] = set()
        for path in self.seen_dir.glob("seen-*.log"):
            data = path.read_bytes()
            if sizes is not None:
                data = data[:sizes.get(path.name, 0)]
            seen.update(data.decode().split())
        return seen

    def unprocessed(self, committed: dict[int, int]) -> list[tuple[int, int]]:
        """(partition, offset) below the partition's commit in ``committed`` whose message is
        in no sink's file: must be none."""
        values, seen = self._log_values(), self._seen()
        return [(p, o) for p, end in sorted(committed.items())
                for o in range(end) if values[p][o] not in seen]

    def acked_unseen(self) -> list[tuple[float, int, int]]:
        """(when, partition, offset) for each offset below a commit the watcher saw that was in
        no sink's file at that moment: must be none."""
        values = self._log_values()
        missing = []
        checked: dict[int, int] = {}
        for t, committed, sizes in self.commits:
            seen = None
            for p, end in committed.items():
                if end <= checked.get(p, 0):
                    continue
                seen = seen if seen is not None else self._seen(sizes)
                missing += [(t, p, o) for o in range(checked.get(p, 0), end)
                            if values[p][o] not in seen]
                checked[p] = end
        return missing

    def commits_moved_back(self) -> list[tuple[float, int, int, int]]:
        """(when, partition, from, to) for every commit seen to move backwards."""
        back: list[tuple[float, int, int, int]] = []
        best: dict[int, int] = {}
        for t, committed, _sizes in self.commits:
            for p, o in committed.items():
                if o < best.get(p, 0):
                    back.append((t, p, best[p], o))
                best[p] = max(best.get(p, 0), o)
        return back

    def signals(self) -> list[Signal]:
        """Every sign of a fault in the history, in time order."""
        found = []
        for error in self.errors.values():
            text = error.get("error", "")
            where = f"{error['slot'][0]}:{error['slot'][1]}"
            if "out of touch with ZooKeeper" in text:
                found.append(Signal(error["time"], "fenced", f"worker {where}"))
            elif "lost its link" in text:
                found.append(Signal(error["time"], "link lost", text.split(" (")[0]))
        previous, zk_leader, nimbus = None, None, None
        for line in self.zk:
            # The ensemble's leader (srvr's Mode), kept through the polls that find none.
            leaders = [m for m, mode in line.get("modes", {}).items() if mode == "leader"]
            if leaders and leaders[0] != zk_leader:
                if zk_leader is not None:
                    found.append(Signal(line["t"], "zk re-elected", f"leader now {leaders[0]}"))
                zk_leader = leaders[0]
            if "error" in line:
                continue
            # The leading nimbus, kept through the polls that find none (an expired leader's
            # record is gone before the next one writes its own).
            leader = line.get("leader") or {}
            if leader.get("id") and leader["id"] != nimbus:
                if nimbus is not None:
                    found.append(Signal(line["t"], "new leader", f"{leader.get('host')}"))
                nimbus = leader["id"]
            if previous is not None:
                t = line["t"]
                for tid, executors in line["assignments"].items():
                    before = previous["assignments"].get(tid)
                    if before is not None and before != executors:
                        found.append(Signal(t, "reassigned", _placement(executors)))
                for sid in set(previous.get("supervisors", [])) - set(line.get("supervisors", [])):
                    found.append(Signal(t, "supervisor lost", sid))
            previous = line
        return sorted(found, key=lambda s: s.t)

    def detection(self, kind: str, since: float, until: float | None = None,
                  signs: tuple[str, ...] | None = None) -> Detection | None:
        """The first sign (of ``signs``, by default ``DETECTED_BY[kind]``) at or after
        ``since`` (wall clock, the fault's injection) and before ``until``."""
        signs = signs or DETECTED_BY.get(kind, tuple(SIGNALS))
        for s in self.signals():
            if s.name in signs and s.t >= since and (until is None or s.t <= until):
                return Detection(round(s.t - since, 1), s.name, s.detail)
        return None

    def tasks_of(self, pid: int) -> set[int]:
        """The spout tasks worker ``pid`` runs: its slot's in the assignment it started under
        (the newest version seen by its first beat whose per-component task counts match the
        beat's, or the first such version after it, for a watcher that was behind)."""
        beats = self.beats.get(pid) or []
        if not beats:
            return set()
        first = beats[0]
        versions = [(z["t"], z["assignments"][first.topology_id]) for z in self.zk
                    if "error" not in z and first.topology_id in z.get("assignments", {})]
        before = [v for v in versions if v[0] <= first.t]
        candidates = before[-1:] + [v for v in versions if v[0] > first.t]
        for _t, executors in candidates:
            mine = [e for e in executors if (e[2], e[4]) == first.slot]
            counts: dict[str, int] = {}
            for component, tasks, *_ in mine:
                counts[component] = counts.get(component, 0) + len(tasks)
            if mine and tuple(sorted((c, counts.get(c, 0)) for c, _n in first.tasks)) == \
                    first.tasks:
                return {t for component, tasks, *_ in mine if component == SPOUT for t in tasks}
        return set()

    def spout_tasks_listed(self, pid: int) -> set[int]:
        """The spout tasks worker ``pid``'s beats ever listed (one that took tasks on while it
        ran lists them from then on): the tasks listed that the assignments give the spout."""
        listed = set().union(*(b.held for b in self.beats.get(pid, []) if b.held))
        spout = {t for z in self.zk if "error" not in z
                 for executors in z.get("assignments", {}).values()
                 for component, tasks, *_ in executors if component == SPOUT for t in tasks}
        return listed & spout

    def emitting(self, pid: int, task: int | None = None) -> list[tuple[float, float]]:
        """The stretches (wall clock) in which worker ``pid``'s spouts emitted: between two
        consecutive beats whose count grew, merged; with ``task``, only while both beats list
        it among the worker's tasks (tasks move between running workers)."""
        spans: list[tuple[float, float]] = []
        beats = self.beats.get(pid, [])
        for a, b in zip(beats, beats[1:]):
            holds = task is None or all(x.held is None or task in x.held for x in (a, b))
            if b.emitted > a.emitted and holds:
                if spans and spans[-1][1] >= a.t:
                    spans[-1] = (spans[-1][0], b.t)
                else:
                    spans.append((a.t, b.t))
        return spans

    def running_twice(self) -> RunningTwice:
        holders: dict[int, list[int]] = {}
        for pid in self.beats:
            for task in self.tasks_of(pid) | self.spout_tasks_listed(pid):
                holders.setdefault(task, []).append(pid)
        result = RunningTwice()
        for task, pids in sorted(holders.items()):
            for i, a in enumerate(pids):
                for b in pids[i + 1:]:
                    for start, end in _overlaps(self.emitting(a, task),
                                                self.emitting(b, task)):
                        result.total += end - start
                        if end - start > result.seconds:
                            result.task, result.seconds, result.at = task, end - start, start
                            result.workers = tuple((*self.beats[p][0].slot, p) for p in (a, b))
        result.seconds = round(result.seconds, 1)
        result.total = round(result.total, 1)
        return result

    def workers_seen(self) -> list[tuple[str, int, int]]:
        """Every worker of the topology seen, (supervisor, port, pid), in order of start."""
        return [(*beats[0].slot, pid) for pid, beats in
                sorted(self.beats.items(), key=lambda kv: kv[1][0].t)]

    def lines(self, since: float) -> list[str]:
        """The history in brief, times in seconds from ``since`` (wall clock): each worker,
        its spout tasks, its beats and when it emitted (and how much); then every sign of a
        fault."""
        def rel(t: float) -> str:
            return f"{t - since:+.1f}"

        out = []
        for sid, port, pid in self.workers_seen():
            beats = self.beats[pid]
            emitted = {beat.t: beat.emitted for beat in beats}
            spans = " ".join(f"{rel(a)}..{rel(b)} ({emitted[b] - emitted[a]:+d})"
                             for a, b in self.emitting(pid)) or "never"
            out.append(f"  worker {sid}:{port} pid {pid}: {SPOUT} tasks "
                       f"{sorted(self.tasks_of(pid)) or '-'}, beats {rel(beats[0].t)}.."
                       f"{rel(beats[-1].t)}s, emitted {beats[-1].emitted}, emitting {spans}")
        for s in self.signals():
            out.append(f"  {rel(s.t)}s {s.name}: {s.detail}")
        return out


def _overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]):
    for s1, e1 in a:
        for s2, e2 in b:
            start, end = max(s1, s2), min(e1, e2)
            if end > start:
                yield start, end


def _placement(executors: list) -> str:
    """An assignment in a few words: which slots hold the spout's tasks."""
    spouts = sorted(f"{e[1]}@{e[2]}:{e[4]}" for e in executors if e[0] == SPOUT)
    slots = sorted({f"{e[2]}:{e[4]}" for e in executors})
    return f"{len(slots)} workers ({', '.join(slots)}); {SPOUT} {' '.join(spouts)}"


# ----- the state's writes (a stateful run, its state on a Redis server)

# A line of a MONITOR session: "<time> [<db> <client address:port, or lua>] "CMD" "arg" ...".
_MONITOR_LINE = re.compile(r'^(\d+\.\d+) \[\d+ ([^\]]+)\] (.*)$')
_MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", '"': b'"', "\\": b"\\"}


def _monitor_arg(text: str) -> bytes:
    """One argument as MONITOR quotes it (Redis's sdscatrepr), back to its bytes."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] == "x":
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
            out += _UNESCAPE.get(text[i + 1], text[i + 1].encode())
            i += 2
            continue
        out += text[i].encode()
        i += 1
    return bytes(out)


def state_scripts() -> dict[str, str]:
    """The Redis state store's scripts by their SHA1 (as EVALSHA names them): claim, prepare,
    commit and rollback."""
    from stormlet.state import redis_store as rs
    return {hashlib.sha1(text.encode()).hexdigest(): kind
            for kind, text in (("claim", rs._CLAIM), ("prepare", rs._PREPARE),
                               ("commit", rs._COMMIT), ("rollback", rs._ROLLBACK))}


@dataclass
class StateCall:
    """One call of a state store's script, as the server ran it."""
    t: float                 # the server's clock (the hosts share this machine's)
    host: str                # the caller's host (name, else its address)
    kind: str                # claim, prepare, commit or rollback
    namespace: str           # <topology>/<component>[/<task>]
    owner: str               # the caller's claim: its topology instance...
    epoch: int               # ...and the assignment version at which its worker took the task
    txid: int | None         # prepare, commit: the checkpoint
    lua: list[tuple[bytes, ...]] = field(default_factory=list)   # what the script ran

    @property
    def writer(self) -> tuple[str, str, int]:
        return self.host, self.owner, self.epoch

    @property
    def landed(self) -> bool:
        """Whether the script wrote anything (a claim taken, a checkpoint staged, committed or
        dropped): seen in what it ran, whatever the script's checks were."""
        return any(c[0].upper() in (b"HSET", b"HDEL", b"DEL") for c in self.lua)

    def who(self) -> str:
        return f"{self.host} ({self.owner}, epoch {self.epoch})"


@dataclass
class StateCheck:
    """What the state's writes say: who held each namespace when, and the writes that landed
    while another held it (``foreign``); a commit among them is a checkpoint committed by two
    copies of a task."""
    calls: list[StateCall]
    handovers: list[tuple[StateCall, tuple | None]]   # a claim that changed the holder; the old
    foreign: list[tuple[StateCall, tuple]]            # a landed write; the holder it was not
    refused: list[tuple[StateCall, tuple]]            # a write after a handover, not landed

    @property
    def double_commits(self) -> list[StateCall]:
        return [call for call, _holder in self.foreign if call.kind == "commit"]

    def lines(self, since: float) -> list[str]:
        def rel(t: float) -> str:
            return f"{t - since:+.1f}s"

        counted: dict[tuple, int] = {}
        for call in self.calls:
            if call.kind in ("prepare", "commit") and call.landed:
                counted[call.writer] = counted.get(call.writer, 0) + (call.kind == "commit")
        out = [f"  state writes (Redis MONITOR): {len(self.calls)} script calls, "
               f"{sum(counted.values())} commits landed; handovers {len(self.handovers)}; "
               f"writes landed while another held the namespace {len(self.foreign)} "
               f"(commits: {len(self.double_commits)}); refused after a handover "
               f"{len(self.refused)}"]
        for claim, old in self.handovers:
            if old is not None:
                out.append(f"  {rel(claim.t)} {claim.namespace} claimed by {claim.who()} from "
                           f"{old[0]} ({old[1]}, epoch {old[2]})")
        for call, holder in self.foreign[:10]:
            out.append(f"  {rel(call.t)} LANDED {call.kind} {call.txid} of {call.namespace} by "
                       f"{call.who()} while {holder[0]} (epoch {holder[2]}) held it")
        by_writer: dict[tuple, list[StateCall]] = {}
        for call, _holder in self.refused:
            by_writer.setdefault((call.writer, call.namespace), []).append(call)
        for ((host, owner, epoch), namespace), calls in sorted(by_writer.items()):
            kinds = " ".join(f"{k} {sum(c.kind == k for c in calls)}"
                             for k in ("prepare", "commit", "rollback")
                             if any(c.kind == k for c in calls))
            out.append(f"  refused: {host} ({owner}, epoch {epoch}) on {namespace}: {kinds} "
                       f"({rel(calls[0].t)}..{rel(calls[-1].t)})")
        return out


class StateWrites:
    """Every call of the state store's scripts on ``redis`` (a tests/multi_host.py
    ``HostRedis``), recorded by a MONITOR session into ``path``; ``hosts`` names the callers'
    addresses."""

    def __init__(self, redis, path: Path, hosts: dict[str, str]):
        self.redis = redis
        self.path = path
        self.hosts = hosts
        self.process: subprocess.Popen | None = None

    def start(self) -> "StateWrites":
        self.process = self.redis.monitor(self.path)
        deadline = time.monotonic() + 10
        while not (self.path.exists() and self.path.read_bytes().startswith(b"OK")):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"MONITOR did not start: {self.path.read_bytes()[:500]!r}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def calls(self) -> list[StateCall]:
        """The scripts' calls in the order the server ran them; the commands a script ran
        follow its call in a MONITOR session."""
        scripts = state_scripts()
        calls: list[StateCall] = []
        current: StateCall | None = None
        for line in self.path.read_text(errors="replace").splitlines():
            match = _MONITOR_LINE.match(line)
            if match is None:
                continue
            t, client, rest = float(match.group(1)), match.group(2), match.group(3)
            args = [_monitor_arg(a) for a in _MONITOR_ARG.findall(rest)]
            if client == "lua":
                if current is not None:
                    current.lua.append(tuple(args))
                continue
            current = None
            if len(args) < 6 or args[0].upper() != b"EVALSHA":
                continue
            kind = scripts.get(args[1].decode(errors="replace"))
            if kind is None:
                continue
            keys = int(args[2])
            rest_args = args[3 + keys:]
            committed = args[3].decode(errors="replace")
            address = client.rsplit(":", 1)[0]
            current = StateCall(
                t, self.hosts.get(address, address), kind,
                committed.removeprefix("stormlet:"), rest_args[0].decode(errors="replace"),
                int(rest_args[1]),
                int(rest_args[2]) if kind in ("prepare", "commit") else None)
            calls.append(current)
        return calls

    def check(self) -> StateCheck:
        calls = self.calls()
        holder: dict[str, tuple] = {}
        handed: set[str] = set()
        handovers, foreign, refused = [], [], []
        for call in calls:
            if call.kind == "claim":
                if call.landed and holder.get(call.namespace) != call.writer:
                    handovers.append((call, holder.get(call.namespace)))
                    if call.namespace in holder:
                        handed.add(call.namespace)
                    holder[call.namespace] = call.writer
                continue
            held = holder.get(call.namespace)
            if held is None or call.writer == held:
                continue
            if call.landed:
                foreign.append((call, held))
            elif call.namespace in handed:
                refused.append((call, held))
        return StateCheck(calls, handovers, foreign, refused)
