"""The embedded state backend: one SQLite file per topology, in its state directory.

Every namespace (one stateful bolt task, or the checkpoint spout) has its rows in three tables
of the file: ``kv`` (the committed state), ``prepared`` (the prepared checkpoint; a NULL value
deletes its key) and ``txids``. A prepare and a commit are each one SQLite transaction, so a
crash leaves either the whole checkpoint or none of it. The file is in WAL mode with full sync:
a committed checkpoint survives a crash of the process and of the machine. The tasks of one
machine share the file (each task has its own connection; writers take turns).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from .store import Changes, StateError, check_commit_txid

# How long a writer waits for another task's transaction before giving up.
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (ns TEXT NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL,
                               PRIMARY KEY (ns, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS prepared (ns TEXT NOT NULL, k BLOB NOT NULL, v BLOB,
                                     PRIMARY KEY (ns, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS txids (ns TEXT PRIMARY KEY, prepared INTEGER, committed INTEGER);
"""


def state_file(directory: str | Path, topology: str) -> Path:
    """Where the embedded store of ``topology`` lives under ``directory``."""
    return Path(directory) / f"{topology}.sqlite3"


class EmbeddedStore:
    """A ``Store`` for namespace ``namespace`` in the SQLite file ``path``."""

    def __init__(self, path: str | Path, namespace: str):
        self.path = Path(path)
        self.namespace = namespace
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._db = self._open()
                return
            except sqlite3.OperationalError as exc:
                # Switching to WAL does not wait for the other tasks opening the file at the
                # same moment: it fails at once with "locked", so wait here.
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StateError(f"cannot open the embedded state store {self.path}: "
                                     f"{exc}") from None
                time.sleep(0.01)
            except (OSError, sqlite3.Error) as exc:
                raise StateError(f"cannot open the embedded state store {self.path}: "
                                 f"{exc}") from None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Transactions are opened by hand (BEGIN IMMEDIATE), not by the sqlite3 module.
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def get(self, key: bytes) -> bytes | None:
        row = self._db.execute("SELECT v FROM kv WHERE ns = ? AND k = ?",
                               (self.namespace, key)).fetchone()
        return row[0] if row else None

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        rows = self._db.execute("SELECT k, v FROM kv WHERE ns = ?", (self.namespace,))
        return iter(rows.fetchall())

    def prepare(self, txid: int, changes: Changes) -> None:
        ns = self.namespace
        with self._transaction():
            self._db.execute("DELETE FROM prepared WHERE ns = ?", (ns,))
            self._db.executemany("INSERT INTO prepared (ns, k, v) VALUES (?, ?, ?)",
                                 ((ns, k, v) for k, v in changes.items()))
            self._db.execute("INSERT INTO txids (ns, prepared) VALUES (?, ?) ON CONFLICT (ns) "
                             "DO UPDATE SET prepared = excluded.prepared", (ns, txid))

    def commit(self, txid: int) -> None:
        ns = self.namespace
        with self._transaction():
            row = self._db.execute("SELECT prepared FROM txids WHERE ns = ?", (ns,)).fetchone()
            if row is None or row[0] is None:
                return
            check_commit_txid(row[0], txid)
            self._db.execute("DELETE FROM kv WHERE ns = ? AND k IN "
                             "(SELECT k FROM prepared WHERE ns = ? AND v IS NULL)", (ns, ns))
            self._db.execute("INSERT OR REPLACE INTO kv (ns, k, v) SELECT ns, k, v FROM prepared "
                             "WHERE ns = ? AND v IS NOT NULL", (ns,))
            self._db.execute("DELETE FROM prepared WHERE ns = ?", (ns,))
            self._db.execute("UPDATE txids SET prepared = NULL, committed = ? WHERE ns = ?",
                             (txid, ns))

    def rollback(self) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM prepared WHERE ns = ?", (self.namespace,))
            self._db.execute("UPDATE txids SET prepared = NULL WHERE ns = ?", (self.namespace,))

    def publish(self, writer: str, txid: int, rows: Iterable[tuple[bytes, bytes]]) -> bool:
        """Upsert ``rows`` (key, value) into the committed rows of this namespace and set
        ``writer``'s mark to ``txid``, in one transaction; nothing (and False) when the mark is
        ``txid`` or later already. For ``stormlet.sinks.upsert``: a sink's published writes."""
        mark = f"{self.namespace}\x00{writer}"   # never a state namespace (no NUL in those)
        with self._transaction():
            row = self._db.execute("SELECT committed FROM txids WHERE ns = ?",
                                   (mark,)).fetchone()
            if row is not None and row[0] is not None and row[0] >= txid:
                return False
            self._db.executemany("INSERT OR REPLACE INTO kv (ns, k, v) VALUES (?, ?, ?)",
                                 ((self.namespace, k, v) for k, v in rows))
            self._db.execute("INSERT INTO txids (ns, committed) VALUES (?, ?) ON CONFLICT (ns) "
                             "DO UPDATE SET committed = excluded.committed", (mark, txid))
        return True

    def close(self) -> None:
        self._db.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, self.path)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error; SQLite's errors become
    ``StateError`` naming the file."""

    def __init__(self, db: sqlite3.Connection, path: Path):
        self._db = db
        self._path = path

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StateError(f"embedded state store {self._path}: {exc}") from None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        if kind is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.Error as error:
                exc = error
        self._db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StateError(f"embedded state store {self._path}: {exc}") from None
