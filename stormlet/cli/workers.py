"""``stormlet stack``, ``stormlet profile``, ``stormlet restart-worker``: look into one worker of
a running topology, or restart it, through nimbus and the worker's supervisor
(cluster/introspection_service.py), as Storm's "dynamic worker profiling" does.

    stormlet stack wordcount 10.0.0.5:6700              # every thread's stack, now
    stormlet stack wordcount --component split          # the worker running split
    stormlet profile wordcount 10.0.0.5:6700 --seconds 30 -o flame.svg
    stormlet restart-worker wordcount 10.0.0.5:6700 --reason "stuck on a lock"

A worker is named HOST:PORT as ``stormlet logs --list`` and the UI show it (or
SUPERVISOR:PORT), or by a component it runs (``--task`` when several workers run it). Each
needs the cluster's admin (the secret file) and is recorded in the topology's event history
(``stormlet events``) with who asked (user@host).

A stack dump is the worker's own answer to a signal (py-spy's when it cannot answer); a profile
is py-spy's, an SVG flame graph with a tower per thread (executor threads are named
TOPOLOGY:COMPONENT:TASKS) that a browser opens; it also stays among the worker's files on its
node (``stormlet logs TOPOLOGY --list``).
"""

from __future__ import annotations

import functools
import getpass
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from .options import NimbusTarget, nimbus_target

# How often `stormlet profile` asks whether its profile is done.
POLL_SECS = 1.0


def asked_by() -> str:
    """Who runs this command, for the event history: user@host."""
    try:
        user = getpass.getuser()
    except Exception:   # no name for this uid (a container): the uid says enough
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def worker_choice(command: Callable) -> Callable:
    """TOPOLOGY, the optional WORKER, --component and --task, given to ``command`` as
    ``name`` and ``choice`` (the arguments nimbus takes to find the worker)."""
    @functools.wraps(command)
    def with_choice(*args: Any, name: str, worker: str | None, component: str | None,
                    task: int | None, **kwargs: Any) -> Any:
        if worker is not None and component is not None:
            raise click.UsageError("name the worker either as HOST:PORT or by --component")
        if task is not None and component is None:
            raise click.UsageError("--task goes with --component")
        choice = {key: value for key, value in (("worker", worker), ("component", component),
                                                 ("task", task)) if value is not None}
        return command(*args, name=name, choice=choice, **kwargs)

    for option in (click.option("--task", type=int, default=None,
                                help="with --component: the worker running this task of it"),
                   click.option("--component", default=None,
                                help="the worker running this component (if only one does)"),
                   click.argument("worker", required=False, metavar="[HOST:PORT]"),
                   click.argument("name", metavar="TOPOLOGY")):
        with_choice = option(with_choice)
    return with_choice


def _call(target: NimbusTarget, op: str, timeout: float, **args: Any) -> Any:
    from ..cluster.rpc import RpcError

    try:
        with target.client() as client:
            return client.call(op, timeout=timeout, **args)
    except RpcError as exc:
        raise click.ClickException(str(exc)) from None


@click.command()
@worker_choice
@nimbus_target
def stack(name: str, choice: dict[str, Any], target: NimbusTarget) -> None:
    """Print every thread's stack in one worker of TOPOLOGY (a name or an id), innermost call
    first, each thread with its name: an executor's is TOPOLOGY:COMPONENT:TASKS."""
    from ..cluster.introspection_service import CALL_SLACK_SECS, STACKS_CALL_SECS

    answer = _call(target, "worker_stacks", STACKS_CALL_SECS + CALL_SLACK_SECS, name=name,
                   asked_by=asked_by(), **choice)
    click.echo(f"stacks of worker {answer['host']}:{answer['port']} (pid {answer['pid']}) of "
               f"{answer['topology_id']}", err=True)
    click.echo(answer["text"], nl=not answer["text"].endswith("\n"))


@click.command()
@worker_choice
@click.option("--seconds", type=int, required=True, metavar="N",
              help="how long to profile: 1 to 300 seconds")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="where to write the flame graph (SVG) [default: TOPOLOGY-HOST-PORT-profile-"
                   "TIME.svg here]")
@click.option("--rate", type=int, default=None, metavar="N",
              help="samples a second (py-spy's; default 100)")
@click.option("--idle", is_flag=True,
              help="include threads that wait (for tuples, a lock, the network): where time "
                   "goes, not only where the CPU goes")
@click.option("--native", is_flag=True, help="include C and Cython frames (slower)")
@nimbus_target
def profile(name: str, choice: dict[str, Any], seconds: int, output: Path | None,
            rate: int | None, idle: bool, native: bool, target: NimbusTarget) -> None:
    """Profile one worker of TOPOLOGY for N seconds with py-spy and write its CPU profile as
    an SVG flame graph, a tower per thread (open it in a browser)."""
    from ..cluster.introspection_service import CALL_SLACK_SECS, profile_call_secs
    from ..cluster.rpc import NimbusUnavailable, RpcError

    options = {"rate": rate} if rate is not None else {}
    started = _call(target, "worker_profile", 15, name=name, seconds=seconds, idle=idle,
                    native=native, asked_by=asked_by(), **options, **choice)
    where = f"{started['host']}:{started['port']}"
    click.echo(f"profiling worker {where} of {started['topology_id']} for {started['seconds']} "
               f"s...", err=True)
    deadline = time.monotonic() + profile_call_secs(started["seconds"]) + CALL_SLACK_SECS
    try:
        with target.client() as client:
            while True:
                time.sleep(POLL_SECS)
                try:
                    state = client.call("worker_profile_result", profile=started["profile"])
                except NimbusUnavailable:
                    if time.monotonic() > deadline:
                        raise
                    continue   # a moment without nimbus: the profile goes on
                if state["state"] != "running":
                    break
                if time.monotonic() > deadline:
                    raise click.ClickException(f"the profile of worker {where} is not done "
                                               f"after {profile_call_secs(seconds):.0f} s")
    except RpcError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo(f"stopped waiting; the profile goes on, and its flame graph will be among "
                   f"the worker's files (stormlet logs {name} --list)", err=True)
        sys.exit(130)
    if state["state"] == "failed":
        raise click.ClickException(state["error"])
    node_file = str(state.get("file") or "")
    if state.get("svg") is None:
        raise click.ClickException(f"the flame graph ({state.get('size')} bytes) is too large "
                                   f"to send; it is {node_file} on {state['host']}")
    if output is None:
        output = Path(f"{name}-{state['host']}-{state['port']}-{node_file.rsplit('/', 1)[-1]}")
    output.write_bytes(state["svg"])
    click.echo(f"wrote {output} ({len(state['svg']) / 1024:.0f} kB); also kept on "
               f"{state['host']} as {node_file}", err=True)


@click.command(name="restart-worker")
@worker_choice
@click.option("--reason", default=None, metavar="TEXT",
              help="why, for the event history and the supervisor's log")
@nimbus_target
def restart_worker(name: str, choice: dict[str, Any], reason: str | None,
                   target: NimbusTarget) -> None:
    """Restart one worker of TOPOLOGY: its supervisor stops it (as for a kill, tuples in flight
    are replayed by their spouts) and starts it again at once on the same slot."""
    from ..cluster.introspection_service import CALL_SLACK_SECS, RESTART_CALL_SECS

    answer = _call(target, "worker_restart", RESTART_CALL_SECS + CALL_SLACK_SECS, name=name,
                   reason=reason, asked_by=asked_by(), **choice)
    click.echo(f"restarted worker {answer['host']}:{answer['port']} of {answer['topology_id']} "
               f"(pid {answer['pid']} stopped; its supervisor starts a new one)")
