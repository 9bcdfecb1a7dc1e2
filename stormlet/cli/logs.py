"""``stormlet logs``: a running topology's worker logs, from every node, through nimbus.

    stormlet logs wordcount                                  # all its workers have logged
    stormlet logs wordcount --component split --since 10m    # what split's executors logged
    stormlet logs wordcount --grep 'Traceback|ERROR' -f      # and what comes, until Ctrl-C
    stormlet logs wordcount --list                           # its files, where, which executors

Nimbus lists the topology's files on every supervisor and reads them through each node's
service (cluster/log_service.py); filters run on the node that holds the file, so only what
matches crosses the network. A record is a line and the lines continuing it (a traceback):
it is kept or left whole. Lines of several workers are merged by time, each prefixed with its
worker's host:port. ``--component`` and ``--task`` keep what the executors of that component
(task) logged: each line of a worker names them (cluster/logging_setup.py). A node that does
not answer is reported on stderr; the others are read all the same.
"""

from __future__ import annotations

import heapq
import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator

import click

from ..cluster.log_files import LOG, OUT
from .options import NimbusTarget, nimbus_target

if TYPE_CHECKING:
    from ..cluster.nimbus_client import NimbusClient

# How often -f asks for what is new, and how often it lists the files again (a worker started
# elsewhere since, a rebalance).
FOLLOW_SECS = 1.0
RELIST_SECS = 10.0
_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """``--since``: "30s", "10m", "2h", "1d" before ``now``, or an ISO time (local time unless
    it gives its offset); epoch seconds. ``click.BadParameter`` for anything else."""
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return now - float(ago[1]) * _UNIT_SECS[ago[2]]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a duration (30s, 10m, 2h, 1d) nor an ISO "
                                 f"time (2026-11-30T10:00)", param_hint="--since") from None
    return (when if when.tzinfo else when.astimezone()).timestamp()


@dataclass
class WorkerFiles:
    """One worker slot's files of one kind: its rotated ones, oldest first, then its current."""

    supervisor: str
    host: str
    port: int
    current: str | None = None
    inode: int | None = None
    rotated: list[dict] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def worker_files(files: list[dict], kind: str, host: str | None) -> list[WorkerFiles]:
    """The listing's files of ``kind`` by worker slot (on ``host`` only, if given)."""
    workers: dict[tuple[str, int], WorkerFiles] = {}
    for entry in files:
        if entry.get("kind") != kind or (host is not None and entry.get("host") != host):
            continue
        key = (entry["supervisor"], int(entry["port"]))
        worker = workers.setdefault(key, WorkerFiles(entry["supervisor"], str(entry["host"]),
                                                     int(entry["port"])))
        if entry.get("generation"):
            worker.rotated.append(entry)
        else:
            worker.current, worker.inode = entry["name"], entry.get("inode")
    for worker in workers.values():
        worker.rotated.sort(key=lambda entry: -int(entry["generation"]))
    return sorted(workers.values(), key=lambda w: (w.host, w.port))


class Reader:
    """Reads a topology's files through nimbus with one set of filters."""

    def __init__(self, client: NimbusClient, name: str, filters: dict[str, Any]):
        self.client = client
        self.name = name
        self.filters = filters

    def listing(self) -> dict:
        from ..cluster.log_service import CALLER_TIMEOUT_SECS

        return self.client.call("logs_list", timeout=CALLER_TIMEOUT_SECS, name=self.name)

    def read(self, worker: WorkerFiles, file: str, offset: int = 0,
             inode: int | None = None) -> dict:
        from ..cluster.log_service import CALLER_TIMEOUT_SECS

        return self.client.call("logs_read", timeout=CALLER_TIMEOUT_SECS, name=self.name,
                                supervisor=worker.supervisor, file=file, offset=offset,
                                inode=inode, **self.filters)

    def records(self, worker: WorkerFiles, since: float | None,
                follow: dict[tuple[str, int], dict]) -> Iterator[tuple[float, str, bytes]]:
        """(time, worker, record) for each record of ``worker``'s files, oldest first (a
        rotated file last changed before ``since`` is skipped); where its current file ends
        goes in ``follow``."""
        from ..cluster.log_search import split_records

        last_time = 0.0
        files: list[tuple[str, int | None]] = [(entry["name"], None) for entry in worker.rotated
                 if since is None or float(entry.get("mtime", 0)) >= since]
        if worker.current is not None:
            files.append((worker.current, worker.inode))
        for file, inode in files:
            offset = 0
            while True:
                answer = self.read(worker, file, offset, inode)
                for record in split_records(answer["data"], answer["start"]):
                    if record.head is not None:
                        last_time = record.head.time
                    yield last_time, worker.where, record.data
                offset = answer["next"]
                if answer["eof"]:
                    break
            if file == worker.current:
                follow[(worker.supervisor, worker.port)] = _position(worker, answer)


def _position(worker: WorkerFiles, answer: dict) -> dict:
    """Where following ``worker``'s current file goes on after ``answer``: in the rotated file
    it was read from until that ends, then the current one from its start."""
    if answer["file"] != worker.current and answer["eof"]:
        return {"worker": worker, "offset": 0, "inode": None}
    return {"worker": worker, "offset": answer["next"], "inode": answer["inode"]}


def _show(records: Iterator[tuple[float, str, bytes]], prefixed: bool) -> None:
    for _time, where, data in records:
        text = data.decode("utf-8", "replace")
        if not text.endswith("\n"):
            text += "\n"
        if prefixed:
            text = "".join(f"{where} {line}" for line in text.splitlines(keepends=True))
        click.echo(text, nl=False)


def _warn(line: str) -> None:
    click.echo(f"warning: {line}", err=True)


@click.command(name="logs")
@click.argument("name")
@click.option("--component", default=None, help="only what this component's executors logged")
@click.option("--task", type=int, default=None, help="only what the executor of this task logged")
@click.option("--host", default=None, help="only the workers on this host (as nimbus knows it)")
@click.option("--since", default=None, metavar="TIME",
              help="only records from this time on: 30s, 10m, 2h, 1d ago, or an ISO time "
                   "(2026-11-30T10:00, local time unless it gives its offset)")
@click.option("--grep", default=None, metavar="REGEX",
              help="only records matching this regular expression (searched in the whole "
                   "record, a traceback included)")
@click.option("-f", "--follow", is_flag=True, help="then show what comes, until Ctrl-C")
@click.option("--out", "raw_output", is_flag=True,
              help="read the workers' raw stdout and stderr (worker.out: a crash's last words) "
                   "instead of their logs")
@click.option("--list", "listing", is_flag=True,
              help="list the files instead: worker, file, size, last change, executors")
@nimbus_target
def logs(name: str, component: str | None, task: int | None, host: str | None,
         since: str | None, grep: str | None, follow: bool, raw_output: bool, listing: bool,
         target: NimbusTarget) -> None:
    """Show a topology's worker logs from every node (through nimbus), oldest first. NAME is a
    running topology's name or id, or the id of one killed (its workers' logs stay on the
    nodes for a week)."""
    from ..cluster.rpc import RpcError

    since_time = parse_since(since, time.time()) if since else None
    filters = {key: value for key, value in (("component", component), ("task", task),
                                              ("grep", grep), ("since", since_time))
               if value is not None}
    try:
        with target.client() as client:
            reader = Reader(client, name, filters)
            answer = reader.listing()
            for line in answer["unanswered"]:
                _warn(line)
            if listing:
                for line in listing_lines(answer["files"], host):
                    click.echo(line)
                return
            kind = OUT if raw_output else LOG
            workers = worker_files(answer["files"], kind, host)
            if not workers and not follow:
                click.echo(f"no {'output' if raw_output else 'log'} files of {name}'s workers "
                           f"found" + (f" on {host}" if host else ""), err=True)
                return
            positions: dict[tuple[str, int], dict] = {}
            prefixed = len(workers) > 1
            _show(heapq.merge(*(_quietly(reader.records(w, since_time, positions), w)
                                for w in workers), key=lambda item: item[0]), prefixed)
            if follow:
                _follow(reader, positions, kind, host, prefixed)
    except RpcError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # Its reader stopped (`| head`): end quietly, without Python's own complaint at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _quietly(records: Iterator[tuple[float, str, bytes]],
             worker: WorkerFiles) -> Iterator[tuple[float, str, bytes]]:
    """``records``, ending with a warning if reading them fails (a node gone meanwhile): the
    other workers' records are shown all the same."""
    from ..cluster.rpc import NimbusUnavailable, RpcError

    try:
        yield from records
    except NimbusUnavailable:
        raise
    except RpcError as exc:
        _warn(f"{worker.where}: {exc}")


def _follow(reader: Reader, positions: dict[tuple[str, int], dict], kind: str,
            host: str | None, prefixed: bool) -> None:
    """Every FOLLOW_SECS, what was added to each worker's current file; every RELIST_SECS,
    the workers started since (their files from the start)."""
    from ..cluster.log_search import split_records
    from ..cluster.rpc import RpcError

    listed = time.monotonic()
    failing: set[tuple[str, int]] = set()
    while True:
        time.sleep(FOLLOW_SECS)
        if time.monotonic() - listed >= RELIST_SECS:
            listed = time.monotonic()
            try:
                listing = reader.listing()
            except RpcError as exc:
                _warn(f"could not list the files again (it tries every {RELIST_SECS:g} s): "
                      f"{exc}")
                listing = {"files": []}
            for worker in worker_files(listing["files"], kind, host):
                key = (worker.supervisor, worker.port)
                if key not in positions and worker.current is not None:
                    positions[key] = {"worker": worker, "offset": 0, "inode": None}
            prefixed = prefixed or len(positions) > 1
        batch: list[tuple[float, str, bytes]] = []
        for key, position in positions.items():
            worker = position["worker"]
            try:
                while True:
                    answer = reader.read(worker, worker.current, position["offset"],
                                         position["inode"])
                    batch += [(r.head.time if r.head else 0.0, worker.where, r.data)
                              for r in split_records(answer["data"], answer["start"])]
                    position.update(_position(worker, answer))
                    if answer["eof"]:
                        break
                failing.discard(key)
            except RpcError as exc:
                if key not in failing:   # once, until it answers again
                    _warn(f"{worker.where}: {exc}")
                failing.add(key)
        _show(iter(sorted(batch, key=lambda item: item[0])), prefixed)
        sys.stdout.flush()


def listing_lines(files: list[dict], host: str | None) -> list[str]:
    """What ``stormlet logs --list`` prints of a ``logs_list`` answer."""
    rows = [f for f in files if host is None or f.get("host") == host]
    if not rows:
        return ["no files"]
    lines = [f"{'worker':<22}{'file':<20}{'size':>10}  {'last change':<20}executors"]
    for entry in sorted(rows, key=lambda f: (f["host"], f["port"], f["name"])):
        executors = ", ".join(f"{component} {_tasks(tasks)}"
                              for component, tasks in entry.get("executors", []))
        changed = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["mtime"]))
        lines.append(f"{entry['host'] + ':' + str(entry['port']):<22}"
                     f"{entry['name'].rsplit('/', 1)[-1]:<20}{entry['size']:>10}  "
                     f"{changed:<20}{executors or '-'}")
    return lines


def _tasks(tasks: list[int]) -> str:
    return f"[{tasks[0]}]" if len(tasks) == 1 else f"[{tasks[0]}-{tasks[-1]}]"
