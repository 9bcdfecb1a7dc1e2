"""What nimbus and the supervisor log about conditions an operator meets on a real network: a
ZooKeeper that stalls, a topology left with nowhere to run, a failed re-registration, the address
nimbus listens on. One line per event, each saying what happened; no traceback for a lost
connection; nothing repeated every pass of a loop. Daemons run in-process on a real ZooKeeper."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import KazooState
from support import wait_until
from test_nimbus_session import expire_session
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster import nimbus as nimbus_module
from stormlet.cluster.names import new_topology_id
from stormlet.cluster.nimbus import Nimbus
from stormlet.cluster.security import Security
from stormlet.cluster.supervisor import Supervisor

pytestmark = [pytest.mark.zookeeper,
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]


def stormlet_records(caplog, level: int = logging.WARNING) -> list[logging.LogRecord]:
    """Stormlet's own records at ``level`` or above (kazoo's connection lines are its own)."""
    return [r for r in caplog.records if r.name.startswith("stormlet") and r.levelno >= level]


def count_calls(obj, name: str) -> list[int]:
    """Wrap ``obj.name`` to count its calls; returns the one-element counter."""
    calls = [0]
    method = getattr(obj, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return method(*args, **kwargs)

    setattr(obj, name, counted)
    return calls


@pytest.fixture
def zk(tmp_path):
    with ZooKeeperServer(tmp_path / "zk") as server:
        yield server


@pytest.fixture
def leader(zk, tmp_path, monkeypatch):
    """A leading nimbus whose monitor runs every 20 ms: a second's worth of passes is 50."""
    monkeypatch.setattr(nimbus_module, "MONITOR_SECS", 0.02)
    nimbus = Nimbus(zk.hosts, port=free_port(), data_dir=tmp_path / "nimbus", nimbus_id="n1")
    nimbus.start()
    try:
        assert nimbus.is_leader.wait(15)
        yield nimbus
    finally:
        nimbus.stop()


@pytest.fixture
def supervisor(zk, tmp_path):
    supervisor = Supervisor(zk.hosts, [free_port()], data_dir=tmp_path / "supervisor",
                            supervisor_id="s1")
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop()


@pytest.fixture
def observer(zk):
    """A client of the test's own, which the daemons' sessions do not affect."""
    client = KazooClient(hosts=zk.hosts)
    client.start()
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_a_topology_with_nowhere_to_run_is_logged_once_not_every_pass(leader, caplog):
    # Its one worker was on a supervisor that is gone, and no live supervisor has a slot.
    tid = new_topology_id("stranded")
    leader.state.set_topology(tid, {"name": "stranded", "status": "active"})
    passes = count_calls(leader, "_monitor")
    with caplog.at_level(logging.INFO):
        leader.state.set_assignment(tid, {"executors": [["spout", [1], "gone", "10.0.0.9", 6700]],
                                          "time": time.time(), "version": 1})
        start = passes[0]
        wait_until(lambda: passes[0] >= start + 50, 30, "50 monitor passes")
    lines = [r.getMessage() for r in stormlet_records(caplog) if tid in r.getMessage()]
    assert len(lines) == 1, lines
    assert "dead supervisors" in lines[0] and "until a supervisor with free slots" in lines[0]


def test_a_zookeeper_stall_logs_one_line_per_daemon_and_no_traceback(zk, leader, supervisor,
                                                                     caplog):
    # A frozen server: the clients' requests hang until their read timeout drops the
    # connection (what a congested or briefly cut link does), then they reconnect.
    monitor = count_calls(leader, "_monitor")
    syncs = count_calls(supervisor, "_read_assignments")
    with caplog.at_level(logging.INFO):
        os.kill(zk.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: supervisor.client.state != KazooState.CONNECTED
                       and leader.client.state != KazooState.CONNECTED, 20,
                       "both daemons to notice the stall")
        finally:
            os.kill(zk.pid, signal.SIGCONT)
        wait_until(lambda: supervisor.client.state == KazooState.CONNECTED
                   and leader.client.state == KazooState.CONNECTED, 30, "both to reconnect")
        passes, loops = monitor[0], syncs[0]
        wait_until(lambda: monitor[0] > passes + 10 and syncs[0] > loops + 2, 30,
                   "passes after the reconnection")
    records = stormlet_records(caplog)
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]
    by_daemon = {}
    for record in records:
        by_daemon.setdefault(record.name, []).append(record.getMessage())
    for name, lines in by_daemon.items():
        assert len(lines) <= 1, (name, lines)
        assert "ZooKeeper" in lines[0], (name, lines)


def test_a_disconnect_keeps_the_registration_and_an_expiry_puts_it_back(zk, supervisor, observer,
                                                                         caplog):
    def registration() -> int | None:
        """The creation id of the supervisor's registration node (None: not registered)."""
        stat = observer.exists(supervisor.state._path("supervisors", "s1"))
        return None if stat is None else stat.czxid

    first = registration()
    loops = count_calls(supervisor, "_read_assignments")
    # What kazoo reports after a disconnect that kept the session: nothing to put back.
    supervisor._on_connection(KazooState.SUSPENDED)
    supervisor._on_connection(KazooState.CONNECTED)
    start = loops[0]
    wait_until(lambda: loops[0] >= start + 2, 10, "two passes of the loop")
    assert registration() == first

    with caplog.at_level(logging.INFO):
        expire_session(zk.hosts, supervisor.client)
        wait_until(lambda: registration() not in (None, first), 30,
                   "the supervisor to register again")
    assert not stormlet_records(caplog)
    assert [r.getMessage() for r in stormlet_records(caplog, logging.INFO)] == [
        "supervisor s1 registered again after its ZooKeeper session expired"]


def test_a_failed_re_registration_names_its_error(supervisor, caplog, monkeypatch):
    def lost(*args, **kwargs):
        raise ConnectionLoss()   # as kazoo raises it: no text

    monkeypatch.setattr(supervisor.state, "register_supervisor", lost)
    with caplog.at_level(logging.WARNING):
        supervisor._reregister()
    [line] = [r.getMessage() for r in stormlet_records(caplog)]
    assert "s1" in line and "ConnectionLoss" in line, line
    assert not line.rstrip().endswith(":"), line


def test_nimbus_logs_the_address_it_listens_on_and_the_one_peers_reach(zk, tmp_path, caplog):
    Security.generate(tmp_path / "cluster.secret")
    port = free_port()
    nimbus = Nimbus(zk.hosts, port=port, data_dir=tmp_path / "nimbus", host="192.0.2.7",
                    bind="0.0.0.0", security=Security.load(tmp_path / "cluster.secret"))
    with caplog.at_level(logging.INFO, logger="stormlet.cluster.nimbus"):
        nimbus.start()
        nimbus.stop()
    [line] = [r.getMessage() for r in caplog.records if "serving on" in r.getMessage()]
    assert f"serving on tcp://0.0.0.0:{port}" in line, line
    assert f"reach it at tcp://192.0.2.7:{port}" in line, line
