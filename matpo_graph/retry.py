"""One retry rule for every HTTP client (tools, the LLM judge, the OpenAI-compatible policy).

An attempt either succeeds, raises :class:`RetryableError` (a dropped connection, a timeout, HTTP 429
or 5xx: worth another try, possibly after the server's ``Retry-After``), or raises anything else (not
retried). Between attempts the wait grows exponentially from `backoff_s` up to `max_backoff_s`, with
random jitter so that many clients failing together do not come back together, and never less than the
server's ``Retry-After``. A total `deadline_s` bounds all attempts and waits together: an attempt still
running at the deadline is cancelled, and a wait that would end past it is not started.

Stdlib only; clients pass their own `sleep` (tests record the delays instead of waiting).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "RetryExhausted", "RetryPolicy", "RetryableError", "is_retryable_status", "parse_retry_after",
    "retry_after_from_headers", "retry_async",
]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    Attributes:
        retries: further attempts after the first (0: one attempt).
        backoff_s: wait before the first retry; doubles with each retry.
        max_backoff_s: cap of the exponential wait.
        jitter: share of each wait drawn at random: the wait is ``w * (1 - jitter * u)``, u uniform in [0, 1).
        deadline_s: bound on all attempts and waits together (None: no bound).
        max_retry_after_s: a ``Retry-After`` longer than this ends the retries at once (waiting that long
            would stall a rollout); the error then says how long the server asked for.
    """

    retries: int = 2
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    jitter: float = 0.5
    deadline_s: float | None = 120.0
    max_retry_after_s: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0 (or None), got {self.deadline_s}")

    def backoff(self, retry: int, u: float) -> float:
        """The wait before retry number `retry` (1-based), for a uniform draw `u` in [0, 1)."""
        base = min(self.max_backoff_s, self.backoff_s * (2 ** (retry - 1)))
        return base * (1.0 - self.jitter * u)


class RetryableError(Exception):
    """Raised by an attempt that may succeed if tried again; `retry_after` is the server's wish (seconds)."""

    def __init__(self, message: str, *, retry_after: float | None = None, kind: str = "retryable") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind


class RetryExhausted(Exception):
    """No attempt succeeded: the last error, how many attempts ran, and why retrying stopped."""

    def __init__(self, message: str, *, attempts: int, last: BaseException | None, reason: str) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last = last
        self.reason = reason  # "retries", "deadline" or "retry_after"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` value (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str] | Any) -> float | None:
    """The ``Retry-After`` of a response's headers (any case), in seconds."""
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    return parse_retry_after(getter("retry-after") or getter("Retry-After"))


def is_retryable_status(status: int) -> bool:
    """429 and 5xx may heal by waiting; other 4xx (auth, bad request) will not."""
    return status == 429 or status >= 500


async def retry_async(
    attempt: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: Callable[[], float] = random.random,
    on_retry: Callable[[int, RetryableError, float], None] | None = None,
) -> T:
    """Run `attempt(n)` (n = 1, 2, ...) until it returns, under `policy`.

    Args:
        attempt: one try; raises RetryableError to ask for another, anything else to stop.
        policy: counts, waits and the deadline.
        sleep: how waits happen.
        clock: monotonic seconds (the deadline's clock).
        rng: uniform draws in [0, 1) for the jitter.
        on_retry: called with (attempt that failed, its error, the wait) before each wait.

    Returns:
        What the first successful attempt returned.

    Raises:
        RetryExhausted: every allowed attempt failed with RetryableError, the deadline passed, or the
            server asked to wait longer than `max_retry_after_s`.
        Exception: whatever a non-retryable attempt raised, unchanged.
    """
    start = clock()
    deadline = None if policy.deadline_s is None else start + policy.deadline_s
    total = policy.retries + 1
    last: RetryableError | None = None
    for n in range(1, total + 1):
        try:
            if deadline is None:
                return await attempt(n)
            remaining = deadline - clock()
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):
                return await attempt(n)
        except RetryableError as exc:
            last = exc
        except TimeoutError:
            if deadline is not None and clock() >= deadline - 1e-3:
                raise RetryExhausted(
                    f"gave up after {n} attempt(s): the {policy.deadline_s:g}s deadline passed"
                    + (f" (last error: {last})" if last else ""), attempts=n, last=last, reason="deadline") from None
            raise
        if n == total:
            break
        wait = policy.backoff(n, rng())
        if last.retry_after is not None:
            if last.retry_after > policy.max_retry_after_s:
                raise RetryExhausted(f"{last} (server asks to wait {last.retry_after:g}s)", attempts=n, last=last,
                                     reason="retry_after")
            wait = max(wait, last.retry_after)
        if deadline is not None and clock() + wait > deadline:
            raise RetryExhausted(f"{last} (after {n} attempt(s); waiting {wait:.2g}s more would pass the "
                                 f"{policy.deadline_s:g}s deadline)", attempts=n, last=last, reason="deadline")
        if on_retry is not None:
            on_retry(n, last, wait)
        await sleep(wait)
    assert last is not None
    suffix = f" (after {total} attempts)" if total > 1 else ""
    raise RetryExhausted(f"{last}{suffix}", attempts=total, last=last, reason="retries")
