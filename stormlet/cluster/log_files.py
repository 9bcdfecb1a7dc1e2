"""Where a node keeps its log files (ops53.md's layout, Storm's ``workers-artifacts``):

    <supervisor data dir>/logs/workers/<topology id>/<port>/   one worker slot's files:
        samples.jsonl (+ .1)   its tuple samples (``stormlet debug``, runtime/sampling.py)

A supervisor passes each worker its directory as ``--log-dir``. Nothing else spells these paths.
"""

from __future__ import annotations

from pathlib import Path

from .names import check_topology_id

# The option a supervisor gives a worker its directory with.
LOG_DIR_OPTION = "--log-dir"
# A worker's tuple samples, in its directory.
SAMPLES_FILE = "samples.jsonl"


def worker_log_dir(data_dir: str | Path, topology_id: str, port: int) -> Path:
    """The directory of the files of the worker of ``topology_id`` at ``port`` on the node
    whose supervisor keeps its data in ``data_dir``."""
    return Path(data_dir) / "logs" / "workers" / check_topology_id(topology_id) / str(int(port))
