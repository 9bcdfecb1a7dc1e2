"""What a topology's Python dependencies cost at submit (issue 52), on a real cluster.

    python benchmarks/environments.py [--runs 3]

ZooKeeper, a nimbus and a supervisor on this machine sharing one environments directory, pip
with no index (the wheels are made here: tests/local_wheels.py). For the versioned topology
(tests/cluster_topologies/versioned/: a spout and a bolt that imports ``stormlet_testdep``) it
prints how long ``stormlet submit`` takes and how long from the submit's start to the bolt's
first tuple, three ways:

- no dependencies: the same topology with its import replaced by a constant, as every topology
  was submitted before environments (the daemons' own interpreter);
- first submit of a dependency set: nimbus builds its environment (the supervisor, on the same
  host, finds it built), and the worker starts in it;
- the same set again, under another name: the environment is reused.

Each way runs ``--runs`` times with a fresh environments directory for the "first" rows (so
each is a real build) and reports the median.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import figures  # noqa: E402
from cluster_support import LoopbackCluster, wait_until  # noqa: E402
from local_wheels import make_testdep_wheels  # noqa: E402

TOPOLOGY = REPO / "tests" / "cluster_topologies" / "versioned" / "topology.py"
# The variant without the dependency: its import replaced by a constant of the same shape.
WITHOUT_IMPORT = ("import stormlet_testdep\n",
                  "class stormlet_testdep:  # noqa: N801\n    VERSION = 'none'\n")


def project(directory: Path, with_dependency: bool) -> Path:
    directory.mkdir(parents=True)
    source = TOPOLOGY.read_text()
    if with_dependency:
        (directory / "requirements.txt").write_text("stormlet_testdep==1.0\n")
        make_testdep_wheels(directory / "wheels")
    else:
        source = source.replace(*WITHOUT_IMPORT)
    (directory / "topology.py").write_text(source)
    return directory / "topology.py"


def first_tuple(out: Path, label: str) -> bool:
    for path in out.glob(f"{label}-*.json"):
        try:
            if json.loads(path.read_text())["seen"] > 0:
                return True
        except (OSError, ValueError, KeyError):
            continue
    return False


def measure(cluster: LoopbackCluster, path: Path, name: str, out: Path) -> tuple[float, float]:
    """(submit seconds, seconds from the submit's start to the bolt's first tuple)."""
    started = time.monotonic()
    result = cluster.cli("submit", str(path), "--name", name, "-c", f"versioned.dir={out}",
                         "-c", f"versioned.label={name}", "-c", "versioned.count=1000000",
                         "-c", "versioned.interval=0.01")
    submitted = time.monotonic() - started
    if result.returncode:
        raise SystemExit(result.stderr)
    wait_until(lambda: first_tuple(out, name), 120, f"{name}'s first tuple")
    to_first = time.monotonic() - started
    cluster.cli("kill", name, "--wait", "0")
    wait_until(lambda: not cluster.topology_workers(name), 40, f"{name}'s workers to exit")
    return submitted, to_first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    figures.add_flag(parser)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stormlet-environments-"))
    rows: dict[str, list[tuple[float, float]]] = {"no dependencies (as before)": [],
                                                   "first submit: environment built": [],
                                                   "same set again: environment reused": []}
    try:
        for run in range(args.runs):
            # A directory of environments per run: each first submit builds.
            with LoopbackCluster(base / f"run{run}") as cluster:
                cluster.daemon_env = {"STORMLET_ENVIRONMENTS_DIR": str(base / f"envs{run}"),
                                      "STORMLET_PIP_INDEX_URL": "none"}
                cluster.add_nimbus()
                cluster.add_supervisor("s1", 1)
                cluster.wait_for_leader()
                out = base / f"out{run}"
                out.mkdir()
                plain = project(base / f"plain{run}", with_dependency=False)
                needing = project(base / f"needing{run}", with_dependency=True)
                time.sleep(2)   # the supervisor registered
                labels = list(rows)
                rows[labels[0]].append(measure(cluster, plain, f"plain{run}", out))
                rows[labels[1]].append(measure(cluster, needing, f"first{run}", out))
                rows[labels[2]].append(measure(cluster, needing, f"again{run}", out))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"environments: the versioned topology on a loopback cluster, median of {args.runs} "
          f"runs")
    print(f"{'submit':<38}{'submit s':>10}{'to first tuple s':>18}")
    for label, values in rows.items():
        print(f"{label:<38}{statistics.median(v[0] for v in values):>10.1f}"
              f"{statistics.median(v[1] for v in values):>18.1f}")
    # LATEST.md's row (benchmarks/diary.py renders it from the records).
    built, reused, undeclared = (rows[label] for label in ("first submit: environment built",
                                                      "same set again: environment reused",
                                                      "no dependencies (as before)"))
    figures.Recorder("environments", enabled=args.record).record(
        "a topology declaring one package on a one-machine cluster: `stormlet submit` and "
        "submit to first tuple, its environment built by the submit / reused / declaring nothing",
        " / ".join(f"{statistics.median(v[0] for v in each):.1f} and "
                   f"{statistics.median(v[1] for v in each):.1f}"
                   for each in (built, reused, undeclared)),
        unit="s", detail=f"medians of {args.runs} runs")


if __name__ == "__main__":
    main()
