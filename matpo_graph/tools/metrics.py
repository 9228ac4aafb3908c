"""Counters shared by the tools of one registry: calls, errors by kind, retries and cache hits."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["ToolFailure", "ToolMetrics"]


class ToolFailure(Exception):
    """A classified tool failure: `kind` is counted, `message` is what the model sees.

    Args:
        kind: short error kind, e.g. 'timeout', 'http_5xx', 'rate_limited', 'blocked', 'ssrf'.
        message: short text for the model (no secrets, no stack traces).
        retryable: whether another attempt may succeed (timeouts, 429, 5xx).
        retry_after: seconds the server asked us to wait (429 Retry-After), if any.
    """

    def __init__(self, kind: str, message: str, *, retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


class ToolMetrics:
    """Thread-safe counters; `snapshot()` gives namespaced numbers for logging."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.errors: Counter[tuple[str, str]] = Counter()
        self.retries: Counter[str] = Counter()
        self.cache_hits: Counter[str] = Counter()

    def count_call(self, tool: str) -> None:
        with self._lock:
            self.calls[tool] += 1

    def count_error(self, tool: str, kind: str) -> None:
        with self._lock:
            self.errors[(tool, kind)] += 1

    def count_retry(self, tool: str) -> None:
        with self._lock:
            self.retries[tool] += 1

    def count_cache_hit(self, tool: str) -> None:
        with self._lock:
            self.cache_hits[tool] += 1

    def errors_by_kind(self) -> dict[str, int]:
        """Error counts summed over tools, by kind."""
        out: Counter[str] = Counter()
        with self._lock:
            for (_, kind), n in self.errors.items():
                out[kind] += n
        return dict(out)

    def snapshot(self) -> dict[str, int]:
        """Flat counters named `tools/<tool>/<counter>` and `tools/<tool>/errors/<kind>`, plus totals."""
        with self._lock:
            out: dict[str, int] = {}
            for tool, n in self.calls.items():
                out[f"tools/{tool}/calls"] = n
            for (tool, kind), n in self.errors.items():
                out[f"tools/{tool}/errors/{kind}"] = n
            for tool, n in self.retries.items():
                out[f"tools/{tool}/retries"] = n
            for tool, n in self.cache_hits.items():
                out[f"tools/{tool}/cache_hits"] = n
            out["tools/total/calls"] = sum(self.calls.values())
            out["tools/total/errors"] = sum(self.errors.values())
            out["tools/total/retries"] = sum(self.retries.values())
            out["tools/total/cache_hits"] = sum(self.cache_hits.values())
        return out
