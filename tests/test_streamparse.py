"""streamparse projects run unmodified: the projects under streamparse_projects/ are written as
streamparse projects (config.json, topologies/, src/, ``from streamparse import ...``) and run
through stormlet's loader, in a LocalCluster or through ``stormlet local``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from stormlet.loader import TopologyFileError, load_topology_file
from support import running, wait_until

PROJECTS = Path(__file__).resolve().parent / "streamparse_projects"
WORDCOUNT = PROJECTS / "wordcount"
FEATURES = PROJECTS / "features"


def events(directory: Path, component: str | None = None) -> list[dict]:
    """Every event the project's recorder wrote (of one component's tasks, if named)."""
    found = []
    for path in sorted(directory.glob(f"{component or '*'}-*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return found


def run_cli(*args: str, cwd: Path, env_path: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    env = None
    if env_path is not None:
        import os
        env = dict(os.environ, PYTHONPATH=env_path)
    return subprocess.run([sys.executable, "-m", "stormlet", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_quickstart_word_count_runs_from_its_project_root_with_stormlet_local(tmp_path):
    # A package named streamparse that cannot be imported stands in for the real one: stormlet
    # must run the topology itself, whatever streamparse is installed.
    impostor = tmp_path / "site" / "streamparse"
    impostor.mkdir(parents=True)
    (impostor / "__init__.py").write_text("raise ImportError('the real streamparse was used')\n")
    result = run_cli("local", "topologies/wordcount.py", "--duration", "2", cwd=WORDCOUNT,
                     env_path=str(impostor.parent))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
            if line.startswith(("word_spout", "count_bolt"))}
    assert rows["count_bolt"][1] == "2"                 # par=2
    executed = int(rows["count_bolt"][3])
    assert executed > 1000 and int(rows["count_bolt"][4]) == executed   # auto-acked
    # self.logger works, from the counting tasks
    assert "INFO streamparse.count_bolt: counted [1,000] words" in result.stderr


def test_a_reliable_spout_replays_what_a_bolt_fails_or_raises_on_and_gives_up_after_max_fails(
        tmp_path):
    topology, conf = load_topology_file(FEATURES / "topologies" / "reliable.py")
    assert conf == {"topology.message.timeout.secs": 20}
    conf.update({"test.output.dir": str(tmp_path), "test.count": 100})
    with running(topology, conf, name="reliable"):
        wait_until(lambda: len({e["n"] for e in events(tmp_path, "numbers")
                                if e["event"] == "ack"}) == 100, 30, "every number acked")
    spout = events(tmp_path, "numbers")
    acks = Counter(e["n"] for e in spout if e["event"] == "ack")
    fails = Counter(e["n"] for e in spout if e["event"] == "fail")
    assert acks == Counter(range(100))                       # each acked exactly once
    # raised on once (n % 10 == 3) or failed once by hand (n % 10 == 7): one replay each; 42 is
    # failed every time: replayed max_fails (2) times, then given up (acked by the spout)
    assert fails == Counter({n: 1 for n in range(100) if n % 10 in (3, 7)} | {42: 3})
    seen = Counter(e["n"] for e in events(tmp_path, "sink"))
    assert set(seen) == set(range(100)) - {42}
    assert all(e["source"] == "flaky" and e["stream"] == "default"
               for e in events(tmp_path, "sink"))
