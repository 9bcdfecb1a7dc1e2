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
