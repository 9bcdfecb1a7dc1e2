"""Credentials in a topology's config, hidden from whoever reads it without admin access.

    redact_config({"db.password": "pw", "topology.state.provider.config": {"password": "pw"},
                   "cache.url": "redis://app:pw@cache:6379/0"})
    -> {"db.password": "<redacted>",
        "topology.state.provider.config": {"password": "<redacted>"},
        "cache.url": "redis://app:<redacted>@cache:6379/0"}

One set of rules for every read path (the UI's REST API and pages, ``stormlet errors``, nimbus's
``topology_info``): a reader who has not proved admin access sees what this returns, an admin
the real values. Only what is shown is redacted: the record workers run with is never touched,
so they keep the real password.

A value is a credential when its key's last word is one of SECRET_WORDS (or ends in one of
SECRET_SUFFIXES: ``dbPassword``, ``client_secret``), or its last two words are one of
SECRET_PAIRS (``api.key``, ``aws_secret_access_key``); a key's words are its parts split at
``.``, ``_``, ``-`` and camelCase. The rule reaches into nested maps and lists (a state
provider's ``{"password": ...}``, a map given as JSON text), and inside any text it hides a URL's
userinfo (``redis://user:PASS@host``) and ``password=...`` or ``"token": "..."`` written out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"

# A key whose last word is one of these holds a credential. "key" alone is not here: it names
# partition keys, grouping keys and the like far more often than secrets (see SECRET_PAIRS).
SECRET_WORDS = frozenset({"password", "passwd", "pwd", "passphrase", "secret", "secrets",
                          "token", "credential", "credentials", "apikey"})
# ... or ends with one of these: dbpassword, clientsecret, accesstoken.
SECRET_SUFFIXES = ("password", "passwd", "secret", "token")
# ... or whose last two words are one of these. auth.payload is Storm's ZooKeeper digest
# "user:password"; jaas.config is Kafka's SASL login line, which holds the password; key.pem
# is librdkafka's private key itself (ssl.key.location is only its path, and stays).
SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("secret", "key"),
                          ("private", "key"), ("signing", "key"), ("encryption", "key"),
                          ("key", "pem"), ("auth", "payload"), ("jaas", "config")})

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[a-z0-9]+")
# scheme://user:password@ or scheme://token@ (a token in the user's place: GitHub, Sentry).
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)"
                           r"(?P<user>[^\s/@:'\"]*)(?::(?P<password>[^\s/@'\"]*))?@")
# A credential's key written out before its value, derived from the word lists above so that
# text and maps follow one rule: password=PW, password="PW" (a JAAS line), "token": "TK" (JSON),
# 'secret': 'S' (a Python repr). An unquoted key needs "=": "secret: create one with ..." is
# prose.
_KEY_TEXT = "|".join(sorted({*SECRET_SUFFIXES, *SECRET_WORDS}, key=len, reverse=True)
                     + [rf"{a}[_.\-]?{b}" for a, b in sorted(SECRET_PAIRS)])
_ASSIGNMENT = re.compile(
    rf"""(?P<key>(?P<open>["']?)\b[\w.\-]*?(?:{_KEY_TEXT})\b(?P=open))"""
    rf"""(?P<sep>\s*=\s*|(?<=["'])\s*:\s*)"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s,;&"'}\])]+)""",
    re.IGNORECASE)


def key_words(key: str) -> list[str]:
    """``key``'s words, lowercased: ``ssl.key.password`` -> [ssl, key, password],
    ``apiKey`` -> [api, key]."""
    return _WORD.findall(_CAMEL_BOUNDARY.sub(".", str(key)).lower())


def is_secret_key(key: str) -> bool:
    """Whether the value of a config key (or of a key in a map inside one) is a credential."""
    words = key_words(key)
    if not words:
        return False
    last = words[-1]
    return (last in SECRET_WORDS or last.endswith(SECRET_SUFFIXES)
            or tuple(words[-2:]) in SECRET_PAIRS)


def redact_config(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``conf`` to show to a reader without admin access: every credential replaced
    by REDACTED (see the module's doc), everything else as it was. For display only: a value
    that is neither JSON's nor a map or list comes back as its redacted ``repr``."""
    return {str(k): _redact_entry(k, v) for k, v in (conf or {}).items()}


def _redact_entry(key: Any, value: Any) -> Any:
    # Nothing set is nothing to hide, and saying so helps whoever debugs a missing password.
    if is_secret_key(str(key)) and value not in (None, ""):
        return REDACTED
    return redact_value(value)


def redact_value(value: Any) -> Any:
    """``value`` with the credentials inside it redacted: the keys of nested maps, and text
    (see ``redact_text``); a string holding a JSON map or list is redacted as one."""
    if isinstance(value, Mapping):
        return redact_config(value)
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    if isinstance(value, str):
        return _redact_string(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_text(repr(value))


def _redact_string(text: str) -> str:
    if text.lstrip().startswith(("{", "[")):
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            if isinstance(parsed, (dict, list)):
                return json.dumps(redact_value(parsed))
    return redact_text(text)


def redact_text(text: str) -> str:
    """Free text (an error message, a traceback, a log line) with URL userinfo and written-out
    credentials (``password=PW``, ``"token": "TK"``) replaced by REDACTED."""
    return _ASSIGNMENT.sub(_hide_assignment, _URL_USERINFO.sub(_hide_userinfo, text))


#: The text fields of an error record (cluster/error_reports.py) that may quote a credential.
ERROR_TEXT_FIELDS = ("error", "detail")


def redact_errors(errors: list[Any]) -> list[Any]:
    """Error records (``{"component", "error", "detail", ...}``) with their text redacted: an
    error can quote a credential (a connection URL with its password)."""
    return [{**e, **{f: redact_text(e[f]) for f in ERROR_TEXT_FIELDS
                     if isinstance(e.get(f), str)}} if isinstance(e, Mapping) else e
            for e in errors]


def _hide_userinfo(match: re.Match[str]) -> str:
    if match["password"] is None:       # the whole userinfo is the token
        return f"{match['scheme']}{REDACTED}@"
    return f"{match['scheme']}{match['user']}:{REDACTED}@"


def _hide_assignment(match: re.Match[str]) -> str:
    value = match["value"]
    if value == REDACTED or value[1:-1] == REDACTED:
        return match[0]
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match['key']}{match['sep']}{quote}{REDACTED}{quote}"
