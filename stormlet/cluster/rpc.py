"""Nimbus's request/reply protocol over ZeroMQ: REQ clients, one ROUTER server.

A request is two frames, the operation's name (ASCII) and its arguments (a msgpack map), and
for an operation that takes one, a third: its payload (raw bytes, such as a code package, passed
to the handler as ``payload``). The reply is one frame, a msgpack map:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "message"}``.

The server never stops answering. A frame over the largest limit of any operation is refused
by the socket before it is buffered (``zmq.MAXMSGSIZE``: the sender is disconnected); a request
with the wrong number of frames, an unknown operation, arguments or payload over that
operation's size limit, arguments of the wrong shape, or arguments that decode to too many lists
and maps gets an error reply; a message without a REQ envelope is dropped. Arguments are
therefore small (64 kB unless an operation says otherwise) and decode to at most ~20× their size
(a 3-byte string becomes a ~50-byte object) plus ~100 bytes a list or map; bulk bytes travel as
the payload, which is never decoded. Operations marked ``slow`` (submit, which runs the user's
code to inspect it) run on a small pool, so the rest keep being answered meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, Callable

import msgpack
import zmq

from .security import (
    ADMIN,
    ADMIN_USER,
    DAEMON,
    HANDSHAKE_FAILED_EVENTS,
    READ,
    RPC_DOMAIN,
    WORKER,
    CurveKeys,
    Security,
    permits,
)

__all__ = ["ADMIN", "DAEMON", "READ", "WORKER", "NOT_LEADER", "NimbusUnavailable", "Operation",
           "RpcError", "RpcServer", "call"]

log = logging.getLogger(__name__)

# How a standby nimbus begins its answer to a request only the leader may serve.
NOT_LEADER = "this nimbus is a standby"


DEFAULT_MAX_BYTES = 64 * 1024
# Lists and maps a request's arguments may decode to: the bound on what a frame expands to (an
# empty array is one byte on the wire and ~64 in memory).
DEFAULT_MAX_CONTAINERS = 10_000
SLOW_WORKERS = 2
# Slow requests waiting or running beyond which more are refused as busy.
MAX_SLOW_BACKLOG = 8


_SERVER_NUMBERS = itertools.count()


class RpcError(Exception):
    """The server refused or failed a request; the message is the server's."""


class NimbusUnavailable(RpcError):
    """No answer from nimbus in time."""


@dataclass(frozen=True)
class Operation:
    """One operation a server answers: its handler (called with the request's arguments as
    keywords), who may call it, and how large its arguments may be."""

    handler: Callable[..., Any]
    role: str = ADMIN
    max_bytes: int = DEFAULT_MAX_BYTES
    max_containers: int = DEFAULT_MAX_CONTAINERS
    max_payload_bytes: int = 0    # 0: the operation takes no payload
    slow: bool = False
    # What a caller other than an admin gets of the result (credentials redacted, say); None:
    # the result as it is.
    shown_to_others: Callable[[Any], Any] | None = None
    # Arguments the handler gets, over the caller's own, for a caller other than an admin (a
    # search that must match only what such a caller may see, say).
    others_arguments: dict[str, Any] | None = None


def _shown_to_others(operation: Operation) -> Operation:
    """``operation`` answering with what its ``shown_to_others`` makes of its result."""
    handler, shown = operation.handler, operation.shown_to_others
    assert shown is not None
    imposed = operation.others_arguments or {}
    return replace(operation,
                   handler=lambda **arguments: shown(handler(**{**arguments, **imposed})))


def call(address: str, op: str, timeout: float = 30.0, payload: bytes | None = None,
         credentials: CurveKeys | None = None, **args: Any) -> Any:
    """``op`` on the server at ``address``, presenting ``credentials`` (see
    ``Security.rpc_client_keys``); its result, or ``RpcError`` with its message."""
    context: zmq.Context = zmq.Context.instance()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
    monitor = None
    if credentials is not None:
        credentials.apply(sock)
        monitor = sock.get_monitor_socket(HANDSHAKE_FAILED_EVENTS)
    try:
        sock.connect(address)
        request = [op.encode("ascii"), msgpack.packb(args, use_bin_type=True)]
        try:
            sock.send_multipart(request if payload is None else [*request, payload])
        except zmq.Again:
            # No connection took it within the timeout: a server refusing the handshake drops
            # the connection, and until ZeroMQ reconnects there is none to queue on.
            raise NimbusUnavailable(f"nimbus at {address} did not take the request within "
                                    f"{timeout:g}s") from None
        reply = msgpack.unpackb(_receive(sock, monitor, address, timeout), raw=False)
    finally:
        if monitor is not None:
            sock.disable_monitor()
            monitor.close(linger=0)
        sock.close(linger=0)
    if not isinstance(reply, dict):
        raise RpcError(f"nimbus at {address} sent a malformed reply")
    if not reply.get("ok"):
        raise RpcError(reply.get("error", "request failed"))
    return reply.get("result")


def _receive(sock: zmq.Socket, monitor: zmq.Socket | None, address: str, timeout: float) -> bytes:
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    if monitor is not None:
        poller.register(monitor, zmq.POLLIN)
    ready = dict(poller.poll(int(timeout * 1000)))
    if sock in ready:
        return sock.recv()
    if monitor is not None and monitor in ready:
        raise RpcError(f"nimbus at {address} refused this client's credentials: is the secret "
                       f"file the cluster's?")
    raise NimbusUnavailable(f"nimbus at {address} did not answer within {timeout:g}s")


def decode_arguments(frame: bytes, max_containers: int) -> dict[str, Any]:
    """A request's arguments, refusing (``ValueError``) anything but a map with string keys and
    anything that decodes to more than ``max_containers`` lists and maps."""
    containers = itertools.count()

    def counted(container: Any) -> Any:
        if next(containers) >= max_containers:
            raise _TooManyContainers(f"arguments hold more than {max_containers} lists and maps")
        return container

    try:
        arguments = msgpack.unpackb(frame, raw=False, strict_map_key=False, list_hook=counted,
                                    object_hook=counted)
    except _TooManyContainers as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:   # msgpack's ExtraData, FormatError, StackError, a non-str key...
        raise ValueError(f"arguments are not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
        raise ValueError("arguments are not a map of names to values")
    return arguments


class _TooManyContainers(Exception):
    pass


def _error(message: str) -> bytes:
    return msgpack.packb({"ok": False, "error": message}, use_bin_type=True)


class RpcServer:
    """Answers ``operations`` on a ROUTER socket bound to ``address`` until ``stopping`` is set.

    ``serve()`` runs the loop on the calling thread; slow operations run on a pool and their
    replies come back to that thread through an inproc socket (ZeroMQ sockets are not shared
    between threads)."""

    def __init__(self, address: str, operations: dict[str, Operation],
                 stopping: threading.Event, security: Security | None = None,
                 topology_ids: Callable[[], AbstractSet[str]] = set, domain: str = RPC_DOMAIN):
        self.operations = operations
        self.stopping = stopping
        self._secured = security is not None and security.enabled
        context: zmq.Context = zmq.Context.instance()
        self._socket = context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if security is not None:
            security.secure_rpc_server(self._socket, topology_ids, domain)
        self._socket.setsockopt(zmq.MAXMSGSIZE, max(max(op.max_bytes, op.max_payload_bytes)
                                                    for op in operations.values()))
        self._socket.bind(address)
        # Where it listens: ``address`` with a port of "*" resolved.
        self.endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        # A name never used before in this process: a closed server's inproc endpoint is
        # released only once ZeroMQ reaps its socket, and a new server may reuse its id().
        self._replies_address = f"inproc://rpc-replies-{next(_SERVER_NUMBERS)}"
        self._replies = context.socket(zmq.PULL)
        self._replies.bind(self._replies_address)
        self._pool = ThreadPoolExecutor(SLOW_WORKERS, thread_name_prefix="rpc-slow")
        self._slow_backlog = 0
        self._backlog_lock = threading.Lock()

    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._replies, zmq.POLLIN)
        try:
            while not self.stopping.is_set():
                ready = dict(poller.poll(200))
                if self._replies in ready:
                    self._send_finished_replies()
                if self._socket in ready:
                    self._serve_one()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._socket.close(linger=0)
            self._replies.close(linger=0)

    def _send_finished_replies(self) -> None:
        while True:
            try:
                self._socket.send_multipart(self._replies.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return

    def _serve_one(self) -> None:
        message = self._socket.recv_multipart(copy=False)
        caller = self._caller(message[-1])
        frames = [frame.bytes for frame in message]
        # A REQ client's message arrives as [identity, b"", ...request]; anything else did not
        # come from a REQ socket and cannot be answered in step, so it is dropped.
        if len(frames) < 2 or frames[1] != b"":
            log.warning("dropped a request without a REQ envelope (%d frames)", len(frames))
            return
        envelope, request = frames[:2], frames[2:]
        try:
            name, operation, arguments = self._parse(request)
        except ValueError as exc:
            size = sum(len(f) for f in request)
            log.warning("rejected a malformed request of %d bytes: %s", size, exc)
            self._socket.send_multipart([*envelope, _error(f"malformed request: {exc}")])
            return
        if not permits(caller, operation.role, arguments):
            log.warning("refused %s to %s", name, caller)
            self._socket.send_multipart(
                [*envelope, _error(f"permission denied: {caller} may not call {name}")])
            return
        if operation.shown_to_others is not None and caller != ADMIN_USER:
            operation = _shown_to_others(operation)
        if not operation.slow:
            self._socket.send_multipart([*envelope, self._run(name, operation, arguments)])
            return
        with self._backlog_lock:
            busy = self._slow_backlog >= MAX_SLOW_BACKLOG
            if not busy:
                self._slow_backlog += 1
        if busy:
            self._socket.send_multipart(
                [*envelope, _error(f"nimbus is busy with {MAX_SLOW_BACKLOG} {name} requests; "
                                   f"try again")])
            return
        self._pool.submit(self._run_slow, envelope, name, operation, arguments)

    def _caller(self, frame: zmq.Frame) -> str | None:
        """Who sent ``frame``, as the ZAP handler named them; None with security off. With
        security on, a message without a user (it cannot happen: ZAP admits only known keys)
        counts as nobody's."""
        if not self._secured:
            return None
        try:
            return str(frame.get("User-Id") or "")
        except zmq.ZMQError:
            return ""

    def _parse(self, request: list[bytes]) -> tuple[str, Operation, dict[str, Any]]:
        if len(request) not in (2, 3):
            raise ValueError(f"a request is two frames (operation, arguments) or three (and a "
                             f"payload), not {len(request)}")
        name = request[0].decode("ascii", errors="replace")
        operation = self.operations.get(name)
        if operation is None:
            raise ValueError(f"unknown operation {name[:64]!r}")
        if len(request[1]) > operation.max_bytes:
            raise ValueError(f"{name} arguments of {len(request[1])} bytes are over its limit "
                             f"of {operation.max_bytes}")
        if len(request) == 3:
            if not operation.max_payload_bytes:
                raise ValueError(f"{name} takes no payload")
            if len(request[2]) > operation.max_payload_bytes:
                raise ValueError(f"{name} payload of {len(request[2])} bytes is over its limit "
                                 f"of {operation.max_payload_bytes}")
        arguments = decode_arguments(request[1], operation.max_containers)
        arguments.pop("payload", None)   # only ever the payload frame
        if len(request) == 3:
            arguments["payload"] = request[2]
        return name, operation, arguments

    def _run(self, name: str, operation: Operation, arguments: dict[str, Any]) -> bytes:
        try:
            reply = {"ok": True, "result": operation.handler(**arguments)}
        except (RpcError, ValueError, KeyError, TypeError) as exc:
            reply = {"ok": False, "error": str(exc)}
        except Exception as exc:  # a bug of ours: say so, keep serving
            log.exception("nimbus failed on %s", name)
            reply = {"ok": False, "error": f"internal error in {name}: {type(exc).__name__}: {exc}"}
        try:
            return msgpack.packb(reply, use_bin_type=True)
        except Exception as exc:   # a result msgpack cannot carry: a bug of ours too
            log.exception("nimbus could not encode its reply to %s", name)
            return _error(f"internal error in {name}: unencodable reply ({exc})")

    def _run_slow(self, envelope: list[bytes], name: str, operation: Operation,
                  arguments: dict[str, Any]) -> None:
        try:
            reply = self._run(name, operation, arguments)
        finally:
            with self._backlog_lock:
                self._slow_backlog -= 1
        sender: zmq.Socket = zmq.Context.instance().socket(zmq.PUSH)
        try:
            sender.connect(self._replies_address)
            sender.send_multipart([*envelope, reply])
        finally:
            sender.close(linger=1000)
