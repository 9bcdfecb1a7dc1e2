"""How the long-running commands end: SIGTERM (a supervisor, systemd, ``kill``) or SIGINT
(Ctrl-C) asks the daemon to stop, and the daemon stops through its own ``stop``, never by the
signal's default action or a KeyboardInterrupt.

    run_until_signal(Nimbus(...))                                  # start, wait, stop
    run_until_signal(worker, end=worker.end, ended=worker.wait)    # one that may end by itself

The handlers go in before ``start``: a signal that comes while the daemon is starting (a
supervisor rebalancing a worker it launched a moment ago) is then a request to stop like any
other, acted on once ``start`` returns, instead of killing the process half started: a worker
still drains, closes its spouts (committing their offsets) and sends its last report.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable, Protocol

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# A signal sent to a process reaches whichever of its threads the kernel picks, and Python runs
# the handler only when the main thread next runs bytecode, which a wait without a timeout never
# does: the main thread waits in slices this long, so a stop, or a worker's request for its
# stacks (worker_stacks.py), is acted on within it, whichever thread took the signal.
SIGNAL_CHECK_SECS = 0.1


class Daemon(Protocol):
    """What runs until a signal: Nimbus, Supervisor, UiServer, Worker."""

    def start(self) -> object: ...

    def stop(self) -> object: ...


def run_until_signal(daemon: Daemon, end: Callable[[str], object] | None = None,
                     ended: Callable[[float], bool] | None = None) -> None:
    """``daemon.start()``, block until SIGTERM or SIGINT, then ``daemon.stop()``.

    A daemon that can also end by itself (a worker) passes ``end``, which a signal calls with
    its name ("SIGTERM") from the handler (so it must only note the request, as
    ``Worker.end`` does), and ``ended(timeout)``, which blocks until the daemon has ended, by a
    signal or by itself (True), or ``timeout`` seconds have passed (False). An exception
    from ``start`` propagates, and ``stop`` is not called."""
    if (end is None) != (ended is None):
        raise TypeError("run_until_signal takes both end and ended, or neither")
    if end is None or ended is None:
        stopped = threading.Event()
        end, ended = (lambda _name: stopped.set()), stopped.wait
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: end(signal.Signals(signum).name))
    daemon.start()
    while not ended(SIGNAL_CHECK_SECS):
        pass
    daemon.stop()
