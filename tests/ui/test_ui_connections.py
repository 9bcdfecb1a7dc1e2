"""The UI keeps answering while clients hold connections open without finishing a request
(ui/connections.py): half-open requests, requests trickled a byte at a time, from one address
and from many. Real sockets on loopback; every loop is bounded in count and in time."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from support import wait_until
from ui_support import ui_cluster

from stormlet.ui.app import UiServer, serve
from stormlet.ui.connections import ConnectionLimits

# A request line and the start of a header, and then nothing: the request never completes.
PARTIAL = b"GET /api/v1/cluster/summary HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Wait: "
# How long a fresh request may take while the server is held: promptly, not after a timeout.
PROMPT_SECS = 2.0


@contextmanager
def ui(limits: ConnectionLimits | None = None) -> Iterator[UiServer]:
    with ui_cluster(limits=limits) as (_cluster, server):
        yield server


def half_open(stack: ExitStack, port: int, count: int, sources: int = 1) -> list[socket.socket]:
    """``count`` connections that send PARTIAL, from ``sources`` loopback addresses (127.0.0.2
    and on: all of 127/8 is loopback on Linux) in turn, or from 127.0.0.1 alone."""
    sockets = []
    for i in range(count):
        source = f"127.0.0.{2 + i % sources}" if sources > 1 else "127.0.0.1"
        sock = stack.enter_context(socket.create_connection(
            ("127.0.0.1", port), timeout=5, source_address=(source, 0)))
        sock.sendall(PARTIAL)
        sockets.append(sock)
    return sockets


class Tricklers:
    """``count`` connections that each send one byte of an endless header every ``every``
    seconds, reconnecting when the server closes one, until stopped."""

    def __init__(self, port: int, count: int, every: float = 0.1):
        self.port, self.count, self.every = port, count, every
        self.reconnects = 0
        self.rounds = 0   # rounds in which every connection sent its byte
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tricklers", daemon=True)

    def __enter__(self) -> Tricklers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.sendall(PARTIAL)
        return sock

    def _run(self) -> None:
        sockets = [self._connect() for _ in range(self.count)]
        try:
            while not self._stop.wait(self.every):
                for i, sock in enumerate(sockets):
                    try:
                        sock.sendall(b"x")
                    except OSError:   # closed by the server: come back, as an attacker would
                        sock.close()
                        sockets[i] = self._connect()
                        self.reconnects += 1
                self.rounds += 1
        finally:
            for sock in sockets:
                sock.close()


def summary_secs(port: int, source: str = "127.0.0.1") -> float:
    """How long a fresh connection takes to read the cluster summary; fails if it is refused
    or takes longer than PROMPT_SECS."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PROMPT_SECS,
                                            source_address=(source, 0))
    try:
        connection.request("GET", "/api/v1/cluster/summary")
        response = connection.getresponse()
        assert response.status == 200, response.status
        response.read()
    finally:
        connection.close()
    return time.monotonic() - started


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (reads until then)."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_the_ui_answers_through_hundreds_of_half_open_and_trickling_connections():
    # Waitress's defaults stopped accepting at ~99 such connections: this read hung.
    with ui() as server, ExitStack() as stack:
        half_open(stack, server.port, 300)
        with Tricklers(server.port, 20) as tricklers:
            for _ in range(5):
                # Each summary read while the tricklers, all connected, go on sending.
                done = tricklers.rounds
                wait_until(lambda: tricklers.rounds > done, 5, "a round of trickled bytes")
                assert summary_secs(server.port) < PROMPT_SECS


def test_many_clients_under_the_per_client_cap_still_leave_room():
    # 200 connections from 100 addresses, each address under its cap: the overall limit
    # closes the longest waiting instead of refusing the newcomer.
    limits = ConnectionLimits(max_connections=64)
    with ui(limits) as server, ExitStack() as stack:
        sockets = half_open(stack, server.port, 200, sources=100)
        for source in ("127.0.0.1", "127.0.0.2", "127.0.0.250"):
            assert summary_secs(server.port, source) < PROMPT_SECS
        # The first connections, which waited longest, were the ones closed.
        assert closed_by_server(sockets[0], within=2)


def test_an_unfinished_request_is_closed_after_its_time_however_slowly_it_is_sent(caplog):
    limits = ConnectionLimits(request_secs=0.5)
    with caplog.at_level(logging.WARNING, "stormlet.ui.connections"), ui(limits) as server, \
            ExitStack() as stack:
        silent = stack.enter_context(socket.create_connection(("127.0.0.1", server.port)))
        partial = half_open(stack, server.port, 1)[0]
        with Tricklers(server.port, 1, every=0.05) as trickler:
            assert closed_by_server(silent, within=5)
            assert closed_by_server(partial, within=5)
            wait_until(lambda: trickler.reconnects >= 1, 5,
                       "the server to close a trickled request after request_secs", interval=0.05)
    # The operator hears of it, once for all of them.
    warnings = [r.getMessage() for r in caplog.records if r.name == "stormlet.ui.connections"]
    assert len(warnings) == 1 and "kept it waiting for a request" in warnings[0]


def test_a_kept_alive_connection_between_requests_is_not_cut_at_the_request_time():
    limits = ConnectionLimits(request_secs=0.5)
    with ui(limits) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            for i in range(2):
                if i:
                    time.sleep(1.0)   # idle past request_secs: a browser between two refreshes
                # http.client reuses its open socket: had the server closed it, this raises.
                connection.request("GET", "/api/v1/cluster/summary")
                response = connection.getresponse()
                assert response.status == 200
                response.read()
        finally:
            connection.close()


def test_one_client_over_its_cap_loses_its_longest_waiting_connection():
    limits = ConnectionLimits(per_client=4)
    with ui(limits) as server, ExitStack() as stack:
        sockets = half_open(stack, server.port, limits.per_client + 1)
        assert closed_by_server(sockets[0], within=2)
        assert not closed_by_server(sockets[-1], within=0.3)


class Blocking:
    """A source whose cluster summary waits for ``release``: requests stay in service."""

    mode = "local"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.serving: list[int] = []   # one entry a request being answered (append is atomic)

    def cluster_summary(self) -> dict:
        self.serving.append(threading.get_ident())
        self.release.wait(10)
        return {"mode": self.mode, "nimbuses": [], "supervisors": []}

    def topologies(self) -> list:
        return []


def test_connections_being_served_are_never_closed_for_a_newcomer():
    source = Blocking()
    limits = ConnectionLimits(per_client=2)
    server = serve(source, "127.0.0.1", 0, limits=limits)
    try:
        with ExitStack() as stack:
            served = []
            for _ in range(2):
                sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.port)))
                sock.sendall(b"GET /api/v1/cluster/summary HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                served.append(sock)
            # Being answered, each request is still its connection's: in service.
            wait_until(lambda: len(source.serving) == 2, 5, "both requests being answered")
            newcomer = stack.enter_context(socket.create_connection(("127.0.0.1", server.port)))
            assert closed_by_server(newcomer, within=2)
            source.release.set()
            for sock in served:
                sock.settimeout(5)
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        source.release.set()
        server.stop()
