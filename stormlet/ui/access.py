"""Who may use the UI: a Host allow-list, an access token, and headers on every response.

- **Host**: a request whose ``Host`` is not one the UI is served as gets 400. A page on another
  site cannot reach a UI on loopback through DNS rebinding: its requests carry that site's name.
- **Token**: with one (a cluster with a secret: ``stormlet secret ui-token`` prints it), actions
  need it, and with ``protect_reads`` every page, API read and ``/metrics`` too. A script sends
  ``Authorization: Bearer TOKEN``; a browser signs in once on ``/login.html`` (the token goes in
  a form body, never in a URL) and then carries an HttpOnly, SameSite=Strict cookie. Actions
  also need the ``X-Requested-By`` header (api.py), which another site's page cannot send.
- **Secrets**: a topology's credentials (redaction.py) are shown only to a request that presents
  the token (``holds_admin_token``). A UI without a token has no way to tell its admin from
  anyone else who reaches it, so it shows them to nobody.
- **Headers**: ``frame-ancestors 'none'`` (no framing, so no clickjacking) and ``nosniff``.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
from dataclasses import dataclass, field

from flask import Flask, Response, g, jsonify, redirect, request
from flask.typing import ResponseReturnValue

SESSION_COOKIE = "stormlet_ui_session"
# Where a request's check leaves whether it presented the token (see holds_admin_token), and
# whether it may do what an action may (see may_act).
_ADMIN_FLAG, _ACT_FLAG = "stormlet_ui_admin", "stormlet_ui_may_act"
LOGIN_PAGE = "/login.html"
# Reachable without the token even when reads are protected: the sign-in itself.
OPEN_PATHS = frozenset({LOGIN_PAGE, "/login", "/static/style.css", "/static/favicon.svg"})
SECURITY_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class UiAccess:
    """``token``: None to need none (a loopback UI without a cluster secret).
    ``allowed_hosts``: names the UI is served as (without port); empty allows any."""

    token: str | None = None
    protect_reads: bool = False
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def for_host(cls, host: str, token: str | None = None, protect_reads: bool = False,
                 extra_hosts: tuple[str, ...] = ()) -> UiAccess:
        """The names a UI bound to ``host`` is reached by: that address, loopback's names, this
        machine's names when bound to every interface, and ``extra_hosts``."""
        names = {host, "localhost", "127.0.0.1", "::1", *extra_hosts}
        if host in ("0.0.0.0", "::", ""):
            names |= {socket.gethostname(), socket.getfqdn()}
        return cls(token, protect_reads, frozenset(n.lower() for n in names if n))

    def install(self, app: Flask) -> None:
        """Check every request of ``app`` and add the headers to every response."""
        app.before_request(self._check)
        app.after_request(_with_security_headers)
        app.add_url_rule("/login", "login", self._login, methods=["POST"])

    def _session(self) -> str:
        # The cookie holds a value derived from the token, not the token itself.
        assert self.token is not None
        return hmac.new(self.token.encode(), b"stormlet-ui-session", hashlib.sha256).hexdigest()

    def _signed_in(self) -> bool:
        if self.token is None:
            return True
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.encode(),
                                                             self.token.encode()):
            return True
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self._session().encode())

    def _check(self) -> ResponseReturnValue | None:
        if self.allowed_hosts and _host_name(request.host) not in self.allowed_hosts:
            return Response("unknown Host\n", status=400, mimetype="text/plain")
        # _signed_in() is true of everyone when there is no token: that proves nothing.
        setattr(g, _ADMIN_FLAG, self.token is not None and self._signed_in())
        setattr(g, _ACT_FLAG, self.token is None or getattr(g, _ADMIN_FLAG))
        if self.token is None or request.path in OPEN_PATHS:
            return None
        is_action = request.method == "POST"
        if not (is_action or self.protect_reads) or self._signed_in():
            return None
        if request.path.startswith("/api/") or request.path == "/metrics" or is_action:
            return jsonify(error="this UI needs its access token: sign in on /login.html, or "
                                 "send 'Authorization: Bearer TOKEN'"), 401
        return redirect(LOGIN_PAGE)

    def _login(self) -> ResponseReturnValue:
        presented = request.form.get("token", "")
        if self.token is None or not hmac.compare_digest(presented.encode(),
                                                         self.token.encode()):
            return Response("wrong token\n", status=401, mimetype="text/plain")
        response = redirect("/index.html", code=303)
        response.set_cookie(SESSION_COOKIE, self._session(), httponly=True, samesite="Strict",
                            secure=request.is_secure)
        return response


def holds_admin_token() -> bool:
    """Whether the request being served presented the UI's access token (a bearer header or
    the session cookie), so may see a topology's credentials. False without a token."""
    return bool(g.get(_ADMIN_FLAG, False))


def may_act() -> bool:
    """Whether the request being served may do what an action (a POST) may: always on a UI
    without a token, else only with it. For a read that is an action's result (a profile
    asked for with a POST), which a reader without the token must not fetch either."""
    return bool(g.get(_ACT_FLAG, False))


def _with_security_headers(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def _host_name(host: str) -> str:
    """``Host`` without its port: ``name:8080`` -> ``name``, ``[::1]:8080`` -> ``::1``."""
    host = host.lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
