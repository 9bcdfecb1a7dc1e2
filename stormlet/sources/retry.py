"""When a failed message is emitted again, and when it is given up on.

    policy = RetryPolicy(initial_delay=0.5, multiplier=2.0, max_delay=30.0, max_attempts=8)
    policy.delay(failures=1)   # 0.5 s after the first failure
    policy.delay(failures=3)   # 2.0 s after the third
    policy.exhausted(8)        # True: dead-letter it

storm-kafka retried forever by default, so one poison message stalled its partition's commits for
good; here the attempt count is bounded unless the user explicitly asks for ``max_attempts=None``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: the n-th failure waits ``initial_delay * multiplier**(n-1)`` seconds,
    at most ``max_delay``; after ``max_attempts`` failed emits the message is dead-lettered."""

    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 30.0
    max_attempts: int | None = 8

    def __post_init__(self) -> None:
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError(f"retry delays must be >= 0, got initial_delay={self.initial_delay}, "
                             f"max_delay={self.max_delay}")
        if self.multiplier < 1:
            raise ValueError(f"retry multiplier must be >= 1, got {self.multiplier}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None (retry forever), "
                             f"got {self.max_attempts}")

    def delay(self, failures: int) -> float:
        """Seconds to wait before the emit that follows the ``failures``-th failure."""
        exponent = max(0, failures - 1)
        # Capped before it can overflow: multiplier**exponent grows without bound.
        if self.multiplier > 1 and exponent > 64:
            return self.max_delay
        return min(self.max_delay, self.initial_delay * self.multiplier ** exponent)

    def exhausted(self, failures: int) -> bool:
        return self.max_attempts is not None and failures >= self.max_attempts
