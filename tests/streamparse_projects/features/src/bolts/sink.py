from recorder import record
from streamparse import Bolt


class SinkBolt(Bolt):
    def process(self, tup):
        record(self, "seen", n=tup.values.n, source=tup.component, stream=tup.stream)
