"""Named streams declared with Stream, a subscription to one by spec["stream"], and direct
emits to the task a bolt picks."""

from bolts.routing import Collector, Router, SquareSink
from spouts.numbered import NumberedSpout
from streamparse import Grouping, Topology


class Streams(Topology):
    numbers = NumberedSpout.spec()
    router = Router.spec(inputs=[numbers])
    collector = Collector.spec(inputs={router["routed"]: Grouping.DIRECT}, par=2)
    squares = SquareSink.spec(inputs=[numbers["squares"]])
