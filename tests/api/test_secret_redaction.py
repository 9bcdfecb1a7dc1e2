"""Credentials in a topology's config are shown only to a reader with admin access, on every read
path: the rules (redaction.py), the UI's REST API (over a LocalCluster, and over nimbus's own
operations served with CURVE and called with the read and admin roles' keys), nimbus's
``topology_info``, and ``stormlet errors``. What the topology's components get is never
redacted."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from ui_support import strict_json, wait_until

from stormlet import Bolt, LocalCluster, Spout, TopologyBuilder
from stormlet.cli import cluster as cluster_cli
from stormlet.cli import main
from stormlet.cli.options import NimbusTarget
from stormlet.cluster import rpc
from stormlet.cluster.nimbus import Nimbus
from stormlet.cluster.nimbus_client import NimbusClient
from stormlet.cluster.security import ADMIN_USER, READ_USER, Security
from stormlet.redaction import REDACTED, is_secret_key, redact_config, redact_text
from stormlet.ui.access import UiAccess
from stormlet.ui.app import serve
from stormlet.ui.source import ClusterSource, LocalSource

TOKEN = "0123456789abcdef" * 4
PASSWORD = "hunter2"
REDIS_URL = f"redis://app:{PASSWORD}@cache:6379/0"
# What the issue found readable: the state provider's password and any *.password key; and a
# URL's userinfo, a token, a map given as JSON text, a Kafka SASL login line.
SECRETS = {
    "topology.state.provider.config": {"host": "cache", "port": 6379, "password": PASSWORD},
    "db.password": PASSWORD,
    "cache.url": REDIS_URL,
    "service.api.key": PASSWORD,
    "webhook.token": PASSWORD,
    "lookup.config": json.dumps({"user": "app", "passwd": PASSWORD}),
    "sasl.jaas.config": f'PlainLoginModule required username="app" password="{PASSWORD}";',
}
PLAIN = {"topology.message.timeout.secs": 10, "db.host": "db1", "partition.key": "user_id",
         "ssl.key.location": "/etc/ssl/client.key", "max.tokens": 5}
# What a component raises: its error's text quotes the URL with its password.
ERROR = f"ConnectionError: cannot reach {REDIS_URL}"


# ----- the rules

@pytest.mark.parametrize("key", [
    "password", "db.password", "sasl.password", "ssl.key.password", "ssl.keystore.password",
    "passwd", "secret", "client_secret", "oauth.clientSecret", "token", "auth.token",
    "accessToken", "credentials", "api.key", "api_key", "apiKey", "aws_secret_access_key",
    "storm.zookeeper.auth.payload", "sasl.jaas.config", "ssl.key.pem", "DB_PASSWORD"])
def test_a_credential_s_key_is_known_by_its_last_words(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", [
    "topology.workers", "partition.key", "ssl.key.location", "max.tokens", "tokenizer",
    "topology.state.provider.config", "secret.file.mode.check", "db.host", "key"])
def test_other_keys_are_not_credentials(key):
    assert not is_secret_key(key)


def test_redact_config_hides_every_credential_and_nothing_else():
    conf = {**SECRETS, **PLAIN, "unset.password": None}
    before = json.dumps(conf, sort_keys=True)
    shown = redact_config(conf)
    assert PASSWORD not in json.dumps(shown)
    assert json.dumps(conf, sort_keys=True) == before   # a copy: the original is untouched
    assert shown["topology.state.provider.config"] == {"host": "cache", "port": 6379,
                                                       "password": REDACTED}
    assert shown["db.password"] == shown["service.api.key"] == shown["webhook.token"] \
        == shown["sasl.jaas.config"] == REDACTED
    assert shown["cache.url"] == f"redis://app:{REDACTED}@cache:6379/0"
    assert json.loads(shown["lookup.config"]) == {"user": "app", "passwd": REDACTED}
    assert {k: shown[k] for k in PLAIN} == PLAIN
    assert shown["unset.password"] is None   # nothing set is nothing to hide
    assert redact_config(shown) == shown      # redacting twice changes nothing


def test_nested_maps_and_lists_are_redacted_at_any_depth():
    conf = {"stores": [{"name": "a", "options": {"jedisPoolConfig": {"password": PASSWORD}}}],
            "credentials": {"user": "app", "pass": PASSWORD}}
    shown = redact_config(conf)
    assert shown["stores"][0]["options"]["jedisPoolConfig"]["password"] == REDACTED
    assert shown["credentials"] == REDACTED
    assert PASSWORD not in repr(redact_config({"obj": _Opaque()}))


class _Opaque:
    def __repr__(self) -> str:
        return f"Opaque(password='{PASSWORD}')"


@pytest.mark.parametrize("text, shown", [
    (ERROR, f"ConnectionError: cannot reach redis://app:{REDACTED}@cache:6379/0"),
    (f"redis://:{PASSWORD}@cache", f"redis://:{REDACTED}@cache"),
    (f"https://{PASSWORD}@github.com/org/repo", f"https://{REDACTED}@github.com/org/repo"),
    (f"dsn: host=db password={PASSWORD} user=app", f"dsn: host=db password={REDACTED} user=app"),
    (f"{{'host': 'h', 'password': '{PASSWORD}'}}", f"{{'host': 'h', 'password': '{REDACTED}'}}"),
    (f'{{"api_key": "{PASSWORD}"}}', f'{{"api_key": "{REDACTED}"}}'),
    ("this UI needs its access token: sign in", "this UI needs its access token: sign in"),
    ("KeyError: 'password'", "KeyError: 'password'"),
])
def test_text_loses_userinfo_and_written_out_credentials(text, shown):
    assert redact_text(text) == shown


# ----- the UI's REST API over a LocalCluster

class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < 5:
            self.n += 1
            self.collector.emit([self.n])
        else:
            time.sleep(0.01)


class Connects(Bolt):
    """Raises once with the URL it was given, as a client library does; remembers the conf
    it was prepared with."""

    prepared: ClassVar[list[dict]] = []

    def prepare(self, conf, context, collector):
        Connects.prepared.append(dict(conf))
        self.raised = False

    def execute(self, tup):
        if not self.raised:
            self.raised = True
            raise ConnectionError(f"cannot reach {REDIS_URL}")


def secret_topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("store", Connects()).shuffle_grouping("numbers")
    return builder.build()


@pytest.fixture(scope="module")
def local_uis():
    """One LocalCluster running a topology with SECRETS, served by a UI with a token and by
    one without."""
    Connects.prepared.clear()
    with LocalCluster() as cluster:
        cluster.submit("creds", {**SECRETS, **PLAIN, "topology.acker.executors": 0},
                       secret_topology())
        source = LocalSource(cluster)
        with_token = serve(source, "127.0.0.1", 0,
                           access=UiAccess.for_host("127.0.0.1", token=TOKEN))
        without = serve(source, "127.0.0.1", 0)
        try:
            wait_until(lambda: cluster.runtime("creds").errors(), 10, "the store's error")
            yield cluster, with_token, without
        finally:
            with_token.stop()
            without.stop()
            cluster.kill("creds", wait_secs=0)


def page(server: Any, path: str, headers: dict[str, str] | None = None) -> Any:
    import urllib.request

    req = urllib.request.Request(f"{server.url}{path.lstrip('/')}", headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as response:
        return strict_json(response.read())


def check_redacted(topology: dict) -> None:
    text = json.dumps(topology)
    assert PASSWORD not in text
    conf = topology["configuration"]
    assert PASSWORD not in conf["topology.state.provider.config"]
    assert REDACTED in conf["topology.state.provider.config"]
    assert conf["db.password"] == REDACTED
    assert conf["cache.url"] == f"redis://app:{REDACTED}@cache:6379/0"
    assert conf["db.host"] == "db1"
    assert any(REDACTED in e["error"] for e in topology["errors"]), topology["errors"]


def test_the_api_redacts_credentials_for_a_reader_without_the_token(local_uis):
    _cluster, with_token, without = local_uis
    for server in (with_token, without):   # a UI without a token cannot tell its admin
        check_redacted(page(server, "/api/v1/topology/creds"))
        component = page(server, "/api/v1/topology/creds/component/store")
        assert component["errors"] and PASSWORD not in json.dumps(component)
    # A wrong token is no token.
    check_redacted(page(with_token, "/api/v1/topology/creds",
                        {"Authorization": "Bearer " + "f" * 64}))


def test_the_token_s_holder_sees_the_real_values(local_uis):
    _cluster, with_token, _without = local_uis
    topology = page(with_token, "/api/v1/topology/creds", {"Authorization": f"Bearer {TOKEN}"})
    conf = topology["configuration"]
    assert conf["db.password"] == PASSWORD and conf["cache.url"] == REDIS_URL
    assert PASSWORD in conf["topology.state.provider.config"]
    assert any(e["error"].endswith(REDIS_URL) for e in topology["errors"])


def test_the_components_get_the_real_values(local_uis):
    cluster, _with_token, without = local_uis
    check_redacted(page(without, "/api/v1/topology/creds"))
    conf = cluster.runtime("creds").conf
    assert conf["db.password"] == PASSWORD
    assert conf["topology.state.provider.config"]["password"] == PASSWORD
    assert Connects.prepared and all(c["db.password"] == PASSWORD and c["cache.url"] == REDIS_URL
                                     for c in Connects.prepared)


# ----- a cluster: nimbus's operations on a CURVE-secured RpcServer, asked with each role's keys

RECORD: dict[str, Any] = {"name": "creds", "id": "creds-1", "status": "active", "launched": 1.0,
          "conf": {**SECRETS, **PLAIN}, "structure": None}


class RecordOnly:
    """The ZooKeeper reads topology_info, topology_conf, errors and metrics make: one topology
    record, no assignment, one supervisor's report of a worker whose error quotes a password."""

    def topologies(self) -> dict[str, dict]:
        return {RECORD["id"]: json.loads(json.dumps(RECORD))}   # a fresh copy, as from a read

    def checked_assignment(self, _tid: str) -> None:
        return None

    def heartbeats(self) -> dict:
        error = {"component": "store", "task": 3, "time": 1_700_000_000.0, "error": ERROR,
                 "detail": f"Traceback (most recent call last):\n  ...\n{ERROR}"}
        return {"s1": {"host": "h1", "workers": {"6700": {"topology_id": RECORD["id"],
                                                          "errors": [error]}}}}


@pytest.fixture
def nimbus_rpc(tmp_path):
    """A leading nimbus's operations served over CURVE (no ZooKeeper: RecordOnly); yields its
    address and the cluster's Security, whose role keys the clients present."""
    security = Security(cluster_secret=bytes(range(32)))
    nimbus = Nimbus("unused:2181", data_dir=tmp_path, security=security)
    nimbus.state = RecordOnly()
    nimbus.is_leader.set()
    stopping = threading.Event()
    server = rpc.RpcServer("tcp://127.0.0.1:*", nimbus._operations(), stopping,
                           security=security, topology_ids=set)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server.endpoint, security
    finally:
        stopping.set()
        thread.join(5)


def test_nimbus_topology_info_redacts_for_every_caller_and_topology_conf_is_the_admin_s(
        nimbus_rpc):
    address, security = nimbus_rpc
    read, admin = security.rpc_client_keys(READ_USER), security.rpc_client_keys(ADMIN_USER)
    for keys in (read, admin):
        info = rpc.call(address, "topology_info", timeout=5, credentials=keys, name="creds")
        assert PASSWORD not in json.dumps(info["conf"]) and info["conf"]["db.host"] == "db1"
    with pytest.raises(rpc.RpcError, match="permission denied"):
        rpc.call(address, "topology_conf", timeout=5, credentials=read, name="creds")
    conf = rpc.call(address, "topology_conf", timeout=5, credentials=admin, name="creds-1")
    assert conf == RECORD["conf"]   # the record workers read, untouched


def test_nimbus_gives_an_errors_text_as_it_is_to_the_admin_alone(nimbus_rpc):
    """A read-only key holder calling nimbus directly, not through the UI or the CLI, which
    redact what they show, must not get the text either."""
    address, security = nimbus_rpc
    read, admin = security.rpc_client_keys(READ_USER), security.rpc_client_keys(ADMIN_USER)
    for operation in ("errors", "topology_info"):
        seen = rpc.call(address, operation, timeout=5, credentials=read, name="creds")
        assert PASSWORD not in json.dumps(seen) and REDACTED in json.dumps(seen), operation
    for row in rpc.call(address, "errors", timeout=5, credentials=admin, name="creds"):
        assert row["error"] == ERROR and ERROR in row["detail"]
    info = rpc.call(address, "topology_info", timeout=5, credentials=admin, name="creds")
    assert info["errors"][0]["error"] == ERROR


@pytest.mark.parametrize("user", [READ_USER, ADMIN_USER])
def test_a_cluster_ui_shows_credentials_only_to_the_token_s_holder(nimbus_rpc, user):
    # Whatever the UI's own role, a reader without the token sees them redacted; with the
    # read role (read-only credentials) nimbus refuses the UI the real values.
    address, security = nimbus_rpc
    source = ClusterSource(NimbusClient(address=address, security=security, user=user))
    server = serve(source, "127.0.0.1", 0, access=UiAccess.for_host("127.0.0.1", token=TOKEN))
    try:
        anonymous = page(server, "/api/v1/topology/creds")
        assert PASSWORD not in json.dumps(anonymous)
        assert anonymous["configuration"]["db.password"] == REDACTED
        admin = page(server, "/api/v1/topology/creds", {"Authorization": f"Bearer {TOKEN}"})
        expected = PASSWORD if user == ADMIN_USER else REDACTED
        assert admin["configuration"]["db.password"] == expected
    finally:
        server.stop()
        source.close()


# ----- stormlet errors

ERROR_ROWS = [{"time": 1_700_000_000.0, "component": "store", "task": 3, "host": "h1",
               "port": 6700, "error": ERROR,
               "detail": f"Traceback (most recent call last):\n  ...\n{ERROR}"}]


def test_errors_lines_redact_unless_asked_by_the_admin():
    shown = "\n".join(cluster_cli.error_lines("creds", ERROR_ROWS, stack=True, secrets=False))
    assert PASSWORD not in shown and shown.count(REDACTED) == 2
    real = "\n".join(cluster_cli.error_lines("creds", ERROR_ROWS, stack=True, secrets=True))
    assert real.count(REDIS_URL) == 2


def test_only_the_cluster_secret_s_holder_is_the_cli_s_admin(tmp_path):
    def target(security: Security) -> NimbusTarget:
        return NimbusTarget("127.0.0.1:2181", "/stormlet", None, security)

    assert not cluster_cli.shows_secrets(target(Security()))
    Security.generate(tmp_path / "secret")
    assert cluster_cli.shows_secrets(target(Security.load(tmp_path / "secret")))


def test_the_errors_command_prints_redacted_errors_without_the_secret(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_cli, "_call", lambda target, op, **args: ERROR_ROWS)
    runner = CliRunner()
    env = {"STORMLET_SECRET_FILE": None}
    result = runner.invoke(main, ["errors", "creds", "--stack"], env=env)
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output and REDACTED in result.output
    Security.generate(tmp_path / "secret")
    result = runner.invoke(main, ["errors", "creds", "--stack", "--secret-file",
                                  str(tmp_path / "secret")], env=env)
    assert result.exit_code == 0, result.output
    assert REDIS_URL in result.output


def test_nothing_a_list_row_holds_is_a_credential():
    # A row of nimbus's list: counts and times only, so `stormlet list` has nothing to redact.
    row = {"name": "creds", "id": "creds-1", "status": "active", "workers": 1,
           "workers_asked": 2, "executors": 2, "uptime": 5.0, "errors": 1, "last_error": 1.0}
    lines = cluster_cli.list_lines([row], now=2.0)
    assert lines[1].split()[:6] == ["creds", "active", "1", "2", "2", "0m05s"]

