"""State written by one worker of a task at a time (issue 51): a worker cut off from ZooKeeper
whose task moved may not commit over its successor's state, nor may an old instance of the
topology over a new one's. Both ran twice, and committed twice, before."""

from __future__ import annotations

import pytest
from redis_server import SKIP_REASON, redis_available, redis_server  # noqa: F401

from stormlet import config as cfg
from stormlet.state.providers import open_store
from stormlet.state.redis_store import FencedState

pytestmark = pytest.mark.skipif(not redis_available(), reason=SKIP_REASON)


@pytest.fixture
def opened(redis_server):   # noqa: F811
    """(open the store of namespace t/b/1 as a worker of ``owner`` at ``epoch`` does)"""
    redis_server.client().flushall()

    def open_as(owner: str, epoch: int):
        conf = {cfg.TOPOLOGY_STATE_PROVIDER: "redis",
                cfg.TOPOLOGY_STATE_PROVIDER_CONFIG: redis_server.provider_config,
                cfg.STORMLET_TOPOLOGY_ID: owner, cfg.STORMLET_STATE_EPOCH: epoch}
        return open_store(conf, "t", "t/b/1")
    return open_as


def test_once_a_newer_worker_of_the_task_opens_its_state_the_old_one_writes_nothing(opened):
    orphan = opened("t-1", 3)
    orphan.prepare(1, {b"k": b"orphan"})
    successor = opened("t-1", 7)   # the task moved at assignment version 7
    for write in (lambda: orphan.commit(1), lambda: orphan.prepare(2, {b"k": b"late"}),
                  orphan.rollback):
        with pytest.raises(FencedState, match="a newer worker of this task .epoch 7. writes it "
                                              "now, not this worker .t-1, epoch 3."):
            write()
    assert successor.get(b"k") is None, "the orphan's prepared checkpoint was never committed"
    successor.prepare(4, {b"k": b"successor"})
    successor.commit(4)
    assert orphan.get(b"k") == b"successor"   # reads are not fenced: there is nothing to hurt
    # A worker of the task at an older epoch than the claim is refused from the start.
    with pytest.raises(FencedState):
        opened("t-1", 5)
    # Restarted at the same version (a crash, and its supervisor starts it again): its own.
    again = opened("t-1", 7)
    again.prepare(5, {b"k": b"again"})
    again.commit(5)


def test_a_new_instance_of_the_topology_takes_the_state_over_from_the_old_ones_workers(opened):
    # A resubmission resumes its state under its name; versions start again at 1.
    old = opened("t-1", 9)
    old.prepare(1, {b"k": b"old"})
    old.commit(1)
    new = opened("t-2", 1)
    assert new.get(b"k") == b"old"
    with pytest.raises(FencedState, match="topology instance t-2 writes it now"):
        old.prepare(2, {b"k": b"stale"})
    new.prepare(1, {b"k": b"new"})
    new.commit(1)
    assert new.get(b"k") == b"new"
