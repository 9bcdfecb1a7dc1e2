"""The command line, run as a user runs it: a real `stormlet` process on the example topologies."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = ROOT / "topologies"


def stormlet(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stormlet.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_local_refuses_a_setting_it_cannot_run_with_in_one_line():
    result = stormlet("local", str(TOPOLOGIES / "word_count.py"), "--duration", "1",
                      "-c", "topology.workers=two")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Error: topology 'word_count' cannot run with this config: topology.workers must be a "
        "whole number of workers, at least 1 and at most 2**62 (or None for 1), not 'two'")


@pytest.mark.slow   # runs `stormlet local` for a fixed --duration
def test_word_count_runs_from_the_cli_with_exact_counts(tmp_path):
    sys.path.insert(0, str(TOPOLOGIES))
    try:
        import word_count
    finally:
        sys.path.remove(str(TOPOLOGIES))
    result = stormlet("local", str(TOPOLOGIES / "word_count.py"), "--duration", "6",
                      "-c", f"wordcount.output.dir={tmp_path}", "-c", "wordcount.repeats=500")
    assert result.returncode == 0, result.stderr
    counts: Counter = Counter()
    files = sorted(tmp_path.glob("counts-*.json"))
    assert len(files) == 2  # one per count task
    for path in files:
        part = json.loads(path.read_text())
        assert not set(part) & set(counts), "fields grouping sent one word to two tasks"
        counts.update(part)
    assert counts == word_count.expected_counts(spout_tasks=2, repeats=500)
    summary = result.stdout
    assert "topology word_count" in summary
    sentences = next(line for line in summary.splitlines() if line.startswith("sentences"))
    # tasks, emitted, executed, acked, failed: every sentence acked, none failed
    assert sentences.split()[1:6] == ["2", "5000", "0", "5000", "0"]


@pytest.mark.slow   # runs `stormlet local` for a fixed --duration
def test_reliable_topology_ends_with_every_message_acked():
    result = stormlet("local", str(TOPOLOGIES / "reliable.py"), "--duration", "14",
                      "-c", "reliable.messages=4000", "-c", "topology.message.timeout.secs=2")
    assert result.returncode == 0, result.stderr
    spout_lines = [line for line in result.stderr.splitlines() if "reliable: spout:" in line]
    assert len(spout_lines) == 2
    for line in spout_lines:
        assert "2000/2000 messages acked" in line, line
        assert "0 outstanding" in line, line
    # Failures really happened (explicit fails and drops that time out) and were replayed: the
    # spout's summary row counts both kinds, and it emitted every failed message once more.
    lines = result.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["source"])
    emitted, _executed, acked, failed = map(int, lines[row].split()[2:6])
    label, _, reasons = lines[row + 1].strip().partition(": ")
    assert label == "failures by reason", result.stdout
    by_reason = {kind: int(n) for kind, n in (pair.split("=") for pair in reasons.split(", "))}
    assert by_reason.get("fail", 0) > 0 and by_reason.get("timeout", 0) > 0, result.stdout
    assert failed == sum(by_reason.values()), result.stdout
    assert (acked, emitted) == (4000, 4000 + failed), result.stdout


@pytest.mark.slow   # runs `stormlet local` for a fixed --duration
def test_exclamation_chain_runs():
    result = stormlet("local", str(TOPOLOGIES / "exclamation.py"), "--duration", "2")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]
            if line and not line.startswith(" ")}
    assert int(rows["exclaim2"][3]) > 0  # executed
    assert "!!!!!!" in result.stderr


@pytest.mark.parametrize("source, message", [
    ("def broken(:\n", "syntax error"),
    ("x = 1\n", "defines no module-level `topology`"),
    ("from stormlet import TopologyBuilder\ntopology = TopologyBuilder()\n",
     "not a built Topology"),
    ("from stormlet import TopologyBuilder, Bolt\n"
     "class B(Bolt):\n    outputs = ['x']\n"
     "b = TopologyBuilder()\nb.set_bolt('b', B()).shuffle_grouping('nowhere')\n"
     "topology = b.build()\n", "no component 'nowhere'"),
])
def test_bad_topology_files_get_a_clear_error(tmp_path, source, message):
    path = tmp_path / "bad.py"
    path.write_text(source)
    result = stormlet("local", str(path), "--duration", "1")
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_config_option_is_refused():
    result = stormlet("local", str(TOPOLOGIES / "exclamation.py"), "-c", "no-equals-sign")
    assert result.returncode != 0
    assert "key=value" in result.stderr


@pytest.mark.parametrize("unit", ["stormlet-nimbus.service", "stormlet-supervisor.service"])
def test_the_systemd_units_pass_only_options_their_command_takes(unit):
    import re

    text = (Path(__file__).resolve().parents[2] / "deploy" / "systemd" / unit).read_text()
    (command_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    command = command_line.split()[1]
    options = set(re.findall(r"(--[a-z-]+) ", command_line))
    assert "--bind" in options
    result = stormlet(command, "--help")
    assert result.returncode == 0, result.stderr
    missing = {option for option in options if option not in result.stdout}
    assert not missing, f"{unit} passes {missing}, which `stormlet {command}` does not take"
