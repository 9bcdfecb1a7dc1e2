"""Which CPU a supervisor pins a worker to, and a worker pinning itself (in a process of its own:
pinning the test runner would slow every test after it). A real supervisor's workers are checked
in test_cluster.py."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time

from stormlet.cluster.cpu_pinning import (
    CpuPinning,
    choose_cpu,
    pinned_cpu,
    pins_by_default,
    usable_cpus,
    worker_args,
)
from stormlet.cluster.worker_command import WORKER_MODULE_ARGS


def test_a_new_worker_takes_the_least_used_cpu_lowest_first():
    assert choose_cpu([0, 1, 2, 3], []) == 0
    assert choose_cpu([0, 1, 2, 3], [0]) == 1
    assert choose_cpu([0, 1, 2, 3], [0, 1, 2, 3, 0, 2]) == 1
    # Workers pinned to CPUs this supervisor may not use do not count against its own.
    assert choose_cpu([2, 3], [0, 0, 1, 3]) == 2


def test_without_sharing_no_cpu_is_chosen_once_every_one_is_taken():
    assert choose_cpu([0, 1], [0], share=False) == 1
    assert choose_cpu([0, 1], [1, 0], share=False) is None


def test_workers_launched_one_after_another_spread_evenly():
    taken: list[int] = []
    for _ in range(7):
        taken.append(choose_cpu([0, 1, 2], taken))
    assert sorted(taken) == [0, 0, 0, 1, 1, 2, 2]


def test_pinning_is_the_default_only_with_a_core_for_every_slot():
    assert pins_by_default(2, [0, 1])
    assert pins_by_default(1, [0, 1, 2, 3])
    assert not pins_by_default(3, [0, 1])
    assert not pins_by_default(0, [0, 1])


def test_the_cpu_is_read_back_from_a_worker_command_line():
    command = [b"python", b"-m", b"stormlet", b"worker", b"--port", b"6700",
               *[arg.encode() for arg in worker_args(3)], b""]
    assert pinned_cpu(command) == 3
    assert pinned_cpu([b"python", b"-m", b"stormlet", b"worker", b"--port", b"6700"]) is None
    option = worker_args(0)[0].encode()
    assert pinned_cpu([b"python", option, b"x"]) is None
    assert pinned_cpu([b"python", option]) is None


def fake_proc(tmp_path, commands: dict[int, list[str]]):
    """A /proc with these processes' command lines (added to any already there), and an entry
    that is not a process."""
    for pid, command in commands.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in command)
                                                      + b"\0")
    (tmp_path / "self").mkdir(exist_ok=True)
    return tmp_path


def worker(cpu: int | None) -> list[str]:
    return ["python", *WORKER_MODULE_ARGS, "--port", "6700",
            *(worker_args(cpu) if cpu is not None else [])]


def test_a_supervisor_reads_where_every_running_worker_is_pinned(tmp_path):
    proc = fake_proc(tmp_path, {10: worker(1), 11: worker(None), 12: worker(1),
                                13: ["python", "other.py", *worker_args(0)]})
    pinning = CpuPinning(2, None, cpus=[0, 1], proc=proc)
    assert pinning.running_workers() == {10: 1, 11: None, 12: 1}
    assert sorted(pinning.pinned_cpus()) == [1, 1]


class FakeProcess:
    def __init__(self, pid: int):
        self.pid = pid

    def poll(self) -> None:
        return None


BASE = ["python", *WORKER_MODULE_ARGS, "--port", "6700"]
PIDS = itertools.count(1000)


def next_args(pinning: CpuPinning) -> list[str]:
    """The pinning arguments ``pinning`` starts its next worker with; the worker shows in its
    /proc at once, if that exists."""
    started = []

    def popen(argv: list[str]) -> FakeProcess:
        started.append(argv)
        pid = next(PIDS)
        if pinning.proc.is_dir():
            fake_proc(pinning.proc, {pid: argv})
        return FakeProcess(pid)

    pinning.start(BASE, popen)
    assert started[0][:len(BASE)] == BASE
    return started[0][len(BASE):]


def test_the_lock_is_held_until_the_new_worker_shows_in_proc(tmp_path):
    # A process's cmdline can read empty just after it starts: the next supervisor's scan must
    # not run until it shows, or it would give the same CPU away again.
    proc = fake_proc(tmp_path, {})
    pinning = CpuPinning(2, None, cpus=[0, 1], proc=proc)

    def popen(argv: list[str]) -> FakeProcess:
        (proc / "77").mkdir()
        (proc / "77" / "cmdline").write_bytes(b"")
        shown = b"\0".join(a.encode() for a in argv)
        threading.Timer(0.2, (proc / "77" / "cmdline").write_bytes, [shown]).start()
        return FakeProcess(77)

    started = time.monotonic()
    pinning.start(BASE, popen)
    assert time.monotonic() - started >= 0.2
    assert pinning.pinned_cpus() == [0]
    assert next_args(pinning) == worker_args(1)


def test_by_default_a_worker_is_pinned_only_to_a_cpu_no_worker_has(tmp_path):
    proc = fake_proc(tmp_path, {10: worker(0)})
    assert next_args(CpuPinning(2, None, cpus=[0, 1], proc=proc)) == worker_args(1)
    fake_proc(proc, {11: worker(1)})
    assert next_args(CpuPinning(2, None, cpus=[0, 1], proc=proc)) == []
    # Asked to pin always, it shares the CPUs in turn.
    assert next_args(CpuPinning(2, True, cpus=[0, 1], proc=proc)) == worker_args(0)


def test_a_supervisor_pins_by_default_with_a_cpu_for_every_slot_or_when_told(tmp_path):
    assert CpuPinning(2, None, cpus=[0, 1], proc=tmp_path).enabled
    assert not CpuPinning(3, None, cpus=[0, 1], proc=tmp_path).enabled
    assert CpuPinning(3, True, cpus=[0, 1], proc=tmp_path).enabled
    never = CpuPinning(2, False, cpus=[0, 1], proc=tmp_path)
    assert not never.enabled and next_args(never) == []


def test_without_cpu_affinity_or_proc_workers_run_unpinned(tmp_path, caplog):
    no_affinity = CpuPinning(2, True, cpus=[], proc=tmp_path)
    no_proc = CpuPinning(2, True, cpus=[0, 1], proc=tmp_path / "missing")
    assert not no_affinity.enabled and not no_proc.enabled
    assert next_args(no_affinity) == [] and next_args(no_proc) == []
    assert "they run unpinned" in caplog.text


PIN_AND_REPORT = """
import json, os, sys, threading
from stormlet.cluster.cpu_pinning import pin_this_process
pinned = pin_this_process(int(sys.argv[1]))
seen = {}
thread = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
thread.start(); thread.join()
print(json.dumps({"pinned": pinned, "main": sorted(os.sched_getaffinity(0)), **seen}))
"""


def run_pinned(cpu: int) -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", PIN_AND_REPORT, str(cpu)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout), out.stderr


def test_a_pinned_process_and_the_threads_it_starts_run_on_that_cpu_alone():
    cpu = usable_cpus()[-1]
    report, _ = run_pinned(cpu)
    assert report == {"pinned": True, "main": [cpu], "thread": [cpu]}


def test_a_cpu_the_process_may_not_use_is_reported_and_it_runs_unpinned():
    report, stderr = run_pinned(max(usable_cpus()) + 4096)
    assert report["pinned"] is False
    assert report["main"] == sorted(os.sched_getaffinity(0)) == report["thread"]
    assert "running unpinned" in stderr


def test_where_the_system_cannot_pin_there_are_no_cpus_to_pin_to(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    assert usable_cpus() == []
    assert not pins_by_default(2, usable_cpus())
