"""JoinBolt (stormlet/joins.py): joins pinned exactly on hand-made windows (two and three
streams, inner and left, qualified and nested selects, both selectors), the topology's build
refusing joins its inputs cannot feed, then real topologies in a LocalCluster with event-time
windows: exact joined output, an unmatched tuple dropped by an inner join and kept by a left
one, a late tuple sent to the late stream, and every input acked once it left its window."""

from __future__ import annotations

import pytest
from support import running, wait_until

from stormlet import Bolt, JoinBolt, Selector, Spout, TopologyBuilder
from stormlet.errors import TopologyError
from stormlet.tuples import StreamInfo, Tuple
from stormlet.windowing import Duration

ORDERS = ["user", "item", "ts"]
USERS = ["id", "name", "ts"]
COUPONS = ["user", "code", "ts"]


def tup(component, stream, fields, values):
    return Tuple(list(values), StreamInfo(component, stream, fields), 1, None)


def order(user, item, ts=0, component="orders", stream="default"):
    return tup(component, stream, ORDERS, [user, item, ts])


def user(uid, name, ts=0, component="users", stream="default"):
    return tup(component, stream, USERS, [uid, name, ts])


def coupon(uid, code, ts=0, component="coupons", stream="default"):
    return tup(component, stream, COUPONS, [uid, code, ts])


def values(bolt, tuples):
    return [out for _inputs, out in bolt.join_window(tuples)]


# ----- the join, exactly

def test_an_inner_join_of_two_streams_emits_one_record_per_match():
    bolt = JoinBolt("orders", "user").join("users", "id", "orders").select("user, item, name")
    window = [order("u1", "book"), user("u1", "ann"), order("u2", "pen"), order("u1", "ink"),
              user("u3", "cat"), user("u1", "ada")]
    # Probe order (the orders, as they came), then the users of each in their order.
    assert values(bolt, window) == [["u1", "book", "ann"], ["u1", "book", "ada"],
                                    ["u1", "ink", "ann"], ["u1", "ink", "ada"]]
    records = bolt.join_window(window)
    assert [[t.values[1] for t in inputs] for inputs, _ in records][:2] == [
        ["book", "ann"], ["book", "ada"]]   # the anchors: one input tuple per stream


def test_three_streams_inner_then_left_keep_unmatched_records_with_none():
    bolt = (JoinBolt("orders", "user").join("users", "id", "orders")
            .left_join("coupons", "user", "users")
            .select("user, item, name, coupons:code"))
    window = [order("u1", "book"), order("u2", "pen"), order("u3", "cup"),
              user("u1", "ann"), user("u2", "bob"),
              coupon("u1", "C10"), coupon("u1", "C20"), coupon("u9", "C99")]
    assert values(bolt, window) == [["u1", "book", "ann", "C10"], ["u1", "book", "ann", "C20"],
                                    ["u2", "pen", "bob", None]]   # u3: no user, inner join
    assert [f.name for f in bolt.output_fields] == ["user", "item", "name", "coupons:code"]


def test_a_record_without_the_next_join_value_is_dropped_even_by_a_left_join():
    # As Storm: a left join keeps u2 with no coupon, but the next join, on coupons:user, has no
    # value to look up, so the record goes.
    bolt = (JoinBolt("users", "id").left_join("coupons", "user", "users")
            .left_join("orders", "user", "coupons").select("id, code, item"))
    window = [user("u1", "ann"), user("u2", "bob"), coupon("u1", "C10"), order("u1", "book")]
    assert values(bolt, window) == [["u1", "C10", "book"]]
    left_only = JoinBolt("users", "id").left_join("coupons", "user", "users").select("id, code")
    assert values(left_only, window) == [["u1", "C10"], ["u2", None]]


def test_unqualified_fields_come_from_the_first_stream_that_has_them():
    bolt = (JoinBolt("orders", "user").join("users", "id", "orders")
            .select("ts, users:ts, USERS:name, :item"))
    window = [order("u1", "book", ts=5), user("u1", "ann", ts=7)]
    # Storm matches a qualifier without case, and reads ":item" as "item".
    assert values(bolt, window) == [[5, 7, "ann", "book"]]
    assert [f.name for f in bolt.output_fields] == ["ts", "users:ts", "USERS:name", "item"]


def test_nested_fields_and_list_valued_keys():
    fields = ["key", "info"]
    left = [tup("a", "default", fields, [["x", 1], {"who": {"name": "ann"}}])]
    right = [tup("b", "default", fields, [["x", 1], {"who": {"name": "bob"}}]),
             tup("b", "default", fields, [["x", 2], {"who": None}])]
    bolt = JoinBolt("a", "key").join("b", "key", "a").select("a:info.who.name, b:info.who.name")
    assert values(bolt, left + right) == [["ann", "bob"]]


def test_the_stream_selector_joins_by_stream_id_across_components():
    bolt = (JoinBolt(JoinBolt.Selector.STREAM, "orders", "user").join("users", "id", "orders")
            .select("item, name"))
    window = [order("u1", "book", component="shop", stream="orders"),
              order("u1", "pen", component="app", stream="orders"),
              user("u1", "ann", component="crm", stream="users")]
    assert values(bolt, window) == [["book", "ann"], ["pen", "ann"]]


@pytest.mark.parametrize("make, message", [
    (lambda: JoinBolt("a", "k").join("b", "k", "c"), "'b' joins 'c', which was not introduced"),
    (lambda: JoinBolt("a", "k").join("b", "k", "a").join("b", "k", "a"),
     "'b' is already part of the join"),
    (lambda: JoinBolt("a", "k").join("b", "a:k", "a"), "no 'stream:' qualifier"),
    (lambda: JoinBolt("a"), "takes a source component"),  # type: ignore[call-overload]
    (lambda: JoinBolt("a", "k").select("x, x"), "distinct output fields"),
    (lambda: JoinBolt("a", "k").select("x..y"), "empty name"),
])
def test_joins_that_cannot_work_are_refused_when_written(make, message):
    with pytest.raises(TopologyError, match=message):
        make()


# ----- in a topology

class Events(Spout):
    """Emits the ``(stream, values)`` pairs of ``test.<component>`` tracked, in order, message
    ids 0, 1, ...; an entry ``("after-ack", n)`` waits until message ``n`` was acked."""

    def __init__(self, outputs):
        self.outputs = outputs

    def open(self, conf, context, collector):
        self.collector = collector
        self.events = list(conf[f"test.{context.component_id}"])
        self.acked, self.failed = [], []
        self.next_id = 0

    def next_tuple(self):
        if not self.events:
            return
        stream, vals = self.events[0]
        if stream == "after-ack":
            if vals not in self.acked:
                return
            self.events.pop(0)
            return
        self.events.pop(0)
        self.collector.emit(list(vals), msg_id=self.next_id, stream=stream)
        self.next_id += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id, reason):
        self.failed.append(msg_id)


class Collect(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = {}

    def execute(self, tup):
        self.seen.setdefault(tup.stream, []).append(list(tup.values))
        self.collector.ack(tup)


BASE = 1_700_000_000_000


def test_three_streams_by_stream_id_with_a_left_join_and_a_late_tuple():
    # One spout, in timestamp order but for the late coupon, which it sends only once the
    # first window's tuples were acked (the watermark has passed 2000 by then).
    events = [("orders", ["u1", "book", BASE + 100]), ("users", ["u1", "ann", BASE + 150]),
              ("users", ["u2", "bob", BASE + 200]), ("orders", ["u2", "pen", BASE + 250]),
              ("coupons", ["u1", "C10", BASE + 300]), ("orders", ["u3", "cup", BASE + 400]),
              ("orders", ["u1", "ink", BASE + 1100]), ("users", ["u1", "ann", BASE + 1200]),
              ("coupons", ["u1", "C20", BASE + 1300]), ("coupons", ["u1", "C30", BASE + 1350]),
              ("orders", ["u2", "map", BASE + 1400]), ("users", ["u2", "bob", BASE + 1500]),
              ("orders", ["u9", "far", BASE + 2600]),      # watermark to 2300: two windows fire
              ("after-ack", 0),
              ("coupons", ["u2", "LATE", BASE + 500]),     # late: goes to the late stream
              ("orders", ["u9", "later", BASE + 3700])]    # watermark to 3400: a third fires
    joiner = (JoinBolt(Selector.STREAM, "orders", "user").join("users", "id", "orders")
              .left_join("coupons", "user", "users")
              .select("user, item, name, coupons:code, orders:ts")
              .with_tumbling_window(Duration(seconds=1)).with_timestamp_field("ts")
              .with_watermark_interval(Duration(ms=50)).with_late_tuple_stream("late"))
    builder = TopologyBuilder()
    builder.set_spout("shop", Events({"orders": ORDERS, "users": USERS, "coupons": COUPONS}))
    builder.set_bolt("joiner", joiner).fields_grouping("shop", ["user"], "orders") \
        .fields_grouping("shop", ["id"], "users").fields_grouping("shop", ["user"], "coupons")
    builder.set_bolt("collect", Collect()).global_grouping("joiner").global_grouping(
        "joiner", "late")
    with running(builder.build(), {"test.shop": events}) as cluster:
        spout = cluster.instances("test", "shop")[0]
        collect = cluster.instances("test", "collect")[0]
        # Every message but the last two (still in the window ending 4000) leaves its window.
        wait_until(lambda: sorted(spout.acked) == list(range(12)) + [13], 15,
                   "every message that left its window to be acked")
        assert collect.seen["default"] == [
            ["u1", "book", "ann", "C10", BASE + 100], ["u2", "pen", "bob", None, BASE + 250],
            ["u1", "ink", "ann", "C20", BASE + 1100], ["u1", "ink", "ann", "C30", BASE + 1100],
            ["u2", "map", "bob", None, BASE + 1400]]
        assert collect.seen["late"] == [[["u2", "LATE", BASE + 500]]]
        assert spout.failed == []


def test_two_components_joined_by_source_in_parallel():
    # Two spouts, each in timestamp order: nothing is late whatever their interleaving, so the
    # joined window is exact. u3's user has no click: an inner join drops it.
    clicks = [("default", ["u1", "home", BASE + 100]), ("default", ["u2", "cart", BASE + 300]),
              ("default", ["u1", "pay", BASE + 600]), ("default", ["u5", "x", BASE + 2500])]
    users = [("default", ["u1", "ann", BASE + 200]), ("default", ["u2", "bob", BASE + 400]),
             ("default", ["u3", "cat", BASE + 700]), ("default", ["u6", "y", BASE + 2600])]
    joiner = (JoinBolt("clicks", "user").join("users", "id", "clicks")
              .select(["user", "page", "name"])
              .with_tumbling_window(Duration(seconds=1)).with_timestamp_field("ts")
              .with_watermark_interval(Duration(ms=50)).with_output_stream("joined"))
    builder = TopologyBuilder()
    builder.set_spout("clicks", Events({"default": ["user", "page", "ts"]}))
    builder.set_spout("users", Events({"default": USERS}))
    builder.set_bolt("joiner", joiner).fields_grouping("clicks", ["user"]) \
        .fields_grouping("users", ["id"])
    builder.set_bolt("collect", Collect()).global_grouping("joiner", "joined")
    conf = {"test.clicks": clicks, "test.users": users}
    with running(builder.build(), conf) as cluster:
        collect = cluster.instances("test", "collect")[0]
        wait_until(lambda: len(collect.seen.get("joined", [])) == 3, 15, "the joined window")
        assert collect.seen == {"joined": [["u1", "home", "ann"], ["u2", "cart", "bob"],
                                           ["u1", "pay", "ann"]]}


def test_the_build_refuses_joins_its_inputs_cannot_feed():
    def build(joiner, *subscriptions):
        builder = TopologyBuilder()
        builder.set_spout("orders", Events({"default": ORDERS}))
        builder.set_spout("users", Events({"default": USERS}))
        declarer = builder.set_bolt("joiner", joiner)
        for source in subscriptions:
            declarer.shuffle_grouping(source)
        return builder.build()

    window = Duration(seconds=1)
    with pytest.raises(TopologyError, match="JoinBolt 'joiner' joins component 'users', which "
                                            "it does not subscribe to"):
        build(JoinBolt("orders", "user").join("users", "id", "orders").select("item")
              .with_tumbling_window(window), "orders")
    with pytest.raises(TopologyError, match="subscribes to component 'users', which is in none"):
        build(JoinBolt("orders", "user").select("item").with_tumbling_window(window),
              "orders", "users")
    with pytest.raises(TopologyError, match="component 'users' has no field 'user' to join on"):
        build(JoinBolt("orders", "user").join("users", "user", "orders").select("item")
              .with_tumbling_window(window), "orders", "users")
    with pytest.raises(TopologyError, match="selects 'orders:name', which no joined stream has"):
        build(JoinBolt("orders", "user").join("users", "id", "orders").select("orders:name")
              .with_tumbling_window(window), "orders", "users")
    with pytest.raises(TopologyError, match="selects 'x:item', but 'x' is not one of"):
        build(JoinBolt("orders", "user").join("users", "id", "orders").select("x:item")
              .with_tumbling_window(window), "orders", "users")
    with pytest.raises(TopologyError, match="JoinBolt has no output fields: call select"):
        build(JoinBolt("orders", "user").join("users", "id", "orders")
              .with_tumbling_window(window), "orders", "users")
