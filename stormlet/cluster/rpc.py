"""Nimbus's request/reply protocol: one msgpack map each way over a ZeroMQ REQ/REP pair.

Request: ``{"op": NAME, ...arguments}``. Reply: ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "message"}``. A frame that is not a msgpack map with an ``op`` gets an
error reply and a logged warning; the server keeps serving.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import msgpack
import zmq

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 128 * 1024 * 1024


# How a standby nimbus begins its answer to a request only the leader may serve.
NOT_LEADER = "this nimbus is a standby"


class RpcError(Exception):
    """The server refused or failed a request; the message is the server's."""


class NimbusUnavailable(RpcError):
    """No answer from nimbus in time."""


def call(address: str, op: str, timeout: float = 30.0, **args: Any) -> Any:
    context = zmq.Context.instance()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
    try:
        sock.connect(address)
        sock.send(msgpack.packb({"op": op, **args}, use_bin_type=True))
        try:
            reply = msgpack.unpackb(sock.recv(), raw=False)
        except zmq.Again:
            raise NimbusUnavailable(f"nimbus at {address} did not answer within {timeout:g}s") from None
    finally:
        sock.close(linger=0)
    if not reply.get("ok"):
        raise RpcError(reply.get("error", "request failed"))
    return reply.get("result")


def serve_one(sock: zmq.Socket, handlers: dict[str, Callable[..., Any]]) -> None:
    """Answer one request waiting on ``sock`` (a bound REP socket)."""
    frame = sock.recv()
    try:
        if len(frame) > MAX_REQUEST_BYTES:
            raise ValueError(f"request of {len(frame)} bytes is too large")
        request = msgpack.unpackb(frame, raw=False)
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            raise ValueError("request is not a map with an 'op'")
    except Exception as exc:
        log.warning("rejected a malformed request of %d bytes: %s", len(frame), exc)
        sock.send(msgpack.packb({"ok": False, "error": f"malformed request: {exc}"}))
        return
    op = request.pop("op")
    handler = handlers.get(op)
    try:
        if handler is None:
            raise RpcError(f"unknown operation {op!r}")
        reply = {"ok": True, "result": handler(**request)}
    except (RpcError, ValueError, KeyError, TypeError) as exc:
        reply = {"ok": False, "error": str(exc)}
    except Exception as exc:  # a bug of ours: say so, keep serving
        log.exception("nimbus failed on %s", op)
        reply = {"ok": False, "error": f"internal error in {op}: {type(exc).__name__}: {exc}"}
    sock.send(msgpack.packb(reply, use_bin_type=True))
