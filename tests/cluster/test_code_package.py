"""Topology code packages: what goes in, what comes out, and what is refused."""

from __future__ import annotations

import io
import json
import os
import re
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from support import wait_until

from stormlet.cluster import code
from stormlet.cluster.code import (
    MANIFEST,
    CodeError,
    digest,
    inspect_package,
    package_topology,
    unpack,
    verify,
)


def test_a_package_carries_the_file_and_its_neighbours(tmp_path):
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "__pycache__").mkdir()
    (src / "helpers.py").write_text("WORDS = ['a', 'b']\n")
    (src / "lib" / "more.py").write_text("X = 1\n")
    (src / "__pycache__" / "junk.py").write_text("boom\n")
    (src / "data.csv").write_text("shipped too\n")
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
    assert unpacked_files(tmp_path / "out") == {"topo.py", "helpers.py", "lib/more.py",
                                                "data.csv"}
    report = inspect_package(entry)
    assert report["config"] == {"topology.workers": 2}
    assert report["components"]["b"] == {"spout": False, "tasks": 6, "executors": 3,
                                         "inputs": ["s"]}


def unpacked_files(directory: Path) -> set[str]:
    """Every file under ``directory`` but the manifest, by its path relative to it."""
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*")
            if p.is_file() and p.name != MANIFEST}


def project(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    """A project directory holding a topology file ``topo.py`` and ``files``; its topology."""
    base = tmp_path / "project"
    for name, content in {"topo.py": "topology = None\n", **files}.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return base / "topo.py"


def shipped(topology_file: Path, tmp_path: Path) -> set[str]:
    out = tmp_path / f"out-{uuid.uuid4().hex}"
    unpack(package_topology(topology_file), out)
    return unpacked_files(out)


def test_every_file_of_the_project_is_packaged_byte_for_byte(tmp_path):
    # The bolt that opens data/stopwords.txt beside its topology file (issue 52) finds it.
    blob = bytes(range(256)) * 40
    topo = project(tmp_path, {"data/stopwords.txt": "a\nthe\n", "data/nested/table.bin": blob,
                              "README": "words\n", ".env.example": "X=1\n",
                              "run.sh": "#!/bin/sh\necho hi\n"})
    (topo.parent / "run.sh").chmod(0o755)
    out = tmp_path / "out"
    entry = unpack(package_topology(topo), out)
    assert unpacked_files(out) == {"topo.py", "data/stopwords.txt", "data/nested/table.bin",
                                   "README", ".env.example", "run.sh"}
    assert (entry.parent / "data" / "stopwords.txt").read_text() == "a\nthe\n"
    assert (out / "data" / "nested" / "table.bin").read_bytes() == blob
    assert os.access(out / "run.sh", os.X_OK), "what was executable stays executable"
    assert not os.access(out / "README", os.X_OK)


def test_the_defaults_leave_out_version_control_virtualenvs_caches_and_build_outputs(tmp_path):
    left_out = [".git/HEAD", ".hg/store/x", ".venv/bin/python", "venv/lib/site.py",
                "env/pyvenv.cfg", "env/lib/site.py",   # a virtualenv by its marker, any name
                "__pycache__/topo.cpython-311.pyc", "lib/__pycache__/x.cpython-311.pyc",
                "old.pyc", "build/lib/topo.py", "dist/topo-1.0.tar.gz",
                "topo.egg-info/PKG-INFO", ".tox/py311/x", ".pytest_cache/v/x",
                "node_modules/left-pad/index.js"]
    kept = ["lib/helper.py", "data/build.txt", "builder/x.txt", "lib/dist.py", ".github/ci.yml"]
    topo = project(tmp_path, {name: "x\n" for name in left_out + kept})
    assert shipped(topo, tmp_path) == {"topo.py", *kept}


def test_a_stormletignore_excludes_in_gitignore_syntax_negation_included(tmp_path):
    ignore = ("# scratch and big inputs stay home\n"
              "*.csv\n"
              "!keep.csv\n"            # taken back
              "/scratch/\n"            # anchored: only the top one
              "logs/\n"                # any directory of that name
              "!build/\n"              # a default taken back
              "private/\n"
              "!private/ok.txt\n")     # as in git: not inside an excluded directory
    topo = project(tmp_path, {".stormletignore": ignore, "a.csv": "1\n", "data/b.csv": "2\n",
                              "data/keep.csv": "3\n", "scratch/x.txt": "4\n",
                              "data/scratch/y.txt": "5\n", "logs/z.log": "6\n",
                              "data/logs/w.log": "7\n", "build/gen.py": "8\n",
                              "private/key": "9\n", "private/ok.txt": "10\n"})
    assert shipped(topo, tmp_path) == {"topo.py", ".stormletignore", "data/keep.csv",
                                       "data/scratch/y.txt", "build/gen.py"}


def test_a_topology_file_its_own_ignore_file_excludes_is_refused(tmp_path):
    topo = project(tmp_path, {".stormletignore": "*.py\n"})
    with pytest.raises(CodeError, match="excluded from its own package.*!topo.py"):
        package_topology(topo)


def test_links_inside_the_project_are_followed_and_links_out_of_it_refused(tmp_path):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not in the project\n")
    topo = project(tmp_path, {"data/real.txt": "real\n", "tables/t.txt": "t\n"})
    base = topo.parent
    (base / "alias.txt").symlink_to("data/real.txt")
    (base / "tables-link").symlink_to("tables", target_is_directory=True)
    out = tmp_path / "out"
    unpack(package_topology(topo), out)
    assert (out / "alias.txt").read_text() == "real\n"
    assert (out / "tables-link" / "t.txt").read_text() == "t\n"

    (base / "leak.txt").symlink_to(outside)
    with pytest.raises(CodeError, match=r"leak.txt is a symbolic link to .*elsewhere.txt, "
                                        r"outside the project directory"):
        package_topology(topo)
    (base / ".stormletignore").write_text("leak.txt\n")   # an ignored link is never followed
    assert "leak.txt" not in shipped(topo, tmp_path)

    (base / "dangling").symlink_to("no-such-file")
    with pytest.raises(CodeError, match="dangling is a symbolic link to no-such-file, which "
                                        "does not exist"):
        package_topology(topo)
    (base / "dangling").unlink()
    (base / "tables" / "loop").symlink_to("..", target_is_directory=True)
    with pytest.raises(CodeError, match="loop is a symbolic link to .., a directory that "
                                        "contains it"):
        package_topology(topo)


def test_a_package_over_the_size_limit_names_the_limit_its_size_and_largest_files(
        tmp_path, monkeypatch):
    monkeypatch.setattr(code, "MAX_PACKAGE_BYTES", 100 * 1024)
    sizes = {"data/model.bin": 60, "data/table.bin": 30, "a.bin": 20, "b.bin": 10,
             "c.bin": 8, "small.bin": 1}   # KiB, of noise: compressed, they stay that size
    topo = project(tmp_path, {name: os.urandom(kib * 1024) for name, kib in sizes.items()})
    with pytest.raises(CodeError) as refused:
        package_topology(topo)
    message = str(refused.value)
    assert f"the code package of {topo.parent} is 129." in message
    assert "over the limit of 100.0 KiB" in message
    assert re.search(r"largest files compressed: data/model.bin \(60.0 KiB\), data/table.bin "
                     r"\(30.0 KiB\), a.bin \(20.0 KiB\), b.bin \(10.0 KiB\), c.bin "
                     r"\(8.0 KiB\)\.", message), message
    assert "small.bin" not in message
    assert ".stormletignore" in message and "blob store" in message
    # Listed in .stormletignore, it fits.
    (topo.parent / ".stormletignore").write_text("data/model.bin\n")
    assert len(package_topology(topo)) < 100 * 1024


def test_a_package_that_would_unpack_over_the_limit_is_refused_before_it_is_zipped(
        tmp_path, monkeypatch):
    monkeypatch.setattr(code, "MAX_UNPACKED_BYTES", 1024 * 1024)
    topo = project(tmp_path, {"zeros.bin": bytes(2 * 1024 * 1024)})   # compresses to little
    with pytest.raises(CodeError, match=r"unpacks to 2.0 MiB, over the limit of 1.0 MiB; its "
                                        r"largest files: zeros.bin \(2.0 MiB\), topo.py"):
        package_topology(topo)


def test_a_project_with_more_files_than_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(code, "MAX_FILES", 3)
    topo = project(tmp_path, {f"data/{n}.txt": "x\n" for n in range(3)})
    with pytest.raises(CodeError, match=r"more than 3 files to package .*\.stormletignore"):
        package_topology(topo)
    (topo.parent / ".stormletignore").write_text("data/[12].txt\n")
    assert shipped(topo, tmp_path) == {"topo.py", ".stormletignore", "data/0.txt"}


def test_the_digest_covers_every_file_not_only_the_python(tmp_path):
    topo = project(tmp_path, {"data/words.txt": "alpha beta\n"})
    first = digest(package_topology(topo))
    (topo.parent / "data" / "words.txt").write_text("alpha gamma\n")
    second = digest(package_topology(topo))
    assert second != first
    (topo.parent / "data" / "new.txt").write_text("\n")
    assert digest(package_topology(topo)) not in {first, second}
    # What is ignored is not in the package, so it does not change the digest.
    (topo.parent / "__pycache__").mkdir()
    before = package_topology(topo)
    (topo.parent / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert package_topology(topo) == before


def test_a_streamparse_topology_is_inspected_in_its_project_root(tmp_path):
    # As `sparse run` runs it: a relative path resolves against the project's root, where its
    # config.json is, and so it does on workers (cluster/project_files.py).
    root = tmp_path / "wordcount"
    (root / "topologies").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "config.json").write_text(json.dumps({"topology_specs": "topologies/"}))
    (root / "data" / "words.txt").write_text("dog cat\n")
    (root / "topologies" / "wc.py").write_text(
        "from streamparse import Spout, Topology\n"
        "WORDS = open('data/words.txt').read().split()\n"
        "class Words(Spout):\n"
        "    outputs = ['word']\n"
        "    def next_tuple(self):\n"
        "        self.emit([WORDS[0]])\n"
        "class WordCount(Topology):\n"
        "    words = Words.spec()\n")
    entry = unpack(package_topology(root / "topologies" / "wc.py"), tmp_path / "out")
    assert entry == tmp_path / "out" / "topologies" / "wc.py"
    assert inspect_package(entry)["ok"]


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
    wait_until(lambda: processes_with(marker) == [], 10, "the leftover process to end")


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
