"""benchmarks/scaling_topology.py, the scaling benchmark's topology: its user work and its dial,
and the topology itself in local mode (every event tracked and acked, each summed once)."""

from support import BENCHMARKS, benchmark_module, imported_from, wait_until

from stormlet import LocalCluster

topo = benchmark_module("scaling_topology", "topo")


def test_the_dial_adds_work_and_keeps_the_event(topo):
    raw = topo.make_events(1)[0]
    parsed_only = topo.enrich_event(raw, 0)
    enriched = topo.enrich_event(raw, 1)
    more = topo.enrich_event(raw, 3)
    assert parsed_only[0] == enriched[0] == more[0] and parsed_only[3] == enriched[3]
    assert parsed_only[1:3] == ("", "")
    assert enriched[1] in ("Chrome/120", "Version/17", "Firefox/121")
    assert enriched[1] == more[1] and enriched[2] != more[2]   # hashed twice more


def test_every_event_is_summed_once_and_acked(topo):
    with LocalCluster() as cluster:
        cluster.submit("scaling", {"topology.max.spout.pending": 200, topo.ROUNDS_KEY: 2},
                       topo.build(parallelism=1))
        wait_until(lambda: cluster.metrics("scaling")["events"]["acked"] >= 2000, 30,
                   "2,000 events acked", interval=0.05)
        report = cluster.kill("scaling", wait_secs=5)
    metrics = report.metrics
    assert metrics["events"]["failed"] == 0
    # Each event is enriched once and summed once; each acked event was summed.
    assert metrics["enrich"]["executed"] == metrics["totals"]["executed"]
    assert metrics["totals"]["executed"] >= metrics["events"]["acked"] >= 2000


def test_the_variant_without_crossing_sums_each_event_in_its_enrichers_worker(topo):
    def totals_grouping(topology):
        totals, = (bolt for bolt in topology.bolts if bolt.id == "totals")
        subscription, = totals.inputs
        return subscription.source, subscription.grouping.kind, subscription.grouping.fields

    with imported_from(BENCHMARKS, "scaling_no_crossing_topology") as variant:
        assert totals_grouping(variant.topology) == ("enrich", "local_or_shuffle", ())
        assert variant.config == topo.config
    assert totals_grouping(topo.topology) == ("enrich", "fields", ("user",))
