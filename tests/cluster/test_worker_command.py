"""How a supervisor knows a worker's process by its command line, and reads its options back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import wait_until
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster.cpu_pinning import CPU_OPTION, pinned_cpu
from stormlet.cluster.heartbeat import heartbeat_path, read_heartbeat
from stormlet.cluster.supervisor import Supervisor
from stormlet.cluster.worker_command import (
    LEGACY_WORKER_MODULE,
    PORT_OPTION,
    WORKER_MODULE_ARGS,
    command_line,
    is_worker,
    option_value,
)


def args(*parts: str) -> list[bytes]:
    return [part.encode() for part in parts]


def test_a_worker_is_known_by_its_module_arguments_or_the_legacy_module():
    assert is_worker(args("python", *WORKER_MODULE_ARGS, PORT_OPTION, "6700"))
    assert is_worker([b"python", b"-m", LEGACY_WORKER_MODULE, b"--port", b"6700"])
    assert not is_worker(args("python", "-m", "stormlet", "supervisor", PORT_OPTION, "6700"))
    assert not is_worker(args("python", "worker.py", "-m", "stormlet", "worker"))
    assert not is_worker([b""])   # a process whose cmdline reads empty (it has just started)


def test_an_option_is_read_by_name_not_found_anywhere_in_the_command():
    # A worker whose --cpu value equals a port must not pass for the worker on that port (the
    # supervisor once looked for the port anywhere in the command line).
    command = args("python", *WORKER_MODULE_ARGS, PORT_OPTION, "6701", CPU_OPTION, "6700")
    assert option_value(command, PORT_OPTION) == b"6701"
    assert option_value(command, CPU_OPTION) == b"6700"
    assert pinned_cpu(command) == 6700
    assert option_value(args("python", *WORKER_MODULE_ARGS, PORT_OPTION), PORT_OPTION) is None
    assert option_value(args("python", *WORKER_MODULE_ARGS), PORT_OPTION) is None


def test_the_command_line_of_a_running_process_is_read_from_proc():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                                PORT_OPTION, "6700"])
    try:
        # Just after the fork, the cmdline reads empty or still as this process's.
        wait_until(lambda: option_value(command_line(process.pid), PORT_OPTION) is not None, 5,
                   "the child's command line", interval=0.01)
        command = command_line(process.pid)
        assert command[0] == sys.executable.encode()
        assert option_value(command, PORT_OPTION) == b"6700"
    finally:
        process.kill()
        process.wait()
    assert command_line(os.getpid())[0]


# A process that looks like a worker to a supervisor (by the legacy module name, as a worker from
# before ``stormlet worker`` would): it writes its heartbeat for one slot, then waits.
FAKE_WORKER = """
import sys, time
from pathlib import Path
from stormlet.cluster.heartbeat import heartbeat_path, write_heartbeat
data_dir, slot = Path(sys.argv[1]), int(sys.argv[2])
path = heartbeat_path(data_dir, slot)
path.parent.mkdir(parents=True, exist_ok=True)
write_heartbeat(path, topology_id="gone", port=slot, started=time.time(), metrics={}, errors=[])
time.sleep(120)
"""


def fake_worker(data_dir: Path, heartbeat_slot: int, *worker_args: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", FAKE_WORKER, str(data_dir),
                                str(heartbeat_slot), LEGACY_WORKER_MODULE.decode(), *worker_args])
    path = heartbeat_path(data_dir, heartbeat_slot)
    wait_until(lambda: getattr(read_heartbeat(path), "pid", None) == process.pid,
               15, "the fake worker's heartbeat")
    return process


@pytest.mark.zookeeper
@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")
def test_a_starting_supervisor_stops_the_worker_left_on_its_port_and_only_that(tmp_path):
    orphan_port, other_port = free_port(), free_port()
    data_dir = tmp_path / "supervisor"
    # Left by a previous run on one of the slots: stopped.
    orphan = fake_worker(data_dir, orphan_port, PORT_OPTION, str(orphan_port))
    # The other slot's stale heartbeat names a process that is some other worker, whose --cpu
    # value happens to equal that slot's port: not ours to stop.
    bystander = fake_worker(data_dir, other_port, PORT_OPTION, str(free_port()),
                            CPU_OPTION, str(other_port))
    try:
        with ZooKeeperServer(tmp_path / "zk") as zk:
            supervisor = Supervisor(zk.hosts, [orphan_port, other_port], data_dir=data_dir,
                                    pin_workers=False)
            supervisor.start()
            try:
                assert orphan.wait(timeout=15) == -signal.SIGKILL
                assert bystander.poll() is None
            finally:
                supervisor.stop()
    finally:
        for process in (orphan, bystander):
            process.kill()
            process.wait()
