"""The UI's web server: the REST API, the pages and ``/metrics``, served by waitress (with the
limits of connections.py, so that connections held open cannot stop it).

    server = serve(LocalSource(cluster), "127.0.0.1", 0)   # port 0: any free port
    print(f"http://127.0.0.1:{server.port}/")
    ...
    server.stop()

Pages are static HTML and JavaScript (``static/``) that read the REST API, so everything a page
shows is also available as JSON.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any

from flask import Flask, Response, redirect, send_from_directory
from flask.json.provider import DefaultJSONProvider
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from .access import UiAccess
from .api import api_blueprint
from .connections import ConnectionLimits, create_server
from .prometheus import SourceCollector
from .source import UiSource

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
PAGES = ("index.html", "topology.html", "component.html", "login.html", "logs.html")
# How long the serving loop waits for socket events before checking whether to stop.
POLL_SECS = 0.2


class FiniteJSONProvider(DefaultJSONProvider):
    """JSON with every NaN or infinity as null: Python's json writes them as ``NaN`` and
    ``Infinity``, which no browser parses, and one user gauge's NaN would break a whole page."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return super().dumps(_finite(obj), **kwargs)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def create_app(source: UiSource, access: UiAccess | None = None) -> Flask:
    app = Flask(__name__, static_folder=None)
    (access or UiAccess()).install(app)
    app.json = FiniteJSONProvider(app)
    app.json.sort_keys = False   # keep components in their declared order
    app.register_blueprint(api_blueprint(source))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SourceCollector(source))

    @app.get("/")
    def index() -> ResponseReturnValue:
        return redirect("/index.html")

    @app.get("/<page>")
    def page(page: str) -> Response:
        if page not in PAGES:
            return Response(f"no page {page!r}\n", status=404, mimetype="text/plain")
        return send_from_directory(STATIC, page)

    @app.get("/static/<path:name>")
    def static_file(name: str) -> Response:
        return send_from_directory(STATIC, name)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)

    return app


class UiServer:
    """A running server; ``port`` is the one it bound (useful after asking for port 0)."""

    def __init__(self, source: UiSource, host: str, port: int, threads: int = 8,
                 access: UiAccess | None = None, limits: ConnectionLimits | None = None):
        """``access``: who may use it (default: no token, and only Host names ``host`` is
        reached by; see access.py). ``limits``: on connections (see connections.py)."""
        access = access or UiAccess.for_host(host)
        self._server = create_server(create_app(source, access), host, port,
                                     limits or ConnectionLimits(), threads=threads,
                                     ident="stormlet-ui")
        self.host = host
        self.port: int = self._server.effective_port
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stormlet-ui", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> UiServer:
        self._thread.start()
        log.info("UI serving on %s", self.url)
        return self

    def _run(self) -> None:
        # waitress's own run() loops until every connection closes, and a browser keeps its
        # connections open: step the loop ourselves so that stop() is prompt.
        server = self._server
        while not self._stopping.is_set():
            server.asyncore.loop(timeout=POLL_SECS, map=server._map, use_poll=True, count=1)
        for channel in list(server._map.values()):
            channel.close()
        server.task_dispatcher.shutdown()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)


def serve(source: UiSource, host: str = "127.0.0.1", port: int = 8080,
          access: UiAccess | None = None, limits: ConnectionLimits | None = None) -> UiServer:
    """Start serving ``source`` on a background thread; returns at once."""
    return UiServer(source, host, port, access=access, limits=limits).start()
