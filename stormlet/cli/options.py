"""Options that several commands share, declared once, and the one parser of ``-c KEY=VALUE``.

Defaults come from the modules that own them: the ZooKeeper hosts, root and session timeout
from ``stormlet/zookeeper.py``, so that the command line and the daemons always agree.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from .. import config as cfg
from ..cluster import environments as envs
from ..cluster.security import SECRET_FILE_ENV
from ..zookeeper import DEFAULT_HOSTS, DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT

if TYPE_CHECKING:
    from ..cluster.nimbus_client import NimbusClient
    from ..cluster.security import Security

ZK_OPTION = click.option("--zk", envvar="STORMLET_ZK", default=DEFAULT_HOSTS, show_default=True,
                         help="ZooKeeper hosts, host:port[,host:port...]")
ZK_ROOT_OPTION = click.option("--zk-root", default=DEFAULT_ROOT, show_default=True,
                              help="the cluster's root path in ZooKeeper")
ZK_SESSION_OPTION = click.option(
    "--zk-session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT, show_default=True,
    metavar="SECS", help="how long ZooKeeper keeps this daemon's session through a silent link: "
    "a dead daemon is noticed after it, a link congested for less is not taken for a dead one")
NIMBUS_OPTION = click.option("--nimbus", "nimbus_address", default=None, metavar="HOST:PORT",
                             help="talk to this nimbus instead of finding the leader in ZooKeeper")

SECRET_OPTION = click.option(
    "--secret-file", envvar=SECRET_FILE_ENV, default=None, type=click.Path(dir_okay=False),
    help="the cluster secret (env STORMLET_SECRET_FILE; make one with `stormlet secret "
         "generate`); without one, daemons serve on loopback only")


def load_security(secret_file: str | None) -> Security:
    """The process's Security from ``--secret-file``; an unusable file is the command's error."""
    from ..cluster.security import Security, SecurityError

    try:
        return Security.load(secret_file)
    except SecurityError as exc:
        raise click.ClickException(str(exc)) from None


@dataclass(frozen=True)
class NimbusTarget:
    """Which cluster a command calls, and with what credentials."""

    zk: str
    zk_root: str
    nimbus_address: str | None
    security: Security

    def client(self) -> NimbusClient:
        """A client calling as the cluster's admin (the secret file's holder is one)."""
        from ..cluster.nimbus_client import NimbusClient

        return NimbusClient(self.zk, self.zk_root, self.nimbus_address, self.security)


def nimbus_target(command: Callable) -> Callable:
    """--zk, --zk-root, --nimbus and --secret-file, given to ``command`` as ``target``."""
    @functools.wraps(command)
    def with_target(*args: Any, zk: str, zk_root: str, nimbus_address: str | None,
                    secret_file: str | None, **kwargs: Any) -> Any:
        target = NimbusTarget(zk, zk_root, nimbus_address, load_security(secret_file))
        return command(*args, target=target, **kwargs)

    for option in (SECRET_OPTION, NIMBUS_OPTION, ZK_ROOT_OPTION, ZK_OPTION):
        with_target = option(with_target)
    return with_target


def environment_settings(command: Callable) -> Callable:
    """The options of a daemon that builds topologies' environments (nimbus, supervisor),
    given to ``command`` as ``environments`` (an ``EnvironmentSettings``, environments.py)."""
    @functools.wraps(command)
    def with_settings(*args: Any, environments_dir: Path | None, environment_ttl: float,
                      pip_index_url: str | None, pip_find_links: tuple[str, ...],
                      **kwargs: Any) -> Any:
        try:
            settings = envs.EnvironmentSettings(
                directory=environments_dir or envs.default_directory(), ttl=environment_ttl,
                index_url=pip_index_url, find_links=tuple(pip_find_links))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--environment-ttl") from None
        return command(*args, environments=settings, **kwargs)

    options = (
        click.option("--environments-dir", envvar=envs.DIRECTORY_ENV, default=None,
                     type=click.Path(file_okay=False, path_type=Path),
                     help="where this node keeps the virtualenvs of topologies that declare "
                          "Python dependencies, shared by every daemon on the node (env "
                          f"{envs.DIRECTORY_ENV}) [default: ~/.cache/stormlet/environments]"),
        click.option("--environment-ttl", envvar="STORMLET_ENVIRONMENT_TTL", type=float,
                     default=envs.DEFAULT_TTL_SECS, show_default=True, metavar="SECS",
                     help="remove a topology environment no worker on this node has used for "
                          "this long (env STORMLET_ENVIRONMENT_TTL)"),
        click.option("--pip-index-url", envvar="STORMLET_PIP_INDEX_URL", default=None,
                     metavar="URL", help="the package index topologies' dependencies are "
                     f"installed from, or {envs.NO_INDEX!r} for none (only the wheels a "
                     "topology ships in wheels/ and --pip-find-links) (env "
                     "STORMLET_PIP_INDEX_URL) [default: pip's own configuration: "
                     "PIP_INDEX_URL, pip.conf]"),
        click.option("--pip-find-links", envvar="STORMLET_PIP_FIND_LINKS", multiple=True,
                     metavar="DIR|URL", help="more wheels for topologies' dependencies; "
                     "repeatable (env STORMLET_PIP_FIND_LINKS, space-separated)"),
    )
    for option in reversed(options):
        with_settings = option(with_settings)
    return with_settings


FAILED_DIR_OPTION = click.option(
    "--failed-dir", required=True, envvar="STORMLET_FAILED_DIR", type=click.Path(path_type=Path),
    help="the directory spouts write failed messages to (env STORMLET_FAILED_DIR)")
TOPOLOGY_OPTION = click.option("--topology", default=None, help="only this topology")
COMPONENT_OPTION = click.option("--component", default=None,
                                help="only this component (the spout)")
REASON_OPTION = click.option("--reason", default=None, metavar="KIND",
                             help="only this reason kind: timeout, fail, error")


def conf_option(help_text: str) -> Callable[[Callable], Callable]:
    """``-c KEY=VALUE``, repeatable, into the parameter ``conf_pairs`` (``conf_overrides`` turns
    it into a config dict). Each command says in its own words what the overrides apply to."""
    return click.option("-c", "conf_pairs", multiple=True, metavar="KEY=VALUE", help=help_text)


def conf_overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    """The config a command's ``-c`` options give; a malformed pair is the command's error."""
    try:
        return cfg.parse_cli_pairs(pairs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="-c") from None


def log_file_options(command: Callable) -> Callable:
    """--log-format, --log-max-bytes and --log-backups (config.py's stormlet.log.* settings and
    their defaults), given to ``command`` as ``log_settings`` (logging_setup.LogSettings): how
    a daemon, or a worker its supervisor starts, writes its log file."""
    from ..cluster.logging_setup import (
        LOG_BACKUPS_OPTION,
        LOG_FORMAT_OPTION,
        LOG_MAX_BYTES_OPTION,
        LogSettings,
    )

    @functools.wraps(command)
    def with_settings(*args: Any, log_format: str, log_max_bytes: int, log_backups: int,
                      **kwargs: Any) -> Any:
        try:
            settings = LogSettings(log_max_bytes, log_backups, log_format)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        return command(*args, log_settings=settings, **kwargs)

    defaults = cfg.DEFAULTS
    options = (
        click.option(LOG_FORMAT_OPTION, "log_format", envvar="STORMLET_LOG_FORMAT",
                     type=click.Choice(cfg.LOG_FORMATS),
                     default=defaults[cfg.STORMLET_LOG_FORMAT].default, show_default=True,
                     help="the log file's lines: text, or json (one object per line, for log "
                          "shippers) (env STORMLET_LOG_FORMAT)"),
        click.option(LOG_MAX_BYTES_OPTION, "log_max_bytes", envvar="STORMLET_LOG_MAX_BYTES",
                     type=int, default=defaults[cfg.STORMLET_LOG_MAX_BYTES].default,
                     show_default=True, metavar="BYTES",
                     help="rotate the log file at this size (env STORMLET_LOG_MAX_BYTES)"),
        click.option(LOG_BACKUPS_OPTION, "log_backups", envvar="STORMLET_LOG_BACKUPS", type=int,
                     default=defaults[cfg.STORMLET_LOG_BACKUPS].default, show_default=True,
                     metavar="N", help="rotated log files kept (env STORMLET_LOG_BACKUPS)"),
    )
    for option in reversed(options):
        with_settings = option(with_settings)
    return with_settings
