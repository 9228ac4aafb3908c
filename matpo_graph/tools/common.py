"""What every tool backend shares: argument checks, cache, retries (matpo_graph.retry), truncation, redaction.

A backend implements `_attempt(args) -> str` and raises :class:`ToolFailure` (or lets httpx errors
through); :meth:`BaseTool.call` turns everything into a :class:`ToolResult` and never raises.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from matpo_graph.core.schemas import SchemaProblem, make_validator
from matpo_graph.core.spec import ToolSpec
from matpo_graph.core.toolconfig import ToolConfigProblem, parse_tool_config
from matpo_graph.retry import RetryableError, RetryExhausted, RetryPolicy, parse_retry_after, retry_async
from matpo_graph.tools.base import ToolResult
from matpo_graph.tools.cache import ResponseCache, normalise_args
from matpo_graph.tools.metrics import ToolFailure, ToolMetrics
from matpo_graph.tools.transport import GUARD_REFUSAL_PREFIX

__all__ = ["BaseTool", "ToolConfigError", "failure_for_status", "parse_retry_after", "truncate"]

log = logging.getLogger(__name__)

_TRUNCATION_MARK = "\n[... truncated]"
_REDACTED = "[redacted]"


class ToolConfigError(ValueError):
    """A tool's spec cannot be turned into a working tool (raised when tools are built, never on call)."""


def truncate(text: str, limit: int) -> str:
    """Cut `text` to at most `limit` characters, marking the cut."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(_TRUNCATION_MARK))
    return text[:keep].rstrip() + _TRUNCATION_MARK


def failure_for_status(response: httpx.Response) -> ToolFailure | None:
    """Classify a non-success status: 429 and 5xx are retryable, other 4xx are not."""
    status = response.status_code
    if status < 400:
        return None
    reason = response.reason_phrase or ""
    if status == 429:
        return ToolFailure("rate_limited", "HTTP 429 Too Many Requests", retryable=True,
                           retry_after=parse_retry_after(response.headers.get("retry-after")))
    if status >= 500:
        return ToolFailure("http_5xx", f"HTTP {status} {reason}".strip(), retryable=True,
                           retry_after=parse_retry_after(response.headers.get("retry-after")))
    return ToolFailure("http_4xx", f"HTTP {status} {reason}".strip())


def _failure_for_exception(exc: BaseException, timeout_s: float) -> ToolFailure:
    if isinstance(exc, ToolFailure):
        return exc
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return ToolFailure("timeout", f"timed out after {timeout_s:g}s", retryable=True)
    if isinstance(exc, httpx.ConnectError):
        text = str(exc)
        if GUARD_REFUSAL_PREFIX in text:
            return ToolFailure("ssrf", "refused: " + text.split(GUARD_REFUSAL_PREFIX, 1)[1][:200])
        return ToolFailure("connect", f"connection failed: {text[:200] or type(exc).__name__}")
    if isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)):
        return ToolFailure("network", f"connection broke: {type(exc).__name__}", retryable=True)
    if isinstance(exc, httpx.HTTPError):
        return ToolFailure("network", f"request failed: {type(exc).__name__}: {str(exc)[:200]}")
    return ToolFailure("internal", f"{type(exc).__name__}: {str(exc)[:200]}")


class BaseTool:
    """Shared call path; subclasses set `backend` and implement `_attempt` (and usually `cache_material`)."""

    backend: str = "base"
    cache_by_default: bool = True

    def __init__(self, name: str, spec: ToolSpec, *, metrics: ToolMetrics | None = None,
                 cache: ResponseCache | None = None) -> None:
        self.name = name
        self.spec = spec
        self.config: dict[str, Any] = dict(spec.config)
        try:  # the parser validate uses: a config that validates builds
            self.settings: dict[str, Any] = parse_tool_config(spec.backend, self.config, timeout_s=spec.timeout_s)
        except ToolConfigProblem as exc:
            raise ToolConfigError(f"tool {name!r}: {exc}") from None
        self.metrics = metrics if metrics is not None else ToolMetrics()
        use_cache = bool(self.settings["cache"])
        self.cache = cache if (cache is not None and cache.mode != "off" and use_cache) else None
        try:  # local references only, and an empty registry: argument checks never fetch anything
            self._validator = make_validator(spec.parameters)
        except SchemaProblem as exc:
            raise ToolConfigError(f"tool {name!r}: parameters: {exc}") from None
        self.backoff_s = self.settings["backoff_s"]
        self.max_backoff_s = self.settings["max_backoff_s"]
        self.max_retry_after_s = self.settings["max_retry_after_s"]
        self.jitter = self.settings["jitter"]
        # All attempts and waits of one call together (a tool that keeps failing must not stall a rollout).
        self.deadline_s = self.settings["deadline_s"]
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        """How backoff waits happen (replaceable, e.g. to observe the delays chosen)."""

    # -- hooks -------------------------------------------------------------------------------------
    def secrets(self) -> list[str]:
        """Values that must never appear in results, logs or cache files (e.g. API keys)."""
        return []

    def cache_material(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """What identifies this call in the cache (no secrets); None means not cacheable."""
        return {"tool": self.name, "backend": self.backend, "args": normalise_args(args)}

    def portable(self, text: str) -> str:
        """Text as stored in the cache (e.g. machine-specific URLs replaced by placeholders)."""
        return text

    def localise(self, text: str) -> str:
        """Inverse of :meth:`portable`, applied to cached texts."""
        return text

    def retryable(self, failure: ToolFailure) -> bool:
        return failure.retryable

    async def _attempt(self, args: dict[str, Any]) -> str:
        raise NotImplementedError

    # -- the call path -----------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        for secret in self.secrets():
            if secret and len(secret) >= 4:
                text = text.replace(secret, _REDACTED)
        return text

    def _error(self, kind: str, message: str, started: float, attempts: int) -> ToolResult:
        self.metrics.count_error(self.name, kind)
        text = truncate(self.redact(f"[{self.name} error] {message}"), self.spec.max_output_chars)
        log.debug("tool %s failed (%s): %s", self.name, kind, text)
        return ToolResult(text=text, ok=False, error=kind, seconds=time.perf_counter() - started, attempts=attempts)

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool; every failure becomes ToolResult(ok=False) with a short text."""
        started = time.perf_counter()
        self.metrics.count_call(self.name)
        try:
            return await self._call(arguments, started)
        except Exception as exc:  # the last line of defence: tools never raise
            failure = _failure_for_exception(exc, self.spec.timeout_s)
            return self._error(failure.kind, failure.message, started, 1)

    async def _call(self, arguments: Any, started: float) -> ToolResult:
        if not isinstance(arguments, dict):
            return self._error("invalid_args", "arguments must be a JSON object", started, 0)
        problems = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path)
            msg = problems[0].message if not where else f"{where}: {problems[0].message}"
            return self._error("invalid_args", f"invalid arguments: {msg[:300]}", started, 0)
        material = self.cache_material(arguments) if self.cache is not None else None
        if self.cache is not None and material is not None and self.cache.reads:
            hit = self.cache.get(material)
            if hit is not None:
                self.metrics.count_cache_hit(self.name)
                return ToolResult(text=self.localise(str(hit["text"])), ok=bool(hit.get("ok", True)),
                                  error=hit.get("error"), seconds=time.perf_counter() - started,
                                  cached=True, attempts=0)
            if self.cache.mode == "replay":
                return self._error("cache_miss", "no recorded response for this call (replay mode)", started, 0)
        result = await self._run_with_retries(arguments, started)
        if self.cache is not None and material is not None:
            self.cache.put(material, text=self.portable(result.text), ok=result.ok, error=result.error)
        return result

    def retry_policy(self) -> RetryPolicy:
        """This tool's retries: count from the spec, waits and deadline from its config."""
        return RetryPolicy(retries=self.spec.retries, backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
                           jitter=self.jitter, deadline_s=self.deadline_s, max_retry_after_s=self.max_retry_after_s)

    async def _run_with_retries(self, args: dict[str, Any], started: float) -> ToolResult:
        tried = 0

        async def once(n: int) -> str:
            nonlocal tried
            tried = n
            try:
                async with asyncio.timeout(self.spec.timeout_s):
                    return await self._attempt(args)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failure = _failure_for_exception(exc, self.spec.timeout_s)
                if self.retryable(failure):
                    raise RetryableError(failure.message, retry_after=failure.retry_after, kind=failure.kind) from None
                raise _FinalFailure(failure) from None

        def count(n: int, error: RetryableError, delay: float) -> None:
            self.metrics.count_retry(self.name)
            log.debug("tool %s attempt %d failed (%s); retrying in %.2fs", self.name, n, error.kind, delay)

        try:
            text = await retry_async(once, self.retry_policy(), sleep=self.sleep, on_retry=count)
        except _FinalFailure as final:
            suffix = f" (after {tried} attempts)" if tried > 1 else ""
            return self._error(final.failure.kind, final.failure.message + suffix, started, tried)
        except RetryExhausted as exc:
            kind = exc.last.kind if isinstance(exc.last, RetryableError) else "timeout"
            return self._error(kind, str(exc), started, exc.attempts)
        text = truncate(self.redact(text), self.spec.max_output_chars)
        return ToolResult(text=text, ok=True, seconds=time.perf_counter() - started, attempts=tried)


class _FinalFailure(Exception):
    """A failure that retrying will not heal (carried out of the retry loop unchanged)."""

    def __init__(self, failure: ToolFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure
