"""The scaling benchmark's topology (benchmarks/scaling.py): JSON click events, parsed and
enriched, summed per user.

    events (spout, every event tracked) -local-or-shuffle-> enrich -fields("user")-> totals

``enrich`` does what a click pipeline's first bolt does: ``json.loads`` of the event, a regular
expression over its user agent, a hash of its URL. ``bench.rounds`` in the topology's config is
the dial for the user work an event: 0 parses the event only, 1 adds the enrichment, and each
round above 1 hashes the URL's digest once more. scaling.py turns microseconds into rounds by
timing ``enrich_event`` itself. With a fields grouping by user about half the events cross
between two workers, and each is its own tuple tree, as a click's would be.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time

from stormlet import Bolt, Spout, TopologyBuilder

#: The config key of the dial (rounds of user work an event, see enrich_event).
ROUNDS_KEY = "bench.rounds"
#: The config key of a spout task's pace, events a second (0: as fast as it is let).
RATE_KEY = "bench.rate"
USERS = 10_000
AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
)
BROWSER = re.compile(r"(Firefox|Chrome|Version)/(\d+)")


def make_events(count: int = 1000, seed: int = 42) -> list[str]:
    """``count`` click events as JSON text, as they would come off a queue."""
    rng = random.Random(seed)
    return [json.dumps({"user": f"u{rng.randrange(USERS)}", "ts": 1_700_000_000 + i,
                        "url": f"https://shop.example.com/item/{rng.randrange(100_000)}"
                               f"?ref=campaign{rng.randrange(50)}",
                        "agent": rng.choice(AGENTS), "ms": rng.randrange(5, 900)})
            for i in range(count)]


def enrich_event(raw: str, rounds: int) -> tuple[str, str, str, int]:
    """One event's user work: (user, browser, URL digest, milliseconds on the page)."""
    event = json.loads(raw)
    if rounds < 1:
        return event["user"], "", "", event["ms"]
    found = BROWSER.search(event["agent"])
    browser = f"{found.group(1)}/{found.group(2)}" if found else "other"
    digest = hashlib.blake2b(event["url"].encode(), digest_size=16).digest()
    for _ in range(rounds - 1):
        digest = hashlib.blake2b(digest, digest_size=16).digest()
    return event["user"], browser, digest.hex(), event["ms"]


class ClickSpout(Spout):
    """Cycles through 1,000 events, each tracked by its own message id; paced to ``bench.rate``
    events a second if set (an emit is skipped while ahead of that pace)."""

    outputs = ["event"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.events = make_events()
        self.n = 0
        self.rate = float(conf.get(RATE_KEY, 0))
        self.started = time.monotonic()

    def next_tuple(self):
        if self.rate and self.n > (time.monotonic() - self.started) * self.rate:
            return
        self.n += 1
        self.collector.emit([self.events[self.n % 1000]], msg_id=self.n)


class EnrichBolt(Bolt):
    outputs = ["user", "browser", "url_hash", "ms"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.rounds = int(conf.get(ROUNDS_KEY, 1))

    def execute(self, tup):
        self.collector.emit(list(enrich_event(tup.values[0], self.rounds)), tup)
        self.collector.ack(tup)


class TotalsBolt(Bolt):
    """Time on the site and clicks per user."""

    outputs = ["user", "ms"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.totals: dict[str, list[int]] = {}

    def execute(self, tup):
        values = tup.values
        total = self.totals.get(values[0])
        if total is None:
            self.totals[values[0]] = [values[3], 1]
        else:
            total[0] += values[3]
            total[1] += 1
        self.collector.ack(tup)


def build(parallelism: int = 2, crossing: bool = True):
    """The topology with ``parallelism`` tasks of each component (2 for two workers; 1 for
    one process). Without ``crossing`` the totals take each event in its enricher's worker
    (local or shuffle), so nothing crosses between workers: a variant that measures what
    crossing costs, whose totals for a user are split between the tasks."""
    builder = TopologyBuilder()
    builder.set_spout("events", ClickSpout(), parallelism=parallelism)
    builder.set_bolt("enrich", EnrichBolt(), parallelism=parallelism) \
        .local_or_shuffle_grouping("events")
    totals = builder.set_bolt("totals", TotalsBolt(), parallelism=parallelism)
    if crossing:
        totals.fields_grouping("enrich", ["user"])
    else:
        totals.local_or_shuffle_grouping("enrich")
    return builder.build()


topology = build()

config = {"topology.workers": 2, "topology.max.spout.pending": 2000}
