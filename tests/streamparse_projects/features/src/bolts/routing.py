from recorder import record
from streamparse import Bolt, Stream


class Router(Bolt):
    """Sends each number straight to one task of "collector", chosen by the number."""

    outputs = [Stream(["n", "target"], name="routed", direct=True)]

    def initialize(self, conf, ctx):
        self.targets = sorted(int(task) for task, component in ctx["task->component"].items()
                              if component == "collector")

    def process(self, tup):
        n = tup.values.n
        target = self.targets[n % len(self.targets)]
        sent_to = self.emit([n, target], stream="routed", direct_task=target, need_task_ids=True)
        record(self, "routed", n=n, target=target, sent_to=sent_to)


class Collector(Bolt):
    def process(self, tup):
        record(self, "got", n=tup.values.n, target=tup.values.target, source=tup.component,
               stream=tup.stream)


class SquareSink(Bolt):
    def process(self, tup):
        record(self, "square", n=tup.values.n, square=tup.values.square, stream=tup.stream)
