"""Which CPU a supervisor pins a worker to, and a worker pinning itself (in a process of its own:
pinning the test runner would slow every test after it). A real supervisor's workers are checked
in test_cluster.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stormlet.cluster.cpu_pinning import (CPU_OPTION, choose_cpu, pinned_cpu, pins_by_default,
                                          usable_cpus)


def test_a_new_worker_takes_the_least_used_cpu_lowest_first():
    assert choose_cpu([0, 1, 2, 3], []) == 0
    assert choose_cpu([0, 1, 2, 3], [0]) == 1
    assert choose_cpu([0, 1, 2, 3], [0, 1, 2, 3, 0, 2]) == 1
    # Workers pinned to CPUs this supervisor may not use do not count against its own.
    assert choose_cpu([2, 3], [0, 0, 1, 3]) == 2


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
               CPU_OPTION.encode(), b"3", b""]
    assert pinned_cpu(command) == 3
    assert pinned_cpu([b"python", b"-m", b"stormlet", b"worker", b"--port", b"6700"]) is None
    assert pinned_cpu([b"python", CPU_OPTION.encode(), b"x"]) is None
    assert pinned_cpu([b"python", CPU_OPTION.encode()]) is None


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
