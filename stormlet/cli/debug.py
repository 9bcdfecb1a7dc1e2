"""Changing a running topology to see into it, as Storm's ``set_log_level`` and the UI's "Debug"
do: ``stormlet set-log-level`` (its loggers' levels, for a while) and ``stormlet debug`` (tuple
sampling, and the samples). Both are calls on nimbus (cluster/runtime_settings.py); changes need
the cluster's admin (the secret file), ``--show`` only the read role.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from ..runtime import live_settings as live
from ..runtime.log_levels import CLEAR, ROOT, parse_setting
from ..runtime.sampling import shown_roots
from .cluster import _call
from .options import NimbusTarget, nimbus_target


@click.command(name="set-log-level")
@click.argument("topology")
@click.argument("settings", nargs=-1, metavar="LOGGER=LEVEL[:SECONDS]...")
@click.option("-r", "--reset", "resets", multiple=True, metavar="LOGGER",
              help=f"clear LOGGER's setting now (as LOGGER={CLEAR}); repeatable")
@nimbus_target
def set_log_level(topology: str, settings: tuple[str, ...], resets: tuple[str, ...],
                  target: NimbusTarget) -> None:
    """Change loggers' levels on every worker of a running TOPOLOGY, as Storm's
    ``storm set_log_level -l ROOT=DEBUG:30``: LOGGER is ROOT (the root logger) or a dotted
    logger name, LEVEL one of DEBUG, INFO, WARNING (WARN), ERROR, CRITICAL (FATAL); after
    SECONDS (none, or 0: until cleared) each logger goes back to the level it had of its own.
    LOGGER=CLEAR, or -r LOGGER, puts it back now. With nothing to change, shows what is set."""
    changes: dict[str, Any] = {}
    try:
        for text in settings:
            logger, level, seconds = parse_setting(text)
            changes[logger] = None if level is None else {"level": level, "seconds": seconds}
        for logger in resets:
            changes[parse_setting(f"{logger}={CLEAR}")[0]] = None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="LOGGER=LEVEL[:SECONDS]") from None
    if changes:
        in_force = _call(target, "set_log_levels", name=topology, levels=changes)
    else:
        in_force = _call(target, "live_settings", name=topology)
    for line in log_level_lines(topology, in_force[live.LOG_LEVELS], time.time()):
        click.echo(line)


def log_level_lines(topology: str, levels: dict[str, dict], now: float) -> list[str]:
    """What ``set-log-level`` prints of the log levels in force."""
    if not levels:
        return [f"no log levels set for {topology}: every logger has its own"]
    return [f"{logger:<32} {entry['level']:<9} {_lasting(entry, now)}"
            for logger, entry in sorted(levels.items(), key=lambda kv: (kv[0] != ROOT, kv[0]))]


@click.command()
@click.argument("topology")
@click.option("--component", default=None, help="only this component [default: every one]")
@click.option("--sampling", "percent", type=click.FloatRange(min=0, max=100, min_open=True),
              metavar="PCT", help="sample this percentage of the emitted tuples (0 < PCT <= 100)")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="turn sampling off again after this long [default: when --off]")
@click.option("--off", is_flag=True, help="turn sampling off (of --component, or of every one)")
@click.option("--show", is_flag=True, help="print the newest samples instead")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="with --show: how many samples")
@click.option("--json", "as_json", is_flag=True, help="with --show: one JSON object a line")
@nimbus_target
def debug(topology: str, component: str | None, percent: float | None, seconds: float | None,
          off: bool, show: bool, limit: int, as_json: bool, target: NimbusTarget) -> None:
    """Sample the tuples a running TOPOLOGY emits (of one --component, or of every one), as
    Storm's "Debug" button does: each sample holds the time, component, task, stream, values
    (cut past 1 KiB), the tasks it went to, and a spout's message id and tree root. Workers
    keep them in memory and in samples.jsonl in their log directory; --show prints the newest.
    Sampling off costs nothing; at 1 % the word count loses a few percent."""
    chosen = [name for name, given in (("--sampling", percent is not None), ("--off", off),
                                       ("--show", show)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give one of --sampling PCT, --off or --show")
    if seconds is not None and percent is None:
        raise click.UsageError("--seconds goes with --sampling")
    if show:
        rows = _call(target, "samples", name=topology, component=component, limit=limit)
        for line in sample_lines(rows, as_json):
            click.echo(line)
        return
    in_force = _call(target, "debug", name=topology, component=component,
                     percent=None if off else percent, seconds=seconds)
    for line in sampling_lines(topology, in_force[live.SAMPLING], time.time()):
        click.echo(line)


def sampling_lines(topology: str, sampling: dict[str, dict], now: float) -> list[str]:
    """What ``debug`` prints of the sampling in force."""
    if not sampling:
        return [f"tuple sampling of {topology} is off"]
    return [f"{'every component' if key == live.ALL_COMPONENTS else key:<24} "
            f"{entry['percent']:g}%  {_lasting(entry, now)}"
            for key, entry in sorted(sampling.items())]


def sample_lines(rows: list[dict], as_json: bool) -> list[str]:
    """What ``debug --show`` prints of nimbus's samples (oldest first), roots in hex."""
    rows = [shown_roots(row) for row in rows]
    if as_json:
        return [json.dumps(row, sort_keys=True) for row in rows]
    if not rows:
        return ["no samples (turn sampling on with --sampling PCT; workers report theirs "
                "with their metrics, every few seconds)"]
    lines = []
    for row in rows:
        when = time.strftime("%H:%M:%S", time.localtime(row["time"])) + \
            f".{int(row['time'] % 1 * 1000):03d}"
        where = f"{row['component']}:{row['task']}"
        extra = "".join(f"  {key}={json.dumps(row[key])}" for key in ("msg_id", "roots")
                        if key in row)
        note = f"  ({row['note']})" if row.get("note") else ""
        lines.append(f"{when}  {where:<20} {row['stream']:<12} "
                     f"{json.dumps(row['values'])} -> {row.get('to_tasks')}{extra}{note}")
    return lines


def _lasting(entry: dict, now: float) -> str:
    until = entry.get("until")
    if until is None:
        return "until cleared"
    return f"for {max(0.0, until - now):.0f} s more"
