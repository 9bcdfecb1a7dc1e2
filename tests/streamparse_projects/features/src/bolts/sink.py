from streamparse import Bolt

from recorder import record


class SinkBolt(Bolt):
    def process(self, tup):
        record(self, "seen", n=tup.values.n, source=tup.component, stream=tup.stream)
