from streamparse import Bolt


class FlakyBolt(Bolt):
    """Raises on the first sight of n % 10 == 3, fails the first sight of n % 10 == 7 by hand,
    always fails 42, and passes everything else on (auto-anchored, auto-acked)."""

    outputs = ["n"]

    def initialize(self, conf, ctx):
        self.seen = set()

    def process(self, tup):
        n = tup.values.n
        first = n not in self.seen
        self.seen.add(n)
        if n == 42:
            self.fail(tup)
        elif first and n % 10 == 3:
            raise ValueError(f"flaky on {n}")
        elif first and n % 10 == 7:
            self.fail(tup)
        else:
            self.emit([n])
