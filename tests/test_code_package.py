"""Topology code packages: what goes in, what comes out, and what is refused."""

from __future__ import annotations

import io
import zipfile

import pytest

from stormlet.cluster.code import CodeError, inspect_package, package_topology, unpack


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
