"""What the acker's messages cost to cross between workers, on one thread, without sockets.

    python benchmarks/control_records.py [--records 1000] [--frames 2000] [--runs 5]

When a spout's acker is in another worker (fewer ackers than workers), its inits go out and its
verdicts come back over the wire; a bolt's acks cross whenever the acker is elsewhere. Each
kind is timed as the sender packs it (``wire.encode_frame``) and as the receiver checks and
unpacks it (``FrameDecoder.decode``), in frames of ``--records`` records:

- ``init``: AckInit records (root, XOR, spout task) from a spout task to an acker;
- ``verdict``: Root records (``SPOUT_ACK``) from an acker back to the spout task;
- ``ack``: a bolt's acks, one (root, XOR) per root.

Prints, per kind, CPU nanoseconds per record for packing and for unpacking (the median of
``--runs``) and the bytes per record on the wire.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from crossing import TOPOLOGY, word_count_layout  # the word count's layout, as crossing.py builds

from stormlet.cluster.wire import FrameDecoder, encode_frame
from stormlet.runtime.numbering import TopologyLayout
from stormlet.runtime.protocol import ACK_ACK, ACK_INIT, SPOUT_ACK, AckInit, Root, ack_pairs


def messages(layout: TopologyLayout, records: int, rng: random.Random) -> dict[str, tuple]:
    """One message of each kind, as the executors hand them to the transport."""
    (spout,) = layout.component_tasks["sentences"]
    (count,) = layout.component_tasks["count"]
    (acker,) = layout.acker_tasks
    roots = [rng.getrandbits(64) | 1 for _ in range(records)]
    inits: list = []
    verdicts: list = []
    for root in roots:
        inits.extend(AckInit(root, rng.getrandbits(64), spout))
        verdicts.extend(Root(root))
    acks = ack_pairs()
    for root in roots:
        acks.extend((root, rng.getrandbits(64)))
    return {"init": (ACK_INIT, acker, spout, inits),
            "verdict": (SPOUT_ACK, spout, acker, verdicts),
            "ack": (ACK_ACK, acker, count, acks)}


def cpu_ns_per_record(work, frames: int, records: int) -> float:
    started = time.process_time()
    for _ in range(frames):
        work()
    return (time.process_time() - started) / (frames * records) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    layout = word_count_layout()
    decoder = FrameDecoder(layout, TOPOLOGY)
    print(f"control records between workers: frames of {args.records:,} records, "
          f"median of {args.runs} runs")
    for name, message in messages(layout, args.records, random.Random(42)).items():
        frame = encode_frame([message], TOPOLOGY)
        (decoded,) = decoder.decode(frame)
        assert decoded[:3] == message[:3]
        # Every kind's records as they were packed: the acks too, a flat array of (root, XOR)
        # pairs (protocol.ack_pairs) each way.
        assert decoded[3] == message[3], f"{name}: the records changed on the way"
        packing, unpacking = [], []
        for _ in range(args.runs):
            packing.append(cpu_ns_per_record(lambda: encode_frame([message], TOPOLOGY),
                                             args.frames, args.records))
            unpacking.append(cpu_ns_per_record(lambda: decoder.decode(frame),
                                               args.frames, args.records))
        print(f"  {name:8} pack {statistics.median(packing):6.1f} ns  "
              f"unpack {statistics.median(unpacking):6.1f} ns  "
              f"{len(frame) / args.records:5.1f} bytes per record")


if __name__ == "__main__":
    main()
