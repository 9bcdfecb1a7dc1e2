"""What a value of each registered type (stormlet/serializers.py) costs: its check at emit, and
its round trip through the wire's packing (packed into a batch's column, unpacked, decoded).

    python benchmarks/serialization.py [--values 20000] [--repeats 5]

Prints, per type, nanoseconds a value (the median of ``--repeats`` runs over ``--values``
values) for ``checked`` (what every emit pays, local mode included) and for the round trip
(what a tuple crossing between workers pays for that value on top of its tuple's cost), with a
plain str and int as the baseline. Needs no service; run it compiled and interpreted
(STORMLET_PURE_PYTHON=1) to see both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

from stormlet.runtime import build_mode
from stormlet.runtime.serialization import checked
from stormlet.serializers import DEFAULT_REGISTRY
from stormlet.tuples import StreamInfo

SAMPLES = {
    "str (plain)": "word",
    "int (plain)": 12345,
    "datetime naive": dt.datetime(2026, 11, 29, 17, 5, 1, 250),
    "datetime utc": dt.datetime(2026, 11, 29, 17, 5, 1, tzinfo=dt.timezone.utc),
    "datetime zoned": dt.datetime(2026, 11, 29, 17, 5, tzinfo=ZoneInfo("Europe/Paris")),
    "date": dt.date(2026, 11, 29),
    "time": dt.time(17, 5, 1),
    "timedelta": dt.timedelta(days=1, seconds=5),
    "Decimal": Decimal("1234.5678"),
    "UUID": uuid.UUID("5c0f3a1e-8d2b-4c6f-9a7e-1b2c3d4e5f60"),
    "tuple of 3": (1, "two", 3.0),
    "set of 3": {1, 2, 3},
}


def _median_ns(run, n: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        run()
        times.append((time.perf_counter_ns() - start) / n)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.values
    registry = DEFAULT_REGISTRY
    info = StreamInfo("bench", "default", ["value"], registry)
    print(build_mode.describe())
    print(f"{'type':<16} {'check ns':>9} {'round trip ns':>14}")
    for name, value in SAMPLES.items():
        rows = [[value] for _ in range(n)]

        def check() -> None:
            for row in rows:
                checked(row, info, "bench")

        column = [value] * n

        def round_trip() -> None:
            back = registry.unpackb(registry.packb([column]))
            assert len(back[0]) == n

        print(f"{name:<16} {_median_ns(check, n, args.repeats):>9.0f} "
              f"{_median_ns(round_trip, n, args.repeats):>14.0f}")


if __name__ == "__main__":
    main()
