"""A daemon run by ``run_until_signal`` stops on SIGTERM even when the kernel hands the signal to
one of its other threads (as it may, for a signal sent to a process): the main thread, which
alone runs Python's handlers, must not wait where the signal cannot wake it.

The child process blocks the stop signals on its main thread before it waits, so every signal
is delivered to its other thread, every time, not by luck of scheduling.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from support import wait_until

CHILD = textwrap.dedent('''
    import signal, sys, threading, time
    from pathlib import Path

    from stormlet.cli.signals import STOP_SIGNALS, run_until_signal

    HERE = Path(sys.argv[1])

    class Daemon:
        def start(self):
            # A thread that takes signals (it leaves the mask it inherits open)...
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
            # ...and a main thread that does not: the kernel must deliver them there.
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            (HERE / "started").touch()

        def stop(self):
            (HERE / "stopped").touch()

    run_until_signal(Daemon())
''')


def test_a_signal_taken_by_another_thread_still_stops_the_daemon(tmp_path: Path):
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)],
                               cwd=Path(__file__).resolve().parents[2])
    try:
        wait_until(lambda: (tmp_path / "started").exists() or process.poll() is not None, 30,
                   "the daemon to start")
        assert process.poll() is None
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert (tmp_path / "stopped").exists()
        # Within a few of the main thread's slices, not at the end of the other thread's sleep.
        assert time.monotonic() - signalled < 5
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
