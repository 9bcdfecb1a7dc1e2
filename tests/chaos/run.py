"""The chaos suite, long form: a stream of messages through a loopback cluster while faults of
every kind are injected at random, then the report.

    python tests/chaos/run.py [--messages 200000] [--rate 2000] [--faults 20] [--seed N]
                              [--stateful] [--effectively-once]

Needs ZooKeeper (bash deploy/zookeeper.sh install); --stateful runs the stateful topology with
its state on a Redis server (bash deploy/redis.sh install), which also gets SIGKILLed;
--effectively-once runs it in that mode, with a sink of that mode. Exits non-zero if any message
was lost (or, stateful, is missing from the committed state; or, effectively-once, is counted
there more than once, or the sink's committed records are not a failure-free run's).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import FAULTS, ChaosRun  # noqa: E402
from redis_server import RedisServer  # noqa: E402
from test_chaos import chaos_cluster  # noqa: E402

from stormlet import config as cfg  # noqa: E402

SUPERVISOR_DOWN = 15.0
ZOOKEEPER_DOWN = 12.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=2000, help="messages appended per second")
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stateful", action="store_true",
                        help="the stateful topology, its state on a Redis server")
    parser.add_argument("--effectively-once", action="store_true",
                        help="the stateful topology in topology.guarantee effectively-once "
                             "(implies --stateful): every message counted exactly once")
    args = parser.parse_args()
    args.stateful = args.stateful or args.effectively_once
    guarantee = cfg.EFFECTIVELY_ONCE if args.effectively_once else None
    rng = random.Random(args.seed)
    stream_secs = args.messages / args.rate
    interval = stream_secs / (args.faults + 1)
    with tempfile.TemporaryDirectory(prefix="stormlet-chaos-") as tmp:
        redis = RedisServer(Path(tmp) / "redis").start() if args.stateful else None
        kinds = FAULTS + ("redis",) if args.stateful else FAULTS
        cluster = chaos_cluster(Path(tmp))
        try:
            run = ChaosRun(cluster, Path(tmp) / "run", args.messages, args.rate, seed=args.seed,
                           redis=redis, guarantee=guarantee)
            run.start()
            # Faults that take capacity away for a while are not stacked: at most one
            # supervisor down and one ZooKeeper outage at a time, so the cluster can recover.
            busy_until = {kind: 0.0 for kind in kinds}
            for i in range(args.faults):
                at = (i + 1 + rng.uniform(-0.3, 0.3)) * interval
                time.sleep(max(0.0, at - run.elapsed()))
                now = run.elapsed()
                kind = rng.choice([k for k in kinds if busy_until[k] <= now])
                if kind == "supervisor":
                    run.inject(kind, down_secs=SUPERVISOR_DOWN)
                    busy_until[kind] = now + SUPERVISOR_DOWN + 10
                elif kind == "zookeeper":
                    run.inject(kind, down_secs=ZOOKEEPER_DOWN)
                    busy_until[kind] = now + ZOOKEEPER_DOWN + 10
                else:
                    run.inject(kind)
                print(f"{run.faults[-1].at:7.1f}s {run.faults[-1].detail}", flush=True)
            report = run.finish(timeout=600)
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            raise
        finally:
            cluster.shutdown()
            if redis is not None:
                redis.kill()
    print("\n".join(report.lines()))
    return 1 if report.lost or report.uncounted or (guarantee and not report.exact) else 0


if __name__ == "__main__":
    sys.exit(main())
