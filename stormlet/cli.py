"""The ``stormlet`` command."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from . import config as cfg
from .loader import TopologyFileError, load_topology_file


@click.group()
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def main(log_level: str) -> None:
    """stormlet: Storm-style stream processing for Python."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _conf_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    try:
        return cfg.parse_cli_pairs(pairs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--duration", type=float, default=10.0, show_default=True,
              help="seconds to run before a clean shutdown (Ctrl-C stops earlier)")
@click.option("--name", default=None, help="topology name (default: the file's stem)")
@click.option("-c", "conf_pairs", multiple=True, metavar="KEY=VALUE",
              help="config override, repeatable (e.g. -c topology.max.spout.pending=500)")
@click.option("--drain", type=float, default=None,
              help="seconds to wait for in-flight tuples at shutdown (default: message timeout)")
def local(file: Path, duration: float, name: str | None, conf_pairs: tuple[str, ...],
          drain: float | None) -> None:
    """Run the topology defined in FILE inside this process."""
    from .local import LocalCluster
    from .runtime.tuning import tune_for_streaming

    overrides = _conf_options(conf_pairs)
    try:
        topology, conf = load_topology_file(file)
    except TopologyFileError as exc:
        raise click.ClickException(str(exc)) from None
    conf.update(overrides)
    name = name or file.stem
    tune_for_streaming()
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    started = time.monotonic()
    try:
        with LocalCluster() as cluster:
            cluster.submit(name, conf, topology)
            click.echo(f"running {name} in local mode for {duration:g}s (Ctrl-C to stop)", err=True)
            stop.wait(duration)
            click.echo("shutting down: spouts deactivated, draining in-flight tuples", err=True)
            report = cluster.kill(name, wait_secs=drain)
    finally:
        signal.signal(signal.SIGINT, previous)
    click.echo(format_summary(name, report.metrics, time.monotonic() - started))
    for error in report.errors[-5:]:
        click.echo(f"error in {error.component}:{error.task}: {error.error}")


def format_summary(name: str, summary: dict[str, dict], seconds: float) -> str:
    lines = [f"topology {name}: ran {seconds:.1f}s",
             f"{'component':<16}{'tasks':>6}{'emitted':>10}{'executed':>10}{'acked':>10}"
             f"{'failed':>8}  complete latency ms (p50/p99)"]
    for component, m in summary.items():
        latency = m["complete_latency_ms"]
        lat = f"{latency['p50']}/{latency['p99']}" if latency["p50"] is not None else "-"
        lines.append(f"{component:<16}{m['tasks']:>6}{m['emitted']:>10}{m['executed']:>10}"
                     f"{m['acked']:>10}{m['failed']:>8}  {lat}")
        if m["fail_reasons"]:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(m["fail_reasons"].items()))
            lines.append(f"{'':<16}failures by reason: {reasons}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
