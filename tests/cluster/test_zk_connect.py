"""Connecting to a ZooKeeper ensemble one of whose members is cut off (issue 51): a member
that drops packets must not cost a client its whole session on one connection attempt."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack

import pytest
from zookeeper_server import ZooKeeperServer, zookeeper_available

from stormlet.cluster.zk_state import connect, connect_timeout

pytestmark = [pytest.mark.zookeeper,
              pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")]


def black_hole(stack: ExitStack) -> int:
    """A port on loopback that takes no connection and answers nothing: a listener whose
    backlog is full, so Linux drops further SYNs, as a member cut off from the network does."""
    listener = stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    for _ in range(3):   # fill the accept queue (never accepted)
        filler = stack.enter_context(socket.socket())
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
    time.sleep(0.2)
    return port


def test_each_attempt_is_bounded_by_a_share_of_the_session():
    assert connect_timeout("a:1,b:1,c:1", 6.0) == 1.0
    assert connect_timeout("a:1,b:1,c:1/stormlet", 20.0) == pytest.approx(20 / 6)
    assert connect_timeout("a:1", 20.0) == 10.0


def test_a_client_reaches_the_live_member_although_it_tries_dead_ones_first(tmp_path):
    # kazoo tried each server for a whole session (20 s here) before the next: a client that
    # drew a dead member first could not connect within its 15 s start timeout.
    with ZooKeeperServer(tmp_path / "zk") as zk, ExitStack() as stack:
        holes = [f"127.0.0.1:{black_hole(stack)}" for _ in range(4)]
        for attempt in range(2):
            started = time.monotonic()
            client = connect(",".join([*holes, zk.hosts]), timeout=15, session_timeout=20.0)
            try:
                assert client.connected
            finally:
                client.stop()
                client.close()
            # Four dead members at 2 s each at worst, and the live one.
            assert time.monotonic() - started < 12, attempt
