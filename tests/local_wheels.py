"""Small wheels made on the spot, for tests that install packages with pip without the internet
(nor ``wheel`` or ``build``): a wheel is a zip with its files, ``METADATA``, ``WHEEL`` and a
``RECORD`` of every file's SHA-256 (PEP 427), written here by hand.

    make_testdep_wheels(tmp_path / "wheels")   # stormlet_testdep 1.0 and 2.0
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

TESTDEP = "stormlet_testdep"
TESTDEP_VERSIONS = ("1.0", "2.0")


def make_wheel(directory: Path, name: str, version: str, files: dict[str, str],
               requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of ``name`` ``version`` holding ``files`` (path in the wheel -> text)
    and depending on ``requires``, written into ``directory``; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires)
    contents = {**files, f"{dist_info}/METADATA": metadata,
                f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: stormlet-tests\n"
                                      "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    path = directory / f"{name}-{version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, text in contents.items():
            data = text.encode()
            archive.writestr(_fixed_time(member), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{member},sha256={digest.decode()},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        archive.writestr(_fixed_time(f"{dist_info}/RECORD"), "\n".join(record) + "\n")
    return path


def _fixed_time(member: str) -> zipfile.ZipInfo:
    """A member dated 1980: the same wheel is the same bytes whenever it is made (its digest is
    part of its environment's key)."""
    info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def make_testdep_wheels(directory: Path, versions: tuple[str, ...] = TESTDEP_VERSIONS) -> Path:
    """``stormlet_testdep`` in each of ``versions``, its module holding ``VERSION``; returns
    ``directory``."""
    for version in versions:
        make_wheel(directory, TESTDEP, version,
                   {f"{TESTDEP}/__init__.py": f"VERSION = {version!r}\n"})
    return directory


GATED = "stormlet_gated"
# The in-tree build backend of make_gated_sdist's package: pip runs it in a build environment of
# its own, where nothing is installed, so it writes the wheel with the standard library alone.
_GATED_BACKEND = '''\
import base64, hashlib, os, time, zipfile

GATE, NAME, VERSION, TIMEOUT = {gate!r}, {name!r}, {version!r}, {timeout!r}


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    deadline = time.monotonic() + TIMEOUT
    while not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.1)
    info = f"{{NAME}}-{{VERSION}}.dist-info"
    files = {{f"{{NAME}}/__init__.py": f"VERSION = {{VERSION!r}}\\n",
             f"{{info}}/METADATA": "Metadata-Version: 2.1\\n"
                                   f"Name: {{NAME}}\\nVersion: {{VERSION}}\\n",
             f"{{info}}/WHEEL": "Wheel-Version: 1.0\\nGenerator: stormlet-tests\\n"
                              "Root-Is-Purelib: true\\nTag: py3-none-any\\n"}}
    wheel = f"{{NAME}}-{{VERSION}}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as archive:
        for member, text in files.items():
            data = text.encode()
            archive.writestr(member, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{{member}},sha256={{digest.decode()}},{{len(data)}}")
        record.append(f"{{info}}/RECORD,,")
        archive.writestr(f"{{info}}/RECORD", "\\n".join(record) + "\\n")
    return wheel
'''


def make_gated_sdist(directory: Path, version: str, gate: Path, timeout: float = 120.0) -> Path:
    """A source distribution of ``stormlet_gated`` ``version`` in ``directory`` whose build
    waits until the file ``gate`` exists (at most ``timeout`` seconds): an environment build
    that lasts until a test lets it end, whatever the machine's speed. pip builds it with its
    in-tree backend (PEP 517 ``backend-path``), needing no setuptools and no index; give
    daemons ``PIP_NO_CACHE_DIR`` so that pip does not reuse a wheel it built before."""
    import io
    import tarfile

    directory.mkdir(parents=True, exist_ok=True)
    root = f"{GATED}-{version}"
    files = {
        "pyproject.toml": f'[build-system]\nrequires = []\nbuild-backend = "gate_backend"\n'
                          f'backend-path = ["."]\n\n[project]\nname = "{GATED}"\n'
                          f'version = "{version}"\n',
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {GATED}\nVersion: {version}\n",
        "gate_backend.py": _GATED_BACKEND.format(gate=str(gate), name=GATED, version=version,
                                                 timeout=timeout),
    }
    path = directory / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path
