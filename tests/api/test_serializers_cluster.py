"""Registered types (stormlet/serializers.py) on a real cluster, across two workers and into the
failed-message log, and in a Spark backfill, which gets the registrations from the topology's
code package (tests/cluster_topologies/typed_values.py; the fast tests are test_serializers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cluster_support import after_test, serve_cluster, wait_until
from cluster_topologies import typed_values
from test_backfill import spark  # noqa: F401  (the session's local Spark)
from test_serializers import _seen
from zookeeper_server import zookeeper_available

from stormlet.failed import read_failed
from stormlet.failed.record import decode_value
from stormlet.loader import load_topology_file
from stormlet.serializers import registry_for

TYPED = Path(typed_values.__file__)


def _loaded():
    _topology, conf = load_topology_file(TYPED)
    return registry_for(conf), __import__("stormlet_topology_typed_values")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed: run deploy/zookeeper.sh install")
    yield from serve_cluster(tmp_path_factory.mktemp("cluster"), 1, {"s1": 2})


@pytest.fixture(autouse=True)
def logs_on_failure(request):
    yield
    if "cluster" in request.fixturenames:
        after_test(request, request.getfixturevalue("cluster"))


def test_every_type_crosses_between_two_workers_and_reaches_the_failed_log(cluster, tmp_path):
    registry, module = _loaded()
    n = 3 * len(module.SAMPLES)
    failing = len(module.SAMPLES)      # the first of each sample is dead-lettered
    failed_dir = tmp_path / "failed"
    cluster.submit(TYPED, "typed", "topology.workers=2", f"test.count={n}",
                   f"test.dir={tmp_path}", f"test.fail.below={failing}",
                   "topology.spout.dead.letter.attempts=1", f"stormlet.failed.dir={failed_dir}")
    wait_until(lambda: len(_seen(tmp_path)) == n, 90, "every tuple checked")
    assert set(_seen(tmp_path).values()) == {"ok"}
    # Both check tasks got tuples, each in its own worker: the fields grouping hashed the
    # values alike in both, and half of them crossed between the workers.
    pids = {json.loads(p.read_text())["pid"] for p in tmp_path.glob("check-*.json")}
    assert len(pids) == 2

    def dead_letters() -> list[dict]:
        return list(read_failed(failed_dir, registry=registry)) if failed_dir.exists() else []
    wait_until(lambda: len(dead_letters()) == failing, 60, "the dead letters' files")
    cluster.kill_and_wait("typed")
    for record in sorted(dead_letters(), key=lambda r: r["message_id"]):
        i, value = record["payload"]["value"]
        assert module.same(value, module.SAMPLES[i]), (value, module.SAMPLES[i])


def _listed(value):
    """``value`` with its tuples as lists: JSON's encoder writes a tuple as an array itself."""
    if type(value) is tuple:
        return [_listed(v) for v in value]
    if type(value) is list:
        return [_listed(v) for v in value]
    return value


def test_a_backfill_runs_the_registered_types_through_spark_stages(spark, tmp_path):
    registry, module = _loaded()
    n = 2 * len(module.SAMPLES)
    # The input stands in for the spout: [i, null], which ``enrich`` makes the sample.
    (tmp_path / "input.jsonl").write_text("".join(f"[{i}, null]\n" for i in range(n)))
    from stormlet.spark.backfill import Backfill, InputOptions
    job = Backfill(TYPED, InputOptions(str(tmp_path / "input.jsonl")),
                   conf={"test.dir": str(tmp_path / "checks")})
    os.makedirs(tmp_path / "checks")
    result = job.run(spark, str(tmp_path / "out"))
    assert result.errors == result.failed == result.bad_input == 0
    rows = [json.loads(line) for part in sorted((tmp_path / "out").glob("part-*"))
            for line in part.read_text().splitlines()]
    assert sorted(r["i"] for r in rows) == list(range(n))
    assert {r["verdict"] for r in rows} == {"ok"}
    for row in rows:
        # Written as the failed-message log writes them: decoded with the topology's types.
        expected = module.SAMPLES[row["i"] % len(module.SAMPLES)]
        value = decode_value(row["value"], registry)
        assert value == _listed(expected), (row, expected)
    assert len(list((tmp_path / "checks").glob("check-*.json"))) == 2
