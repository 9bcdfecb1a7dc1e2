"""Topology names and ids, and blob keys: what they may look like.

An id (and a blob key) becomes a ZooKeeper node's name and a directory or file name on every node,
so one that came from a request or from ZooKeeper is checked before it is used: a forged ``../x``
must not reach a path.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import TypeGuard

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}-[0-9]{1,12}-[0-9a-f]{6}")
_BLOB_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


class InvalidName(ValueError):
    """A topology name or id, or a blob key, that does not have the allowed form."""


def check_topology_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidName(f"invalid topology name {name!r}: use up to 100 letters, digits, "
                          f"'_', '.' and '-', starting with a letter or digit")
    return name


def new_topology_id(name: str) -> str:
    return f"{check_topology_name(name)}-{int(time.time())}-{secrets.token_hex(3)}"


def check_topology_id(topology_id: object) -> str:
    if not is_topology_id(topology_id):
        raise InvalidName(f"invalid topology id {topology_id!r}")
    return topology_id


def is_topology_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def check_blob_key(key: object) -> str:
    """A blob store key (a ZooKeeper node's name under the blobs node)."""
    if not isinstance(key, str) or not _BLOB_KEY.fullmatch(key):
        raise InvalidName(f"invalid blob key {key!r}: use up to 200 letters, digits, '_', '.' "
                          f"and '-', starting with a letter or digit")
    return key


def is_digest(value: object) -> bool:
    """A SHA-256 in hex, lower case: the name of a blob's file in a store or cache."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None
