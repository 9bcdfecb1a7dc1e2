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
from .backfill_cli import backfill
from .failed_cli import failed
from .loader import TopologyFileError, load_topology_file
from .log_cli import log_group
from .replay_cli import replay


@click.group()
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def main(log_level: str) -> None:
    """stormlet: Storm-style stream processing for Python."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level.upper() != "DEBUG":
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # its connection chatter


def _conf_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    try:
        return cfg.parse_cli_pairs(pairs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None


# How long `stormlet local` runs without --ui (with it: until Ctrl-C or a kill from the UI).
LOCAL_DURATION_SECS = 10.0


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--duration", type=float, default=None,
              help=f"seconds to run before a clean shutdown (default: {LOCAL_DURATION_SECS:g}; "
                   f"with --ui, until Ctrl-C or a kill from the UI)")
@click.option("--name", default=None, help="topology name (default: the file's stem)")
@click.option("-c", "conf_pairs", multiple=True, metavar="KEY=VALUE",
              help="config override, repeatable (e.g. -c topology.max.spout.pending=500)")
@click.option("--drain", type=float, default=None,
              help="seconds to wait for in-flight tuples at shutdown (default: message timeout)")
@click.option("--ui", "with_ui", is_flag=True, help="serve the web UI while the topology runs")
@click.option("--ui-port", default=8080, show_default=True, type=int,
              help="the UI's port (on 127.0.0.1; 0 picks a free one)")
def local(file: Path, duration: float | None, name: str | None, conf_pairs: tuple[str, ...],
          drain: float | None, with_ui: bool, ui_port: int) -> None:
    """Run the topology defined in FILE inside this process.

    On a terminal, one line shows totals and rates while it runs."""
    from .local import LocalCluster
    from .runtime.tuning import tune_for_streaming
    from .ui.progress import ProgressLine, totals

    overrides = _conf_options(conf_pairs)
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
            cluster.submit(name, conf, topology)
            source, server = _local_ui(cluster, ui_port) if with_ui else (None, None)
            how_long = "until Ctrl-C" if duration is None else f"for {duration:g}s (Ctrl-C to stop)"
            click.echo(f"running {name} in local mode {how_long}", err=True)
            if server:
                click.echo(f"UI at {server.url}", err=True)
            progress = None
            if sys.stdout.isatty():
                progress = ProgressLine(lambda: totals(cluster.metrics(name), spouts),
                                        sys.stdout).start()
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
    from .ui.app import serve
    from .ui.source import LocalSource

    source = LocalSource(cluster)
    try:
        return source, serve(source, "127.0.0.1", port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve the UI on port {port}: {exc.strerror} "
                                   f"(choose another with --ui-port)") from None


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


# ----- the cluster

ZK_OPTION = click.option("--zk", envvar="STORMLET_ZK", default="127.0.0.1:2181", show_default=True,
                         help="ZooKeeper hosts, host:port[,host:port...]")
ZK_ROOT_OPTION = click.option("--zk-root", default="/stormlet", show_default=True,
                              help="the cluster's root path in ZooKeeper")
NIMBUS_OPTION = click.option("--nimbus", "nimbus_address", default=None, metavar="HOST:PORT",
                             help="talk to this nimbus instead of finding the leader in ZooKeeper")


def _call(ctx_args: tuple[str, str, str | None], op: str, timeout: float = 15, **args: Any) -> Any:
    """``op`` on nimbus (see cluster/nimbus_client.py), its refusal as the command's error."""
    from .cluster.nimbus_client import NimbusClient
    from .cluster.rpc import RpcError

    zk, zk_root, nimbus_address = ctx_args
    try:
        with NimbusClient(zk, zk_root, nimbus_address) as client:
            return client.call(op, timeout=timeout, **args)
    except RpcError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@ZK_OPTION
@ZK_ROOT_OPTION
@click.option("--host", default="127.0.0.1", show_default=True, help="address to serve on")
@click.option("--port", default=6627, show_default=True, type=int)
@click.option("--data-dir", default="nimbus-data", show_default=True, type=click.Path())
def nimbus(zk: str, zk_root: str, host: str, port: int, data_dir: str) -> None:
    """Run a nimbus (the leader, or a standby if one leads already)."""
    from .cluster.nimbus import Nimbus

    daemon = Nimbus(zk, port=port, data_dir=data_dir, host=host, zk_root=zk_root)
    daemon.start()
    _run_until_signal(daemon)


@main.command()
@ZK_OPTION
@ZK_ROOT_OPTION
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address workers bind and peers reach")
@click.option("--slots", default="6700,6701", show_default=True, help="worker ports, comma-separated")
@click.option("--data-dir", default="supervisor-data", show_default=True, type=click.Path())
@click.option("--id", "supervisor_id", default=None, help="supervisor id (default: kept in data dir)")
@click.option("--worker-timeout", default=30.0, show_default=True, type=float,
              help="seconds without a heartbeat before a worker is restarted")
def supervisor(zk: str, zk_root: str, host: str, slots: str, data_dir: str,
               supervisor_id: str | None, worker_timeout: float) -> None:
    """Run a supervisor: start, watch and restart this node's workers."""
    from .cluster.supervisor import Supervisor

    try:
        ports = [int(p) for p in slots.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"{slots!r} is not a comma-separated list of ports",
                                 param_hint="--slots") from None
    daemon = Supervisor(zk, ports, data_dir=data_dir, host=host, zk_root=zk_root,
                        supervisor_id=supervisor_id, worker_timeout=worker_timeout)
    daemon.start()
    _run_until_signal(daemon)


def _run_until_signal(daemon: Any) -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    daemon.stop()


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="topology name (default: the file's stem)")
@click.option("-c", "conf_pairs", multiple=True, metavar="KEY=VALUE", help="config override")
@ZK_OPTION
@ZK_ROOT_OPTION
@NIMBUS_OPTION
def submit(file: Path, name: str | None, conf_pairs: tuple[str, ...], zk: str, zk_root: str,
           nimbus_address: str | None) -> None:
    """Submit the topology in FILE to the cluster."""
    from .cluster.code import CodeError, package_topology

    overrides = _conf_options(conf_pairs)
    try:
        code = package_topology(file)
    except CodeError as exc:
        raise click.ClickException(str(exc)) from None
    name = name or file.stem
    result = _call((zk, zk_root, nimbus_address), "submit", timeout=120, name=name, code=code,
                   conf=overrides)
    click.echo(f"submitted {name} ({result['id']})")


@main.command(name="list")
@ZK_OPTION
@ZK_ROOT_OPTION
@NIMBUS_OPTION
def list_command(zk: str, zk_root: str, nimbus_address: str | None) -> None:
    """List running topologies with status, workers, uptime and errors.

    errors counts every error the topology's workers counted since they started (and those of
    the last worker that exited on each slot); `stormlet errors NAME` shows them."""
    rows = _call((zk, zk_root, nimbus_address), "list")
    if not rows:
        click.echo("no topologies running")
        return
    click.echo(f"{'name':<24}{'status':<10}{'workers':>8}{'executors':>10}  {'uptime':<10}"
               f"{'errors':>8}  last error")
    now = time.time()
    for row in rows:
        last = row.get("last_error")
        last_text = f"{_duration(max(0.0, now - last))} ago" if last else "-"
        click.echo(f"{row['name']:<24}{row['status']:<10}{row['workers']:>8}{row['executors']:>10}"
                   f"  {_duration(row['uptime']):<10}{row.get('errors', 0):>8}  {last_text}")


@main.command()
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="how many of the most recent errors to show")
@click.option("--stack", is_flag=True,
              help="also print each error's traceback (or a hung component's stack)")
@ZK_OPTION
@ZK_ROOT_OPTION
@NIMBUS_OPTION
def errors(name: str, limit: int, stack: bool, zk: str, zk_root: str,
           nimbus_address: str | None) -> None:
    """Show a running topology's most recent errors, oldest first: time, component, task,
    worker host:port and the error. Errors of one kind beyond the first few show as one summary
    line per interval ("... and N more like it")."""
    rows = _call((zk, zk_root, nimbus_address), "errors", name=name, limit=limit)
    if not rows:
        click.echo(f"no errors reported for {name}")
        return
    click.echo(f"{'time':<20}{'component':<16}{'task':>5}  {'worker':<22}error")
    for row in reversed(rows):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["time"]))
        worker = f"{row['host']}:{row['port']}"
        click.echo(f"{when:<20}{row['component']:<16}{row['task']:>5}  {worker:<22}{row['error']}")
        if stack and row.get("detail"):
            click.echo("    " + row["detail"].replace("\n", "\n    "))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


@main.command()
@click.argument("name")
@click.option("--wait", type=float, default=None,
              help="seconds between deactivating and removing (default: the message timeout)")
@ZK_OPTION
@ZK_ROOT_OPTION
@NIMBUS_OPTION
def kill(name: str, wait: float | None, zk: str, zk_root: str, nimbus_address: str | None) -> None:
    """Deactivate a topology, wait, then remove it and stop its workers."""
    _call((zk, zk_root, nimbus_address), "kill", name=name, wait=wait)
    click.echo(f"killed {name}: deactivated now, removed after "
               f"{'the message timeout' if wait is None else f'{wait:g}s'}")


def _status_command(op: str, help_text: str) -> None:
    @main.command(name=op, help=help_text)
    @click.argument("name")
    @ZK_OPTION
    @ZK_ROOT_OPTION
    @NIMBUS_OPTION
    def command(name: str, zk: str, zk_root: str, nimbus_address: str | None) -> None:
        _call((zk, zk_root, nimbus_address), op, name=name)
        click.echo(f"{op}d {name}")


_status_command("activate", "Resume a topology's spouts.")
_status_command("deactivate", "Pause a topology's spouts (in-flight tuples still finish).")


@main.command()
@click.argument("name")
@click.option("--workers", type=int, default=None, help="new number of worker processes")
@click.option("--executors", "-e", "executor_pairs", multiple=True, metavar="COMPONENT=N",
              help="new executor count for a component (at most its task count)")
@ZK_OPTION
@ZK_ROOT_OPTION
@NIMBUS_OPTION
def rebalance(name: str, workers: int | None, executor_pairs: tuple[str, ...], zk: str,
              zk_root: str, nimbus_address: str | None) -> None:
    """Spread a running topology over a different number of workers or executors."""
    executors = {}
    for pair in executor_pairs:
        component, sep, count = pair.partition("=")
        if not sep or not count.strip().isdigit():
            raise click.BadParameter(f"{pair!r} is not COMPONENT=N", param_hint="--executors")
        executors[component.strip()] = int(count)
    result = _call((zk, zk_root, nimbus_address), "rebalance", name=name, workers=workers,
                   executors=executors)
    click.echo(f"rebalanced {name} to {result['workers']} workers")



@main.command()
@click.option("--port", default=8080, show_default=True, type=int, help="port to serve on")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to serve on")
@ZK_OPTION
@ZK_ROOT_OPTION
@NIMBUS_OPTION
def ui(port: int, host: str, zk: str, zk_root: str, nimbus_address: str | None) -> None:
    """Serve the web UI and its REST API (/api/v1/) and Prometheus metrics (/metrics) for the
    cluster whose nimbus is found in ZooKeeper (or given with --nimbus)."""
    from .ui.app import serve
    from .ui.source import ClusterSource

    source = ClusterSource(zk, zk_root, nimbus_address)
    try:
        server = serve(source, host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    click.echo(f"stormlet UI at {server.url}", err=True)
    try:
        _run_until_signal(server)
    finally:
        source.close()

main.add_command(failed)
main.add_command(log_group)
main.add_command(backfill)
main.add_command(replay)


if __name__ == "__main__":
    sys.exit(main())
