"""The production layout as documented: the systemd units get every setting from the
environment file, ZooKeeper's listening address included, and pass only options that exist; the
security guide names only commands that exist; and deploy/demo-hosts.sh brings up a cluster
across hosts (network namespaces) that runs a topology, and takes it all down again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

# What tests/multi_host.py's hosts need (root, ip, nft) covers what the demo hosts need.
from multi_host import multi_host_available, unavailable_reason
from support import wait_until
from zookeeper_server import zookeeper_available

from stormlet.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def env_file(path: Path) -> dict[str, str]:
    """The settings of a systemd EnvironmentFile (KEY=VALUE lines; # comments)."""
    settings = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


def exec_start(unit: Path, settings: dict[str, str]) -> list[str]:
    """A unit's ExecStart as systemd runs it: each ``${VAR}`` replaced by one word."""
    line = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    words = line.removeprefix("ExecStart=").split()
    return [re.sub(r"\$\{(\w+)\}", lambda m: settings[m.group(1)], word) for word in words]


def test_every_unit_reads_the_environment_file_and_it_sets_every_variable():
    settings = env_file(DEPLOY / "stormlet.env")
    assert UNITS
    for unit in UNITS:
        text = unit.read_text()
        assert "EnvironmentFile=/etc/stormlet/stormlet.env" in text, unit.name
        missing = set(re.findall(r"\$\{(\w+)\}", text)) - set(settings)
        assert not missing, f"{unit.name} uses {missing}, which stormlet.env does not set"


def test_the_zookeeper_unit_listens_where_the_environment_file_says():
    settings = {**env_file(DEPLOY / "stormlet.env"), "STORMLET_ZK_ADDRESS": "10.0.0.1",
                "STORMLET_ZK_PORT": "2182"}
    args = exec_start(DEPLOY / "systemd" / "stormlet-zookeeper.service", settings)
    assert args[1:3] == ["start", "--foreground"]
    assert args[args.index("--address") + 1] == "10.0.0.1"
    assert args[args.index("--port") + 1] == "2182"


def test_the_zookeeper_script_documents_its_address():
    usage = subprocess.run(["bash", str(DEPLOY / "zookeeper.sh"), "--help"], capture_output=True,
                           text=True, check=True).stdout
    explained = [line for line in usage.splitlines() if line.strip().startswith("--address")]
    assert explained and "127.0.0.1" in usage and "0.0.0.0" in usage, usage
    assert "--address" in (DEPLOY / "README.md").read_text()


def role_table(guide: str) -> list[list[str]]:
    """The rows (cells) of the security guide's table of roles: caller, role, may."""
    start = guide.index("| caller | role | may |")
    rows = []
    for line in guide[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_role_table_names_only_commands_that_exist():
    commands = set(cli.list_commands(click.Context(cli)))
    rows = role_table((ROOT / "docs" / "howto" / "security.md").read_text())
    assert len(rows) >= 4
    for caller, role, may in rows:
        for span in re.findall(r"`([^`]+)`", may):
            if span.startswith("/"):
                continue   # a URL path of the UI
            program, _, command = span.partition(" ")
            assert program == "stormlet" and command.split()[0] in commands, \
                f"the {role} row names {span!r}, which is not a stormlet command"


def test_every_unit_passes_only_options_its_command_has():
    settings = env_file(DEPLOY / "stormlet.env")
    zookeeper_usage = subprocess.run(["bash", str(DEPLOY / "zookeeper.sh"), "--help"],
                                     capture_output=True, text=True, check=True).stdout
    for unit in UNITS:
        args = exec_start(unit, settings)
        options = [word for word in args if word.startswith("--")]
        if args[0].endswith("/stormlet"):
            command = cli.get_command(click.Context(cli), args[1])
            assert command is not None, f"{unit.name} runs stormlet {args[1]}, which is no command"
            known = {opt for param in command.params for opt in param.opts + param.secondary_opts}
        else:
            assert args[0].endswith("/zookeeper.sh"), unit.name
            known = set(re.findall(r"--[a-z-]+", zookeeper_usage))
        assert set(options) <= known, f"{unit.name} passes {set(options) - known}"


# ----- deploy/demo-hosts.sh: the cluster of real machines, made of network namespaces

DEMO = DEPLOY / "demo-hosts.sh"


def free_subnet() -> str:
    """A /24 of 10.78.x that no address or route on this machine is in (not the demo's default,
    10.78.0, which an operator's demo may hold)."""
    used = _ip("-o", "-4", "addr", "show") + _ip("-4", "route", "show")
    return next(f"10.78.{k}" for k in range(100, 255) if f"10.78.{k}." not in used)


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def leftovers(prefix: str) -> list[str]:
    """The namespaces and links named ``prefix``-something."""
    names = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]
    names += re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show"), re.M)
    return [name for name in names if name.startswith(prefix + "-")]


def running_workers(listing: str, name: str) -> int:
    """How many workers ``stormlet list`` shows topology ``name`` active with (0: not)."""
    for line in listing.splitlines():
        fields = line.split()
        if fields[:2] == [name, "active"]:
            return int(fields[2])
    return 0


def acking_hosts(demo: Path, topology: str) -> set[str]:
    """The supervisors whose workers of ``topology`` beat in the last 5 s and have had spout
    tuples acked: the supervisors' data dirs are on this machine's disk."""
    hosts = set()
    for path in demo.glob("supervisor*/heartbeats/*.json"):
        try:
            beat = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (beat.get("topology_id", "").startswith(topology + "-")
                and time.time() - beat.get("time", 0) < 5
                and beat["metrics"].get("sentences", {}).get("acked", 0) > 0):
            hosts.add(path.parent.parent.name)
    return hosts


@pytest.mark.multi_host
@pytest.mark.skipif(not zookeeper_available(),
                    reason="ZooKeeper is not installed: run deploy/zookeeper.sh install")
@pytest.mark.skipif(not multi_host_available(),
                    reason=f"no hosts can be made here: {unavailable_reason()}")
def test_the_demo_hosts_run_a_topology_submitted_from_this_machine(tmp_path):
    """`up 3`: ZooKeeper, nimbus and the UI on host 1, a supervisor on hosts 2 and 3; word
    count submitted from this machine through the bridge, with the secret, runs a worker on each
    supervisor's host; `down` leaves no namespace, link or directory behind."""
    prefix = f"sldt{os.getpid() % 1_000_000}"   # not the default: an operator's demo may be up
    subnet = free_subnet()
    demo = tmp_path / "demo"
    # The stormlet the script runs on every host is this checkout's, run by this interpreter.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "stormlet").write_text(f'#!/bin/sh\nexec {sys.executable} -m stormlet.cli "$@"\n')
    (bin_dir / "stormlet").chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if k not in ("STORMLET_ZK",
                                                                  "STORMLET_SECRET_FILE")},
           "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")])),
           "STORMLET_DEMO_PREFIX": prefix, "STORMLET_DEMO_SUBNET": subnet}

    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(DEMO), *args], env=env, capture_output=True,
                              text=True, timeout=180)

    zk, secret = f"{subnet}.11:2181", demo / "cluster.secret"

    def stormlet(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["stormlet", "--log-level", "WARNING", *args, "--zk", zk,
                               "--secret-file", str(secret)], env=env, capture_output=True,
                              text=True, timeout=120)

    try:
        up = script("up", "3", str(demo))
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"http://{subnet}.11:8080/" in up.stdout, up.stdout
        submit = stormlet("submit", str(ROOT / "topologies" / "word_count.py"),
                          "-c", "topology.workers=2")
        assert submit.returncode == 0 and "submitted word_count" in submit.stdout, submit.stderr
        wait_until(lambda: running_workers(stormlet("list").stdout, "word_count") == 2, 60,
                   "stormlet list to show word_count active with 2 workers", interval=1)
        wait_until(lambda: acking_hosts(demo, "word_count") == {"supervisor2", "supervisor3"},
                   60, "a worker acking on each supervisor's host", interval=1)
        status = script("status")
        assert status.returncode == 0 and status.stdout.count("worker (") == 2, status.stdout
        kill = stormlet("kill", "word_count", "--wait", "1")
        assert kill.returncode == 0, kill.stderr
        wait_until(lambda: "no topologies running" in stormlet("list").stdout, 60,
                   "word_count to leave the list", interval=1)
    except BaseException:
        for log in sorted(demo.glob("*.log")):
            print(f"==== {log.name}\n{log.read_text()[-3000:]}")
        raise
    finally:
        down = script("down")
        left = leftovers(prefix)
        if down.returncode != 0 or left:   # nothing outlives the test, whatever down did
            subprocess.run(["bash", str(DEPLOY / "netns.sh"), "cleanup", prefix + "-"],
                           capture_output=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not left, f"down left {left}"
    assert not demo.exists()
    again = script("down")
    assert again.returncode == 0, again.stderr
