"""Dead letters for any reliable spout: ``topology.spout.dead.letter.attempts`` and
``collector.dead_letter``, through a real LocalCluster and the failed-message log."""

from __future__ import annotations

import support

from stormlet import Bolt, Spout, TopologyBuilder
from stormlet.failed import read_failed


class Replaying(Spout):
    """Emits ids 0..19 once each and replays every failure under the same id; message 13 it
    gives up on by itself, through the collector."""

    outputs = ["id"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = list(range(20))
        self.acked, self.fails, self.dead = set(), [], []
        self.calls = 0

    def next_tuple(self):
        self.calls += 1
        if self.todo:
            msg_id = self.todo.pop(0)
            if msg_id == 13:
                self.collector.dead_letter([13], msg_id=13, reason="cannot parse it")
                return
            self.collector.emit([msg_id], msg_id=msg_id)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id, reason):
        self.fails.append(msg_id)
        self.todo.append(msg_id)

    def dead_lettered(self, msg_id, reason):
        self.dead.append((msg_id, reason.kind, reason.component))


class FailsSeven(Bolt):
    def execute(self, tup):
        if tup["id"] == 7:
            self.collector.fail(tup, "seven is bad")
        else:
            self.collector.ack(tup)


def test_a_message_failing_n_times_goes_to_the_failed_log_not_back_to_the_spout(tmp_path):
    builder = TopologyBuilder()
    builder.set_spout("numbers", Replaying())
    builder.set_bolt("check", FailsSeven()).shuffle_grouping("numbers")
    conf = {"topology.spout.dead.letter.attempts": 3, "stormlet.failed.dir": str(tmp_path),
            "topology.message.timeout.secs": 5}
    with support.running(builder.build(), conf) as cluster:
        spout = cluster.instances("test", "numbers")[0]
        cluster.wait_for(lambda: len(spout.acked) == 18 and spout.dead, timeout=10)
        # A fail or a replay after the dead letter would now have been heard: the spout has
        # stepped on since (anything it called or emitted then is done) and nothing is in
        # flight (any replay's verdict has come).
        calls = spout.calls
        support.wait_until(lambda: spout.calls > calls + 1, 10, "the spout's next steps")
        support.wait_until(lambda: cluster.in_flight("test") == 0, 10, "no tuple in flight")
        assert spout.fails == [7, 7]                      # two fails, the third dead-lettered
        assert spout.dead == [(7, "fail", "check")]
        assert spout.acked == set(range(20)) - {7, 13}
    records = sorted(read_failed(tmp_path), key=lambda r: r["message_id"])
    assert [(r["message_id"], r["attempts"], r["payload"]["value"]) for r in records] == [
        (7, 3, [7]), (13, 1, [13])]
    assert records[0]["reason"] == {"kind": "fail", "component": "check",
                                    "message": "seven is bad"}
    assert records[1]["reason"]["message"] == "cannot parse it"
    assert records[1]["component"] == "numbers" and records[1]["source"] is None
