"""How the UI's server keeps answering while clients hold many connections open doing nothing.

Waitress alone stops accepting at ``connection_limit`` (100, counting its own two sockets) and
closes an idle connection only after ``channel_timeout`` (120 s), and a connection that sends a
byte now and then is never idle: 99 half-open requests stopped the UI. A timeout alone would not
help, since the limit is reached within it. So ``GuardedServer``:

- never stops accepting: when a new connection puts its client address over ``per_client``, or
  the server over ``max_connections``, it closes the connection (of that client, or of anyone)
  that has kept it waiting longest for a request. A connection whose request is being served is
  never closed; if every other one is, the new connection is closed instead. A legitimate
  client sends its request as soon as it connects, so it is the newest, not the one closed;
- closes a connection whose request is not complete (headers and body) ``request_secs`` after
  it connected or sent the request's first byte, however slowly it keeps sending;
- leaves a kept-alive connection between requests (a browser's) for ``idle_secs``.

    server = create_server(app, host="127.0.0.1", port=0, limits=ConnectionLimits())
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

log = logging.getLogger(__name__)

# Waitress counts its listening socket and its trigger among its connections.
_OWN_SOCKETS = 2
# At most one warning this often about the connections closed meanwhile: under an attack,
# one line per connection would flood the log.
REPORT_SECS = 60.0


@dataclass(frozen=True)
class ConnectionLimits:
    """``max_connections``: open at once, in all. ``per_client``: open at once from one
    address (a browser opens at most 6). ``request_secs``: from connecting, or from a request's
    first byte, to the whole request. ``idle_secs``: a kept-alive connection between requests.
    ``max_body_bytes``: a request body (the UI's are a few hundred bytes of JSON or a form)."""

    max_connections: int = 500
    per_client: int = 16
    request_secs: float = 10.0
    idle_secs: float = 60.0
    max_body_bytes: int = 64 * 1024

    def adjustments(self) -> dict[str, Any]:
        """Waitress's settings that carry these limits."""
        return {
            # Above ours, so waitress never stops accepting: GuardedServer makes room instead.
            "connection_limit": self.max_connections + _OWN_SOCKETS + 1,
            "channel_timeout": self.idle_secs,
            # How often maintenance() looks for requests past their time.
            "cleanup_interval": max(0.5, min(self.request_secs, self.idle_secs) / 4),
            "max_request_body_size": self.max_body_bytes,
        }


class GuardedChannel(HTTPChannel):
    """A connection that knows since when it has kept the server waiting for a request."""

    server: GuardedServer

    def __init__(self, server: GuardedServer, sock: Any, addr: Any, adj: Adjustments,
                 map: dict | None = None):
        super().__init__(server, sock, addr, adj, map=map)
        # A new connection is there to send a request: the wait counts from now. None: between
        # requests (kept alive, idle), or being served.
        self.request_began: float | None = self.creation_time
        server.admit(self)

    def received(self, data: bytes) -> bool:
        if self.request_began is None and self.request is None and data:
            self.request_began = time.time()
        taken = super().received(data)
        if self.request is None:   # every byte so far parsed into whole requests
            self.request_began = None
        return taken

    @property
    def client(self) -> str:
        return str(self.addr[0]) if isinstance(self.addr, tuple) else str(self.addr)

    @property
    def in_service(self) -> bool:
        """A request of this connection is queued or being answered: not ours to close."""
        return bool(self.requests)

    @property
    def waiting_since(self) -> float:
        """Since when this connection has kept the server waiting: its unfinished request's
        start, or its last activity when idle between requests."""
        return self.request_began if self.request_began is not None else self.last_activity


class GuardedServer(TcpWSGIServer):
    """Waitress's TCP server with the limits of ``limits`` (see the module's doc)."""

    channel_class = GuardedChannel
    # What waitress sets and its stubs (types-waitress) leave out or get wrong.
    active_channels: dict[int, HTTPChannel]  # type: ignore[assignment]  # (one channel there)
    effective_port: int
    _map: dict[int, Any]

    def __init__(self, application: Any, limits: ConnectionLimits, **kw: Any):
        self.limits = limits
        self._closed = 0          # connections closed by the limits since the last warning
        self._next_report = 0.0
        super().__init__(application, **kw)

    def admit(self, new: GuardedChannel) -> None:
        """Make room for ``new``, just accepted: over a limit, close the connection that has
        kept the server waiting longest (of ``new``'s client, then of anyone)."""
        channels = [c for c in self.active_channels.values()
                    if isinstance(c, GuardedChannel) and not c.will_close]
        same_client = [c for c in channels if c.client == new.client]
        if len(same_client) > self.limits.per_client:
            self._shed(same_client, new, f"client {new.client} holds more than "
                                         f"{self.limits.per_client} connections")
        channels = [c for c in channels if c.connected]
        if len(channels) > self.limits.max_connections:
            self._shed(channels, new, f"more than {self.limits.max_connections} connections "
                                      f"are open")

    def _shed(self, channels: list[GuardedChannel], new: GuardedChannel, why: str) -> None:
        idle = [c for c in channels if not c.in_service and c.connected]
        if idle:
            victim = min(idle, key=lambda c: c.waiting_since)
            log.debug("UI: %s; closed the connection from %s that had kept it waiting longest",
                      why, victim.client)
        else:
            victim = new
            log.debug("UI: %s, each being served; closed the new one from %s", why, new.client)
        victim.handle_close()
        self._closed += 1

    def maintenance(self, now: float) -> None:
        """Waitress's (idle connections past ``channel_timeout``), and every connection whose
        request is still incomplete ``request_secs`` after it began."""
        super().maintenance(now)  # type: ignore[arg-type]  # waitress passes time.time()
        cutoff = now - self.limits.request_secs
        late = [c for c in self.active_channels.values()
                if isinstance(c, GuardedChannel) and not c.in_service
                and c.request_began is not None and c.request_began < cutoff]
        for channel in late:
            log.debug("UI: closed the connection from %s: no complete request within %gs",
                      channel.client, self.limits.request_secs)
            channel.handle_close()
        self._closed += len(late)
        if self._closed and now >= self._next_report:
            limits = self.limits
            log.warning("UI: closed %d connections that kept it waiting for a request (limits: "
                        "%d per client address, %d in all, %gs to send a request); a client may "
                        "be holding connections open on purpose (connections.py)",
                        self._closed, limits.per_client, limits.max_connections,
                        limits.request_secs)
            self._closed, self._next_report = 0, now + REPORT_SECS


def create_server(application: Any, host: str, port: int, limits: ConnectionLimits,
                  **kw: Any) -> GuardedServer:
    """Like ``waitress.create_server`` for one TCP address, with ``limits``."""
    adjustments = Adjustments(host=host, port=port, **{**limits.adjustments(), **kw})
    return GuardedServer(application, limits, adj=adjustments)
