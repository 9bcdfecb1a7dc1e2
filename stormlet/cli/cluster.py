"""The cluster's commands: its daemons (``nimbus``, ``supervisor``, ``ui``), each a library
object run until SIGTERM or Ctrl-C, and the calls on nimbus (``submit``, ``list``, ``errors``,
``kill``, ``activate``, ``deactivate``, ``rebalance``), each one request through
``cluster.nimbus_client`` whose refusal is the command's error."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from ..cluster.blob_cache import DEFAULT_KEEP_SECS
from ..cluster.node_service import DEFAULT_PORT as NODE_SERVICE_PORT
from ..cluster.submissions import PREPARING, REFUSAL_KEEP_SECS, REFUSED
from ..redaction import redact_text
from .options import (
    SECRET_OPTION,
    ZK_OPTION,
    ZK_ROOT_OPTION,
    ZK_SESSION_OPTION,
    NimbusTarget,
    conf_option,
    conf_overrides,
    environment_settings,
    load_security,
    log_file_options,
    nimbus_target,
)
from .signals import run_until_signal

# While nimbus builds a submission's environment, how often `submit` shows its progress.
BUILD_POLL_SECS = 1.0

if TYPE_CHECKING:
    from ..cluster.environments import EnvironmentSettings
    from ..cluster.logging_setup import LogSettings
    from ..cluster.security import Security

# ----- the daemons


@click.command()
@ZK_OPTION
@ZK_ROOT_OPTION
@SECRET_OPTION
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address clients and peers reach this nimbus at")
@click.option("--bind", default=None, help="address to listen on (default: --host)")
@click.option("--port", default=6627, show_default=True, type=int)
@click.option("--data-dir", default="nimbus-data", show_default=True, type=click.Path())
@ZK_SESSION_OPTION
@environment_settings
@log_file_options
def nimbus(zk: str, zk_root: str, secret_file: str | None, host: str, bind: str | None,
           port: int, data_dir: str, zk_session_timeout: float,
           environments: EnvironmentSettings, log_settings: LogSettings) -> None:
    """Run a nimbus (the leader, or a standby if one leads already)."""
    from ..cluster.nimbus import Nimbus

    run_until_signal(_daemon(lambda security: Nimbus(
        zk, port=port, data_dir=data_dir, host=host, zk_root=zk_root, security=security,
        bind=bind, zk_session_timeout=zk_session_timeout, environments=environments),
        secret_file, ("nimbus", data_dir, log_settings)))


def _log_to_file(role: str, data_dir: str | Path, settings: LogSettings) -> None:
    """Write this daemon's log to ``<data_dir>/logs/<role>.log`` too (rotated), private to its
    user and group like the rest of its files."""
    from ..cluster.logging_setup import log_daemon
    from ..cluster.security import restrict_new_files

    restrict_new_files()
    try:
        log_daemon(role, Path(data_dir), settings)
    except OSError as exc:
        raise click.ClickException(f"cannot write the {role}'s log under {data_dir}: "
                                   f"{exc}") from None


def _daemon(make: Callable[[Security], Any], secret_file: str | None,
            log: tuple[str, str | Path, LogSettings] | None = None) -> Any:
    """``make(security)``, made to refuse with the command's error what security forbids (at
    construction or at start: a ZooKeeper root the cluster did not make, say). The files it
    makes are private to its user and group (``restrict_new_files``). ``log``: its role, data
    directory and log settings, for its own log file, begun once it is made (a daemon refused
    leaves no file behind)."""
    from ..cluster.security import SecurityError, restrict_new_files

    restrict_new_files()
    security = load_security(secret_file)
    try:
        daemon = _RefusingStart(make(security))
    except SecurityError as exc:
        raise click.ClickException(str(exc)) from None
    if log is not None:
        _log_to_file(*log)
    return daemon


class _RefusingStart:
    """A daemon whose ``start`` turns a ``SecurityError`` (or a supervisor's taken service port)
    into the command's error: one line that says what to do, no traceback."""

    def __init__(self, daemon: Any):
        self.daemon = daemon

    def start(self) -> None:
        from ..cluster.node_service import NodeServiceError
        from ..cluster.security import SecurityError

        try:
            self.daemon.start()
        except (SecurityError, NodeServiceError) as exc:
            raise click.ClickException(str(exc)) from None

    def stop(self) -> None:
        self.daemon.stop()


@click.command()
@ZK_OPTION
@ZK_ROOT_OPTION
@SECRET_OPTION
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address peers reach this node's workers at")
@click.option("--bind", default=None,
              help="address workers listen on (default: --host)")
@click.option("--slots", default="6700,6701", show_default=True,
              help="worker ports, comma-separated")
@click.option("--data-dir", default="supervisor-data", show_default=True, type=click.Path())
@click.option("--id", "supervisor_id", default=None,
              help="supervisor id (default: kept in data dir)")
@click.option("--worker-timeout", default=30.0, show_default=True, type=float,
              help="seconds without a heartbeat before a worker is restarted")
@click.option("--pin-workers/--no-pin-workers", default=None,
              help="pin every worker to a CPU, sharing them in turn if need be; or none "
                   "[default: with a CPU for each slot, pin workers to CPUs no worker has, the "
                   "rest unpinned]")
@click.option("--blob-cache-keep", "blob_keep_secs", default=DEFAULT_KEEP_SECS, show_default=True,
              type=click.FloatRange(min=0), metavar="SECS",
              help="how long a cached blob (`stormlet blob`) that no topology here maps any "
                   "more, or an old version of one, is kept before it is removed")
@click.option("--service-port", default=NODE_SERVICE_PORT, show_default=True,
              type=click.IntRange(0, 65535),
              help="port of this node's service, through which nimbus reads its logs "
                   "(`stormlet logs`), on --bind; 0: any free port")
@ZK_SESSION_OPTION
@environment_settings
@log_file_options
def supervisor(zk: str, zk_root: str, secret_file: str | None, host: str, bind: str | None,
               slots: str, data_dir: str,
               supervisor_id: str | None, worker_timeout: float,
               pin_workers: bool | None, blob_keep_secs: float, service_port: int,
               zk_session_timeout: float, environments: EnvironmentSettings,
               log_settings: LogSettings) -> None:
    """Run a supervisor: start, watch and restart this node's workers, and serve their logs
    to nimbus."""
    from ..cluster.supervisor import Supervisor

    try:
        ports = [int(p) for p in slots.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"{slots!r} is not a comma-separated list of ports",
                                 param_hint="--slots") from None
    run_until_signal(_daemon(lambda security: Supervisor(
        zk, ports, data_dir=data_dir, host=host, zk_root=zk_root, supervisor_id=supervisor_id,
        worker_timeout=worker_timeout, security=security, bind=bind, pin_workers=pin_workers,
        zk_session_timeout=zk_session_timeout, environments=environments,
        blob_keep_secs=blob_keep_secs, service_port=service_port, log_settings=log_settings),
        secret_file, ("supervisor", data_dir, log_settings)))


@click.command()
@click.option("--port", default=8080, show_default=True, type=int, help="port to serve on")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to serve on")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="another name browsers reach the UI by (its Host header); repeatable")
@click.option("--protect-reads", is_flag=True,
              help="with a cluster secret, need the access token for pages, reads and /metrics "
                   "too (actions always need it)")
@click.option("--data-dir", default=None, type=click.Path(),
              help="where the UI writes its own log, DIR/logs/ui.log, besides stderr "
                   "[default: stderr only]")
@log_file_options
@nimbus_target
def ui(port: int, host: str, allowed_hosts: tuple[str, ...], protect_reads: bool,
       data_dir: str | None, log_settings: LogSettings, target: NimbusTarget) -> None:
    """Serve the web UI and its REST API (/api/v1/) and Prometheus metrics (/metrics) for the
    cluster whose nimbus is found in ZooKeeper (or given with --nimbus)."""
    from ..cluster.security import SECURITY_HINT, SecurityError, check_bind_address, is_loopback
    from ..ui.access import UiAccess
    from ..ui.app import UiServer
    from ..ui.source import ClusterSource

    try:
        check_bind_address(host, target.security, "the UI")
    except SecurityError as exc:
        raise click.ClickException(str(exc)) from None
    token = target.security.ui_token()
    if token is None and (protect_reads or not is_loopback(host)):
        # No cluster secret here (none, or read-only credentials): no token can be made, so
        # nothing would guard the pages.
        raise click.ClickException(f"a UI beyond loopback, or with --protect-reads, needs its "
                                   f"access token, made from the cluster secret: "
                                   f"{SECURITY_HINT}")
    if data_dir is not None:
        _log_to_file("ui", data_dir, log_settings)
    source = ClusterSource(target.client())
    try:
        access = UiAccess.for_host(host, token=token, protect_reads=protect_reads,
                                   extra_hosts=allowed_hosts)
        # Binds the port: run_until_signal starts it.
        server = UiServer(source, host, port, access=access)
    except OSError as exc:
        source.close()
        raise click.ClickException(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    click.echo(f"stormlet UI at {server.url}", err=True)
    try:
        run_until_signal(server)
    finally:
        source.close()


# ----- calls on nimbus


def _call(target: NimbusTarget, op: str, timeout: float = 15, **args: Any) -> Any:
    """``op`` on nimbus (see cluster/nimbus_client.py) as the cluster's admin, its refusal as
    the command's error."""
    from ..cluster.rpc import RpcError

    try:
        with target.client() as client:
            return client.call(op, timeout=timeout, **args)
    except RpcError as exc:
        raise click.ClickException(str(exc)) from None


_SUBMIT_HELP = f"""Submit the topology in FILE to the cluster. Its Python dependencies, if it
declares any, are installed in an environment of its own on every node that runs it; nimbus
builds it first (or finds it built) and inspects the topology in it, and this waits for that,
showing pip's progress, unless --no-wait.

With --no-wait the submission is the cluster's once this returns: its name is taken, and nimbus
keeps it in ZooKeeper, with its code copied to the standby nimbuses as a running topology's is.
If the leading nimbus stops while it prepares it, the next leader (or the same nimbus,
restarted) prepares it again from the start; only one accepted and lost within the couple of
seconds before a standby copied its code is refused, saying so. A refusal stays in `stormlet
list` for {REFUSAL_KEEP_SECS / 3600:g} hours, until the name is submitted again, or until
`stormlet kill NAME` clears it (which also abandons a submission being prepared)."""


@click.command(help=_SUBMIT_HELP)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="topology name (default: the file's stem)")
@click.option("--requirements", "requirements_file", default=None, metavar="FILE",
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="the topology's Python dependencies, a pip requirements file [default: the "
                   "project's virtualenvs/<topology>.txt (streamparse), requirements.txt or "
                   "pyproject.toml's [project].dependencies]")
@click.option("--no-wait", is_flag=True,
              help="return once nimbus has taken the submission (its name, package and config "
                   "checked), and let it build the environment and inspect the topology in the "
                   "background; `stormlet list` shows it preparing, then running, or refused "
                   "(`stormlet errors NAME` says why)")
@conf_option("config override")
@nimbus_target
def submit(file: Path, name: str | None, requirements_file: Path | None, no_wait: bool,
           conf_pairs: tuple[str, ...], target: NimbusTarget) -> None:
    from ..cluster.code import CodeError, package_topology
    from ..cluster.dependencies import DependencyError, declared
    from ..cluster.environments import BUILD_TIMEOUT_SECS

    overrides = conf_overrides(conf_pairs)
    try:
        dependencies = declared(file, requirements_file)
        code = package_topology(file, dependencies)
    except (CodeError, DependencyError) as exc:
        raise click.ClickException(str(exc)) from None
    name = name or file.stem
    timeout = 120.0
    if no_wait:
        result = _call(target, "submit", timeout=timeout, name=name, payload=code,
                       conf=overrides, wait=False)
        for line in no_wait_lines(name, result["id"], dependencies is not None):
            click.echo(line)
        return
    if dependencies is not None:
        count = len(dependencies.requirements)
        click.echo(f"{name} needs {count} Python package{'s' if count != 1 else ''} "
                   f"({dependencies.source}): nimbus builds its environment, or reuses it...")
        timeout += BUILD_TIMEOUT_SECS
    started = time.monotonic()
    if dependencies is None:
        result = _call(target, "submit", timeout=timeout, name=name, payload=code,
                       conf=overrides)
    else:
        result = _while_showing_builds(target, lambda: _call(
            target, "submit", timeout=timeout, name=name, payload=code, conf=overrides))
    environment = result.get("environment")
    if environment:
        if environment["built"]:
            click.echo(f"built environment {environment['key']} in "
                       f"{environment['build_seconds']:.1f} s")
        else:
            click.echo(f"reused environment {environment['key']} (built before in "
                       f"{environment['build_seconds']:.1f} s); submitting took "
                       f"{time.monotonic() - started:.1f} s")
    click.echo(f"submitted {name} ({result['id']})")
    for line in result.get("warnings", []):
        click.echo(f"warning: {line}", err=True)


def no_wait_lines(name: str, topology_id: str, declares_dependencies: bool) -> list[str]:
    """What ``stormlet submit --no-wait`` prints once nimbus has taken the submission."""
    work = ("builds its environment (or finds it built) and inspects it"
            if declares_dependencies else "inspects it")
    return [f"submitted {name} ({topology_id}) without waiting: nimbus {work} in the background",
            f"follow it: `stormlet list` shows it {PREPARING}, then active (or {REFUSED}); "
            f"`stormlet errors {name}` says why if it is {REFUSED}"]


def _while_showing_builds(target: NimbusTarget, submit: Callable[[], Any]) -> Any:
    """``submit()``'s result; meanwhile, every BUILD_POLL_SECS, a line for each change in the
    environment builds under way on nimbus's node: how long, and pip's last line."""
    import threading

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = submit()
        except BaseException as exc:   # raised again on the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="submit", daemon=True)
    thread.start()
    shown: dict[str, str] = {}
    while True:
        thread.join(BUILD_POLL_SECS)
        if not thread.is_alive():
            break
        try:
            builds = _call(target, "environment_builds", timeout=BUILD_POLL_SECS * 4)
        except click.ClickException:
            continue   # an older nimbus, or a moment out of reach: the submit goes on
        for line in build_progress_lines(builds, shown):
            click.echo(line)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def build_progress_lines(builds: list[dict], shown: dict[str, str]) -> list[str]:
    """A line for each build whose last pip line changed since ``shown`` (key -> the last
    line shown, updated here)."""
    lines = []
    for build in builds:
        last = build.get("last") or "starting pip"
        if shown.get(build["key"]) != last:
            shown[build["key"]] = last
            lines.append(f"  building {build['key'][:12]} ({build['seconds']:.0f} s): {last}")
    return lines


@click.command(name="list")
@nimbus_target
def list_command(target: NimbusTarget) -> None:
    """List running topologies with status, workers, uptime and errors.

    workers is how many run now, asked how many were asked for: fewer run while the cluster is
    short of free slots (after a host is lost), until nimbus spreads the topology back.

    errors counts every error the topology's workers counted since they started (and those of
    the last worker that exited on each slot); `stormlet errors NAME` shows them.

    A topology submitted with --no-wait shows as preparing while nimbus builds its environment
    and inspects it (uptime: for how long; pip's last line while it builds), then as running,
    or as refused with the reason's last line (`stormlet errors NAME` has all of it)."""
    for line in list_lines(_call(target, "list"), time.time(), shows_secrets(target)):
        click.echo(line)


def list_lines(rows: list[dict[str, Any]], now: float, secrets: bool = False) -> list[str]:
    """What ``stormlet list`` prints of nimbus's ``list`` rows. A topology's row holds counts
    and times; a submission's (cluster/submissions.py) may quote its refusal or pip, redacted
    (redaction.py) unless ``secrets``."""
    if not rows:
        return ["no topologies running"]
    shown = (lambda text: text) if secrets else redact_text
    lines = [f"{'name':<24}{'status':<10}{'workers':>8}{'asked':>6}{'executors':>10}  "
             f"{'uptime':<10}{'errors':>8}  last error"]
    for row in rows:
        last = row.get("last_error")
        last_text = f"{_duration(max(0.0, now - last))} ago" if last else "-"
        asked = row.get("workers_asked")
        uptime = _duration(row["uptime"])
        workers, executors = row["workers"], row["executors"]
        if row["status"] == PREPARING:
            workers = executors = "-"
            building = row.get("building")
            last_text = f"building its environment: {shown(building)}" if building else "-"
        elif row["status"] == REFUSED:
            workers = executors = uptime = "-"
            last_text += f": {shown(str(row.get('refusal') or ''))} (stormlet errors {row['name']})"
        lines.append(f"{row['name']:<24}{row['status']:<10}{workers:>8}"
                     f"{'-' if asked is None else asked:>6}"
                     f"{executors:>10}  {uptime:<10}"
                     f"{row.get('errors', 0):>8}  {last_text}")
    return lines


@click.command()
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="how many of the most recent errors to show")
@click.option("--stack", is_flag=True,
              help="also print each error's traceback (or a hung component's stack)")
@nimbus_target
def errors(name: str, limit: int, stack: bool, target: NimbusTarget) -> None:
    """Show a running topology's most recent errors, oldest first: time, component, task,
    worker host:port and the error. Errors of one kind beyond the first few show as one summary
    line per interval ("... and N more like it"). Credentials quoted in an error (a connection
    URL's password) are shown only to a holder of the cluster secret.

    For a topology submitted with --no-wait and refused, the refusal, against component
    (submit) and the nimbus that refused it: pip's last lines, or what the inspection found."""
    rows = _call(target, "errors", name=name, limit=limit)
    for line in error_lines(name, rows, stack, shows_secrets(target)):
        click.echo(line)


def shows_secrets(target: NimbusTarget) -> bool:
    """Whether this command may print a topology's credentials: only with the cluster secret,
    which makes it the cluster's admin. Read-only credentials, or none (a cluster without a
    secret, where anyone on the machine can call nimbus), prove nothing."""
    return target.security.holds_secret


def error_lines(name: str, rows: list[dict[str, Any]], stack: bool,
                secrets: bool) -> list[str]:
    """What ``stormlet errors`` prints of nimbus's ``errors`` rows (newest first), oldest first;
    each error's text and stack redacted (redaction.py) unless ``secrets``."""
    if not rows:
        return [f"no errors reported for {name}"]
    shown = (lambda text: text) if secrets else redact_text
    lines = [f"{'time':<20}{'component':<16}{'task':>5}  {'worker':<22}error"]
    for row in reversed(rows):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["time"]))
        worker = f"{row['host']}:{row['port']}"
        # An error of several lines (a refused submission's, ending with pip's last lines)
        # goes on under its first, indented.
        first, *more = shown(str(row["error"])).splitlines() or [""]
        lines.append(f"{when:<20}{row['component']:<16}{row['task']:>5}  {worker:<22}{first}")
        lines.extend(f"    {line}" for line in more)
        if stack and row.get("detail"):
            lines.append("    " + shown(str(row["detail"])).replace("\n", "\n    "))
    return lines


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


@click.command()
@click.argument("name")
@click.option("--wait", type=float, default=None,
              help="seconds between deactivating and removing (default: the message timeout)")
@nimbus_target
def kill(name: str, wait: float | None, target: NimbusTarget) -> None:
    """Deactivate a topology, wait, then remove it and stop its workers. A topology submitted
    with --no-wait that is being prepared, or was refused, is forgotten at once."""
    result = _call(target, "kill", name=name, wait=wait)
    if result.get("status") == "cleared":
        click.echo(f"cleared {name}: its submission, {result['was']}, is forgotten")
        return
    click.echo(f"killed {name}: deactivated now, removed after "
               f"{'the message timeout' if wait is None else f'{wait:g}s'}")


def _status_command(op: str, help_text: str) -> click.Command:
    @click.command(name=op, help=help_text)
    @click.argument("name")
    @nimbus_target
    def command(name: str, target: NimbusTarget) -> None:
        _call(target, op, name=name)
        click.echo(f"{op}d {name}")

    return command


activate = _status_command("activate", "Resume a topology's spouts.")
deactivate = _status_command("deactivate",
                             "Pause a topology's spouts (in-flight tuples still finish).")


@click.command()
@click.argument("name")
@click.option("--workers", type=int, default=None, help="new number of worker processes")
@click.option("--executors", "-e", "executor_pairs", multiple=True, metavar="COMPONENT=N",
              help="new executor count for a component (at most its task count)")
@nimbus_target
def rebalance(name: str, workers: int | None, executor_pairs: tuple[str, ...],
              target: NimbusTarget) -> None:
    """Spread a running topology over a different number of workers or executors."""
    executors = {}
    for pair in executor_pairs:
        component, sep, count = pair.partition("=")
        if not sep or not count.strip().isdigit():
            raise click.BadParameter(f"{pair!r} is not COMPONENT=N", param_hint="--executors")
        executors[component.strip()] = int(count)
    result = _call(target, "rebalance", name=name, workers=workers,
                   executors=executors)
    click.echo(f"rebalanced {name} to {result['workers']} workers")
