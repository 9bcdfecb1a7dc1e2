"""The multi-host checker (tests/history.py) on histories made by hand: it must find what it is
there to find (a message lost below a commit, an ack claimed before the sink had the message, a
spout task running in two workers, the first sign of a fault), and nothing else."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from cluster_support import Cluster
from history import Beat, History

from stormlet.sources.partitioned_log import PartitionedLog

TID = "chaos-1-abc"
T0 = 1_000_000.0


def history(tmp_path, messages: int = 8) -> History:
    with PartitionedLog.create(tmp_path / "log", 2) as log:
        log.append_many([f"{i:09d}" for i in range(messages)], partition=0)
    (tmp_path / "seen").mkdir()
    # Of a cluster, the history reads these two only (here: no supervisor to read).
    cluster = cast(Cluster, SimpleNamespace(base=tmp_path, supervisors={}))
    return History(cluster, tmp_path / "seen", tmp_path / "log", "chaos")


def sink(h: History, *ids: int) -> dict[str, int]:
    """Append ids to a sink's file; returns every sink file's size now."""
    path = h.seen_dir / "seen-5.log"
    with open(path, "a") as f:
        f.write("".join(f"{i:09d}\n" for i in ids))
    return {p.name: p.stat().st_size for p in h.seen_dir.glob("seen-*.log")}


def test_every_offset_below_the_commit_must_be_in_a_sink(tmp_path):
    h = history(tmp_path)
    sink(h, 0, 1, 2, 4, 5)
    assert h.unprocessed({0: 3, 1: 0}) == []
    assert h.unprocessed({0: 6, 1: 0}) == [(0, 3)]


def test_a_commit_made_before_the_sink_had_the_message_is_found_though_a_replay_filled_it(
        tmp_path):
    h = history(tmp_path)
    h.commits.append((T0, {0: 2}, sink(h, 0, 1)))
    h.commits.append((T0 + 1, {0: 4}, sink(h, 2)))       # offset 3 claimed, not in a sink
    sink(h, 3)                                            # a replay writes it later
    assert h.unprocessed({0: 4}) == []
    assert h.acked_unseen() == [(T0 + 1, 0, 3)]
    assert h.commits_moved_back() == []


def beats(pid: int, slot: tuple[str, int], emitted: list[int], start: float) -> list[Beat]:
    tasks = (("relay", 1), ("sink", 1), ("source", 1))
    return [Beat(start + i, pid, slot, TID, n, tasks) for i, n in enumerate(emitted)]


def executors(spout_slot: tuple[str, int]) -> list:
    return [["source", [7], *spout_slot[:1], "10.0.0.1", spout_slot[1]],
            ["relay", [3], *spout_slot[:1], "10.0.0.1", spout_slot[1]],
            ["sink", [5], *spout_slot[:1], "10.0.0.1", spout_slot[1]],
            ["source", [8], "s2", "10.0.0.2", 6700], ["relay", [4], "s2", "10.0.0.2", 6700],
            ["sink", [6], "s2", "10.0.0.2", 6700]]


def test_a_spout_task_running_in_two_workers_is_measured_from_their_beats(tmp_path):
    h = history(tmp_path)
    # Task 7 on s1:6700 until nimbus moves it to s2:6701 at +4.5; the old worker's count
    # grows until its beat at +8, the new one's from its beat at +6 (not between +5 and +6:
    # it had not emitted yet): both emitted from +6 to +8.
    h.zk = [{"t": T0 - 1, "assignments": {TID: executors(("s1", 6700))}},
            {"t": T0 + 4.5, "assignments": {TID: executors(("s2", 6701))}}]
    h.beats[100] = beats(100, ("s1", 6700), [0, 10, 20, 30, 40, 50, 60, 70, 80, 80, 80], T0)
    h.beats[200] = beats(200, ("s2", 6701), [0, 0, 10, 20, 30], T0 + 5)
    h.beats[300] = beats(300, ("s2", 6700), list(range(0, 100, 10)), T0)
    assert h.tasks_of(100) == {7} and h.tasks_of(200) == {7} and h.tasks_of(300) == {8}
    twice = h.running_twice()
    assert (twice.task, twice.seconds, twice.at) == (7, 2.0, T0 + 6)
    assert {w[2] for w in twice.workers} == {100, 200}
    assert "reassigned" in [s.name for s in h.signals()]


def test_no_task_runs_twice_when_the_old_worker_stopped_emitting_first(tmp_path):
    h = history(tmp_path)
    h.zk = [{"t": T0 - 1, "assignments": {TID: executors(("s1", 6700))}},
            {"t": T0 + 4.5, "assignments": {TID: executors(("s2", 6701))}}]
    h.beats[100] = beats(100, ("s1", 6700), [0, 10, 20, 30, 30, 30, 30, 30], T0)  # fenced at +3
    h.beats[200] = beats(200, ("s2", 6701), [0, 10, 20, 30], T0 + 5)
    assert h.running_twice().task is None


def test_detection_is_the_first_sign_of_the_fault_kind_after_it(tmp_path):
    h = history(tmp_path)
    h.errors = {
        (1, T0 - 5, "a"): {"time": T0 - 5, "error": "worker a lost its link to worker b (x)",
                           "slot": ("s1", 6700)},
        (1, T0 + 6, "b"): {"time": T0 + 6, "error": "worker a has been out of touch with "
                                                    "ZooKeeper for 2 s", "slot": ("s1", 6700)},
        (2, T0 + 4, "c"): {"time": T0 + 4, "error": "worker c lost its link to worker a (x)",
                           "slot": ("s2", 6700)}}
    h.zk = [{"t": T0 - 1, "leader": {"id": "n0", "host": "h0"}, "assignments": {},
             "supervisors": ["s1", "s2"], "modes": {"z1": "leader", "z2": "follower"}},
            {"t": T0 + 2, "leader": None, "assignments": {}, "supervisors": ["s2"],
             "modes": {"z1": "", "z2": ""}},
            {"t": T0 + 3, "error": "ConnectionLoss", "modes": {"z1": "", "z2": "leader"}},
            {"t": T0 + 7, "leader": {"id": "n1", "host": "h1"}, "assignments": {},
             "supervisors": ["s2"], "modes": {"z1": "", "z2": "leader"}}]
    assert (h.detection("isolate", T0).signal, h.detection("isolate", T0).after) == \
        ("supervisor lost", 2.0)
    assert h.detection("link_cut", T0).after == 4.0          # not the one before the fault
    assert h.detection("leader_cut_off", T0).after == 7.0    # through a poll with no leader
    assert h.detection("zk_member_cut_off", T0).after == 3.0
    assert h.detection("link_cut", T0, until=T0 + 3) is None
