"""A ReliableSpout whose tuples a bolt fails or raises on: replays until acked or given up.
Components come in both through the project root (src.) and through src/ (bare names)."""

from bolts.flaky import FlakyBolt
from src.bolts.sink import SinkBolt
from src.spouts.numbers import NumberSpout
from streamparse import Grouping, Topology


class Reliable(Topology):
    config = {"topology.message.timeout.secs": 20}

    numbers = NumberSpout.spec()
    flaky = FlakyBolt.spec(inputs={numbers: Grouping.fields("n")}, par=2)
    sink = SinkBolt.spec(inputs=[flaky])
