"""``stormlet events``: a topology's event history, from nimbus (cluster/events.py).

    stormlet events word_count                         # the newest 50, oldest first
    stormlet events word_count --kind worker-exited    # only the workers that exited
    stormlet events word_count -f                      # and then each new one, until Ctrl-C

Each line is one event: when (the recording daemon's clock), its kind, who recorded it (a nimbus
or a supervisor and its host), and what happened. A killed topology's history is kept for an
hour after its removal (cluster/events.py's KEEP_SECS). Credentials quoted in an event (a dying
worker's last error) are shown only to a holder of the cluster secret.
"""

from __future__ import annotations

import time
from typing import Any

import click

from ..cluster.events import DEFAULT_READ, KINDS, MAX_READ
from ..redaction import redact_text
from .cluster import shows_secrets
from .options import NimbusTarget, nimbus_target

# How often -f asks nimbus for new events.
FOLLOW_SECS = 1.0
# The writer column: "supervisor:<id>@<host>", or "nimbus:<host>-<port>-<6 hex>" (29).
WRITER_WIDTH = 30


@click.command()
@click.argument("topology")
@click.option("--limit", type=click.IntRange(1, MAX_READ), default=DEFAULT_READ,
              show_default=True, help="how many of the newest events to show")
@click.option("--kind", default=None, metavar="KIND",
              help=f"only events of this kind: {', '.join(KINDS)}, or another part's")
@click.option("--follow", "-f", is_flag=True,
              help="keep printing new events as they are recorded, until Ctrl-C")
@nimbus_target
def events(topology: str, limit: int, kind: str | None, follow: bool,
           target: NimbusTarget) -> None:
    """Show what happened to TOPOLOGY (a name or an id), oldest first: submits, activations,
    rebalances, where its executors were assigned and why they moved, worker starts, exits (with
    their exit code or signal) and stops (with their reason), the kill."""
    from ..cluster.rpc import NimbusUnavailable, RpcError

    secrets = shows_secrets(target)
    with target.client() as client:
        try:
            history = client.call("events", topology=topology, limit=limit, kind=kind)
        except RpcError as exc:
            raise click.ClickException(str(exc)) from None
        for line in [heading(history), *event_lines(history["events"], secrets)]:
            click.echo(line)
        if not follow:
            return
        since = last_seq(history["events"], None)
        try:
            while True:
                time.sleep(FOLLOW_SECS)
                try:
                    newer = client.call("events", topology=history["id"], limit=MAX_READ,
                                        since=since, kind=kind)
                except NimbusUnavailable:
                    continue   # a nimbus failover, say: the history is in ZooKeeper
                except RpcError as exc:
                    raise click.ClickException(str(exc)) from None
                for line in event_lines(newer["events"], secrets, header=False):
                    click.echo(line)
                since = last_seq(newer["events"], since)
        except KeyboardInterrupt:
            pass


def heading(history: dict[str, Any]) -> str:
    """The line above the events: which topology, and whether it still runs."""
    name, tid = history.get("name"), history.get("id")
    if history.get("status") == "removed":
        removed = history.get("removed")
        when = f" at {_when(removed)}" if isinstance(removed, (int, float)) else ""
        return f"events of {name} ({tid}), removed{when}:"
    return f"events of {name} ({tid}), {history.get('status')}:"


def event_lines(rows: list[dict[str, Any]], secrets: bool, header: bool = True) -> list[str]:
    """A line for each event (oldest first, as nimbus answers), each text redacted
    (redaction.py) unless ``secrets``."""
    if not rows:
        return ["no events recorded"] if header else []
    shown = (lambda text: text) if secrets else redact_text
    lines = [f"{'time':<20}{'kind':<20}{'writer':<{WRITER_WIDTH}}  event"] if header else []
    for row in rows:
        lines.append(f"{_when(row['time']):<20}{row['kind']:<20}"
                     f"{row['writer']:<{WRITER_WIDTH}}  {shown(str(row['text']))}")
    return lines


def last_seq(rows: list[dict[str, Any]], since: int | None) -> int | None:
    """The seq to ask for events after: the newest shown, or ``since`` if none was."""
    return max((row["seq"] for row in rows), default=since)


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
