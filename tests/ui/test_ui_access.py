"""Who may use the UI (ui/access.py): a token for actions (and, if asked, for reads), a Host
allow-list, and the headers every response carries; served for real by waitress."""

from __future__ import annotations

import http.client
import urllib.parse

import pytest
from ui_support import ui_cluster

from stormlet.ui.access import SESSION_COOKIE, UiAccess

TOKEN = "0123456789abcdef" * 4


@pytest.fixture
def ui(request):
    """A UI over an empty local cluster with the access the test's parameter names."""
    access = request.param("127.0.0.1") if request.param else None
    with ui_cluster(access=access) as (_cluster, server):
        yield server


def call(server, path: str, method: str = "GET", headers: dict | None = None,
         body: bytes | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    # Read before the connection closes; the callers read it as ``body``.
    setattr(response, "body", response.read())
    connection.close()
    return response


ACTION = {"X-Requested-By": "stormlet-ui", "Content-Type": "application/json"}
KILL = "/api/v1/topology/nope/kill/0"   # 404 once allowed: no such topology


def with_token(protect_reads: bool = False):
    return lambda server_host: UiAccess.for_host(server_host, token=TOKEN,
                                                 protect_reads=protect_reads)


@pytest.mark.parametrize("ui", [with_token()], indirect=True)
def test_an_action_needs_the_token_and_reads_do_not(ui):
    assert call(ui, KILL, "POST", ACTION, b"{}").status == 401
    wrong = {**ACTION, "Authorization": "Bearer " + "f" * 64}
    assert call(ui, KILL, "POST", wrong, b"{}").status == 401
    bearer = {**ACTION, "Authorization": f"Bearer {TOKEN}"}
    assert call(ui, KILL, "POST", bearer, b"{}").status == 404
    assert call(ui, "/api/v1/cluster/summary").status == 200
    assert call(ui, "/metrics").status == 200


@pytest.mark.parametrize("ui", [with_token(protect_reads=True)], indirect=True)
def test_a_browser_signs_in_with_a_form_and_then_carries_a_cookie(ui):
    assert call(ui, "/api/v1/cluster/summary").status == 401
    assert call(ui, "/metrics").status == 401
    page = call(ui, "/index.html")
    assert page.status == 302 and page.getheader("Location").endswith("/login.html")
    assert call(ui, "/login.html").status == 200
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    refused = call(ui, "/login", "POST", form, urllib.parse.urlencode({"token": "nope"}).encode())
    assert refused.status == 401
    signed = call(ui, "/login", "POST", form, urllib.parse.urlencode({"token": TOKEN}).encode())
    assert signed.status == 303
    cookie = signed.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    session = {"Cookie": cookie.split(";", 1)[0]}
    assert call(ui, "/api/v1/cluster/summary", headers=session).status == 200
    assert call(ui, "/metrics", headers=session).status == 200
    assert call(ui, KILL, "POST", {**ACTION, **session}, b"{}").status == 404
    assert call(ui, KILL, "POST", session, b"{}").status == 403   # still needs the header
    forged = {"Cookie": f"{SESSION_COOKIE}={'0' * 64}"}
    assert call(ui, "/api/v1/cluster/summary", headers=forged).status == 401


@pytest.mark.parametrize("ui", [with_token(), None], indirect=True)
def test_a_foreign_host_is_refused_and_every_response_carries_the_headers(ui):
    for path in ("/api/v1/cluster/summary", "/index.html", "/metrics"):
        assert call(ui, path, headers={"Host": "attacker.example"}).status == 400
        response = call(ui, path, headers={"Host": f"localhost:{ui.port}"})
        assert response.status == 200
        assert response.getheader("Content-Security-Policy") == "frame-ancestors 'none'"
        assert response.getheader("X-Content-Type-Options") == "nosniff"
