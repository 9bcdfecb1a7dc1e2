"""A nimbus whose ZooKeeper session expires must stop leading at once and campaign again,
so that two nimbus processes never both act as leader."""

from __future__ import annotations

import time

import pytest
from cluster_support import wait_until
from kazoo.client import KazooClient
from zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

from stormlet.cluster.nimbus import Nimbus

pytestmark = [pytest.mark.zookeeper,
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]


def expire_session(zk_hosts: str, client: KazooClient) -> None:
    # ZooKeeper's own way: a second client with the same session id, closed, ends the session.
    session_id, password = client.client_id
    twin = KazooClient(hosts=zk_hosts, client_id=(session_id, password))
    twin.start()
    twin.stop()
    twin.close()


def test_an_expired_leader_steps_down_and_rejoins_as_standby(tmp_path):
    with ZooKeeperServer(tmp_path / "zk") as zk:
        first = Nimbus(zk.hosts, port=free_port(), data_dir=tmp_path / "n1", nimbus_id="n1")
        first.start()
        second = None
        try:
            assert first.is_leader.wait(15)
            second = Nimbus(zk.hosts, port=free_port(), data_dir=tmp_path / "n2", nimbus_id="n2")
            second.start()
            time.sleep(1)
            assert not second.is_leader.is_set()

            expire_session(zk.hosts, first.client)
            wait_until(second.is_leader.is_set, 20, "the standby to lead")
            wait_until(lambda: not first.is_leader.is_set(), 10, "the old leader to step down")
            assert second.state.leader()["id"] == "n2"
            # The old leader is back as a standby, registered and ready to take over.
            wait_until(lambda: set(second.state.nimbuses()) == {"n1", "n2"}, 20,
                       "n1 to re-announce itself")
            time.sleep(2)
            assert not first.is_leader.is_set()

            second.stop()
            second = None
            wait_until(first.is_leader.is_set, 30, "n1 to lead again")
            assert first.state.leader()["id"] == "n1"
        finally:
            if second is not None:
                second.stop()
            first.stop()
