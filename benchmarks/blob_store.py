"""The blob store's transfers on a real one-machine cluster: ZooKeeper, two nimbuses and a
supervisor, with a blob of ``--mib`` MiB of random bytes.

    python benchmarks/blob_store.py [--mib 512]

Prints how long `stormlet blob upload` took and the command's peak resident memory, how long
after it the standby nimbus held its copy, and each nimbus's peak resident memory: chunks of
4 MiB, so none of them holds the blob whole (stormlet/cluster/blob_transfer.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from cluster_support import LoopbackCluster, wait_until  # noqa: E402


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="the blob's size in MiB")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stormlet-blob-bench-"))
    try:
        blob = base / "blob.bin"
        digest = hashlib.sha256()
        with open(blob, "wb") as f:
            for _ in range(args.mib):
                chunk = os.urandom(1 << 20)
                digest.update(chunk)
                f.write(chunk)
        with LoopbackCluster(base) as cluster:
            cluster.add_nimbus()
            cluster.add_nimbus()
            cluster.add_supervisor("s1", 1)
            cluster.wait_for_leader()
            started = time.monotonic()
            upload = subprocess.run(
                ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "stormlet.cli", "--log-level",
                 "WARNING", "blob", "upload", "bench", str(blob), "--zk", cluster.zk.hosts],
                capture_output=True, text=True, cwd=REPO, check=True)
            took = time.monotonic() - started
            print(f"upload of {args.mib} MiB: {took:.1f} s ({args.mib / took:.0f} MiB/s), the "
                  f"command's peak resident memory {int(upload.stderr.split()[-1]) / 1024:.0f} MiB")
            copies = [base / f"nimbus{n}" / "blobs" / digest.hexdigest() for n in (0, 1)]
            started = time.monotonic()
            wait_until(lambda: all(p.is_file() for p in copies), 300, "the standby's copy")
            print(f"the standby held its copy {time.monotonic() - started:.1f} s after the upload")
            for daemon in cluster.nimbuses:
                assert daemon.process is not None   # started above
                print(f"{daemon.name}: peak resident memory "
                      f"{peak_kib(daemon.process.pid) / 1024:.0f} MiB")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
