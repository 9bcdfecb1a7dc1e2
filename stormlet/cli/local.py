"""``stormlet local``: run a topology in this process (a ``LocalCluster``), for a while or until
Ctrl-C, and print what each component did."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from ..errors import TopologyError
from ..loader import TopologyFileError, load_topology_file
from ..runtime import build_mode
from .options import conf_option, conf_overrides

# How long `stormlet local` runs without --ui (with it: until Ctrl-C or a kill from the UI).
LOCAL_DURATION_SECS = 10.0


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--duration", type=float, default=None,
              help=f"seconds to run before a clean shutdown (default: {LOCAL_DURATION_SECS:g}; "
                   f"with --ui, until Ctrl-C or a kill from the UI)")
@click.option("--name", default=None, help="topology name (default: the file's stem)")
@conf_option("config override, repeatable (e.g. -c topology.max.spout.pending=500)")
@click.option("--drain", type=float, default=None,
              help="seconds to wait for in-flight tuples at shutdown (default: message timeout)")
@click.option("--ui", "with_ui", is_flag=True, help="serve the web UI while the topology runs")
@click.option("--ui-port", default=8080, show_default=True, type=int,
              help="the UI's port (on 127.0.0.1; 0 picks a free one)")
def local(file: Path, duration: float | None, name: str | None, conf_pairs: tuple[str, ...],
          drain: float | None, with_ui: bool, ui_port: int) -> None:
    """Run the topology defined in FILE inside this process.

    On a terminal, one line shows totals and rates while it runs."""
    from ..local import LocalCluster
    from ..runtime import threads as runner
    from ..runtime.tuning import tune_for_streaming
    from ..ui.progress import ProgressLine, totals

    overrides = conf_overrides(conf_pairs)
    try:
        topology, conf = load_topology_file(file)
    except TopologyFileError as exc:
        raise click.ClickException(str(exc)) from None
    conf.update(overrides)
    name = name or file.stem
    if duration is None and not with_ui:
        duration = LOCAL_DURATION_SECS
    spouts = {cid for cid, spec in topology.components.items() if spec.is_spout}
    tune_for_streaming()
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    started = time.monotonic()
    try:
        with LocalCluster() as cluster:
            submitted_at = time.monotonic()
            try:
                cluster.submit(name, conf, topology)
            except TopologyError as exc:   # a config it cannot run with: refused, as by nimbus
                raise click.ClickException(str(exc)) from None
            source, server = _local_ui(cluster, ui_port) if with_ui else (None, None)
            how_long = "until Ctrl-C" if duration is None else f"for {duration:g}s (Ctrl-C to stop)"
            click.echo(f"running {name} in local mode {how_long}; executors "
                       f"{runner.describe(conf)}; {build_mode.describe()}", err=True)
            if server:
                click.echo(f"UI at {server.url}", err=True)
            progress = None
            if sys.stdout.isatty():
                progress = ProgressLine(lambda: totals(cluster.metrics(name), spouts),
                                        sys.stdout, submitted_at=submitted_at).start()
            deadline = None if duration is None else time.monotonic() + duration
            # Until the time is up, Ctrl-C, or a kill from the UI.
            while not (stop.wait(0.2) or (deadline and time.monotonic() >= deadline)
                       or (source and source.killed(name))):
                pass
            if progress:
                progress.stop()
            killed = source.killed(name) if source else None
            if killed:
                click.echo("killed from the UI: draining in-flight tuples", err=True)
                report = killed.result()
            else:
                click.echo("shutting down: spouts deactivated, draining in-flight tuples",
                           err=True)
                report = cluster.kill(name, wait_secs=drain)
            if server:
                server.stop()
    finally:
        signal.signal(signal.SIGINT, previous)
    click.echo(format_summary(name, report.metrics, time.monotonic() - started))
    for error in report.errors[-5:]:
        click.echo(f"error in {error.component}:{error.task}: {error.error}")


def _local_ui(cluster: Any, port: int) -> tuple[Any, Any]:
    from ..ui.app import serve
    from ..ui.source import LocalSource

    source = LocalSource(cluster)
    try:
        return source, serve(source, "127.0.0.1", port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve the UI on port {port}: {exc.strerror} "
                                   f"(choose another with --ui-port)") from None


def format_summary(name: str, summary: dict[str, dict], seconds: float) -> str:
    """The table printed at the end of a run: per component, its tasks, counts and complete
    latency, and its failures by reason."""
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
