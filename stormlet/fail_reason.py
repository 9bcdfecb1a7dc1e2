"""Why a tracked spout tuple failed: the answer Storm users ask for most."""

from __future__ import annotations

from dataclasses import dataclass

TIMEOUT = "timeout"
FAIL = "fail"
ERROR = "error"


def is_utf8(text: str) -> bool:
    """Whether UTF-8 can carry ``text``: a str may hold lone surrogates, which it cannot."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 can carry it: lone surrogates (an undecodable file name in an error,
    say) escaped as ``\\udcff``, any other text as it is. A fail message crosses between
    workers, and lands in the failed-message log, as UTF-8."""
    return text if is_utf8(text) else text.encode("utf-8", "backslashreplace").decode()


@dataclass(frozen=True, slots=True)
class FailReason:
    """Delivered to ``Spout.fail(msg_id, reason)``.

    ``kind`` is ``"timeout"``, ``"fail"`` (a bolt called ``fail``) or ``"error"`` (a basic bolt's
    ``execute`` raised). ``component`` is the component that failed the tuple or, for a timeout, the
    last component that acked part of its tree (``None`` when no acker could say). ``message`` is
    the error text or the reason passed to ``fail``.
    """

    kind: str
    component: str | None = None
    message: str | None = None

    def __str__(self) -> str:
        if self.kind == TIMEOUT:
            where = (
                f"last acked by {self.component!r}" if self.component
                else "no acker reported progress"
            )
            text = f"timeout ({where})"
        elif self.kind == ERROR:
            text = f"error in {self.component!r}"
        else:
            text = f"failed by {self.component!r}" if self.component else "failed"
        return f"{text}: {self.message}" if self.message else text

    def __eq__(self, other: object) -> bool:
        # Comparing with a plain string compares the kind, so `reason == "timeout"` reads naturally.
        if isinstance(other, str):
            return self.kind == other
        if isinstance(other, FailReason):
            return (self.kind, self.component, self.message) == (
                other.kind,
                other.component,
                other.message,
            )
        return NotImplemented

    def __hash__(self) -> int:
        # Equal objects must hash alike, and a reason equals its kind's string: so the hash is
        # the kind's (reasons of one kind share it, which a dict or set tolerates).
        return hash(self.kind)
