"""Options that several commands share, declared once, and the one parser of ``-c KEY=VALUE``.

Defaults come from the modules that own them: the ZooKeeper hosts and root from
``cluster/zk_state.py``, so that the command line and the daemons always agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from .. import config as cfg
from ..cluster.zk_state import DEFAULT_HOSTS, DEFAULT_ROOT

ZK_OPTION = click.option("--zk", envvar="STORMLET_ZK", default=DEFAULT_HOSTS, show_default=True,
                         help="ZooKeeper hosts, host:port[,host:port...]")
ZK_ROOT_OPTION = click.option("--zk-root", default=DEFAULT_ROOT, show_default=True,
                              help="the cluster's root path in ZooKeeper")
NIMBUS_OPTION = click.option("--nimbus", "nimbus_address", default=None, metavar="HOST:PORT",
                             help="talk to this nimbus instead of finding the leader in ZooKeeper")

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
