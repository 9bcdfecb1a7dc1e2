"""Topology code packages: what goes in, what comes out, and what is refused."""

from __future__ import annotations

import io
import json
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from stormlet.cluster.code import (
    CodeError,
    digest,
    inspect_package,
    package_topology,
    unpack,
    verify,
)


def test_a_package_carries_the_file_and_its_python_neighbours(tmp_path):
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "__pycache__").mkdir()
    (src / "helpers.py").write_text("WORDS = ['a', 'b']\n")
    (src / "lib" / "more.py").write_text("X = 1\n")
    (src / "__pycache__" / "junk.py").write_text("boom\n")
    (src / "data.csv").write_text("not shipped\n")
    (src / "topo.py").write_text(
        "from helpers import WORDS\n"
        "from stormlet import Spout, Bolt, TopologyBuilder\n"
        "class S(Spout):\n    outputs = ['w']\n"
        "class B(Bolt):\n    def execute(self, t): pass\n"
        "b = TopologyBuilder()\nb.set_spout('s', S(), parallelism=2)\n"
        "b.set_bolt('b', B(), parallelism=3).set_num_tasks(6).shuffle_grouping('s')\n"
        "topology = b.build()\nconfig = {'topology.workers': 2}\n")
    entry = unpack(package_topology(src / "topo.py"), tmp_path / "out")
    assert entry == tmp_path / "out" / "topo.py"
    shipped = {p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.py")}
    assert shipped == {"topo.py", "helpers.py", "lib/more.py"}
    report = inspect_package(entry)
    assert report["config"] == {"topology.workers": 2}
    assert report["components"]["b"] == {"spout": False, "tasks": 6, "executors": 3,
                                         "inputs": ["s"]}


def test_the_same_code_packs_to_the_same_bytes(tmp_path):
    # A backfill's workers keep one unpacked copy per digest: one per job would pile up.
    (tmp_path / "topo.py").write_text("topology = None\n")
    first = package_topology(tmp_path / "topo.py")
    time.sleep(2.1)  # a zip entry's time has a resolution of two seconds
    assert package_topology(tmp_path / "topo.py") == first
    (tmp_path / "topo.py").write_text("topology = 1\n")
    assert digest(package_topology(tmp_path / "topo.py")) != digest(first)


def test_inspecting_a_broken_topology_reports_the_loaders_message(tmp_path):
    (tmp_path / "t.py").write_text("topology = 42\n")
    with pytest.raises(CodeError, match="not a built Topology"):
        inspect_package(tmp_path / "t.py")


def test_a_package_whose_member_escapes_its_directory_is_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../../evil.py", "print('pwned')\n")
        archive.writestr("stormlet-manifest.json", '{"entry": "evil.py"}')
    with pytest.raises(CodeError, match="escapes"):
        unpack(buffer.getvalue(), tmp_path / "out")
    # Where the member points, two levels above the target directory: nothing written there, nor
    # anywhere under the target.
    assert not (tmp_path / "out" / "../../evil.py").resolve().exists()
    assert not list((tmp_path / "out").rglob("*"))


def test_something_that_is_not_a_package_is_refused(tmp_path):
    with pytest.raises(CodeError, match="not a stormlet code package"):
        unpack(b"definitely not a zip", tmp_path / "out")


def package_with_manifest(entry: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("topo.py", "topology = None\n")
        archive.writestr("stormlet-manifest.json", json.dumps({"entry": entry}))
    return buffer.getvalue()


@pytest.mark.parametrize("entry", ["../topo.py", "/etc/passwd", "sub/topo.py", "missing.py",
                                   "stormlet-manifest.json", 7])
def test_a_manifest_whose_entry_is_not_a_python_file_in_the_package_is_refused(tmp_path, entry):
    with pytest.raises(CodeError, match="manifest names"):
        unpack(package_with_manifest(entry), tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*"))


def test_bytes_that_do_not_match_the_records_digest_are_refused(tmp_path):
    (tmp_path / "t.py").write_text("topology = None\n")
    package = package_topology(tmp_path / "t.py")
    verify(package, digest(package), "t-1-abcdef")
    tampered = package[:-1] + bytes([package[-1] ^ 1])
    with pytest.raises(CodeError, match="does not match the digest"):
        verify(tampered, digest(package), "t-1-abcdef")
    with pytest.raises(CodeError, match="holds no code digest"):
        verify(package, None, "t-1-abcdef")


def processes_with(marker: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_inspection_kills_what_the_topology_started_and_does_not_wait_for_it(tmp_path):
    marker = f"stormlet-inspect-leftover-{uuid.uuid4().hex}"
    (tmp_path / "t.py").write_text(
        "import subprocess, sys\n"
        # Inherits the inspection's stdout: a reader of a pipe would wait for it to close.
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}])\n"
        + BUILT_TOPOLOGY)
    report = inspect_package(tmp_path / "t.py", timeout=30)
    assert report["ok"]
    # SIGKILL was sent before inspect_package returned; the kernel takes a moment to finish it.
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


def test_inspection_sees_none_of_the_daemons_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLET_TEST_DAEMON_SECRET", "hunter2")
    (tmp_path / "t.py").write_text(
        "import os\n" + BUILT_TOPOLOGY + "config = {'seen': sorted(os.environ)}\n")
    seen = inspect_package(tmp_path / "t.py")["config"]["seen"]
    assert "STORMLET_TEST_DAEMON_SECRET" not in seen
    assert "PATH" in seen


def test_inspection_runs_under_a_memory_limit(tmp_path):
    (tmp_path / "t.py").write_text("hog = bytearray(8 * 1024 ** 3)\n" + BUILT_TOPOLOGY)
    with pytest.raises(CodeError, match="MemoryError"):
        inspect_package(tmp_path / "t.py")


BUILT_TOPOLOGY = (
    "from stormlet import Spout, TopologyBuilder\n"
    "class S(Spout):\n    outputs = ['w']\n"
    "b = TopologyBuilder()\nb.set_spout('s', S())\ntopology = b.build()\n")
