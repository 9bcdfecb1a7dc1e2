"""The production layout as documented: the systemd units get every setting from the
environment file, ZooKeeper's listening address included, and pass only options that exist; the
README names only commands that exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click

from stormlet.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
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


def role_table(readme: str) -> list[list[str]]:
    """The rows (cells) of the README's table of roles: caller, role, may."""
    start = readme.index("| caller | role | may |")
    rows = []
    for line in readme[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_role_table_names_only_commands_that_exist():
    commands = set(cli.list_commands(click.Context(cli)))
    rows = role_table((ROOT / "README.md").read_text())
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

