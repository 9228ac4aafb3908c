"""LLM-as-judge accuracy over any OpenAI-compatible ``/chat/completions`` endpoint (httpx).

A judge that times out, errors or answers in an unreadable way is retried, and when it still fails
the tree is scored by the local fallback scorer of the judge config; the breakdown is marked
``judge_fallback=True`` and counted in :class:`JudgeStats`. Nothing here raises on a judge failure:
a flaky judge must not crash a training step. The API key is read from the environment variable
named in the config, sent only in the Authorization header, and never logged or recorded.

The endpoint and the key's variable come from the graph, so the judge applies the user's trust
policy (:mod:`matpo_graph.core.trust`): the key is sent only when the user granted that variable for
that endpoint, over https; the endpoint passes the scrape tool's address guard (private, loopback,
link-local and metadata addresses only when the user allowed the host), checked again on the
connection itself. A refusal is a judge failure like any other: the tree falls back to the local scorer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from matpo_graph.core.addresses import http_url_problem
from matpo_graph.core.program import CreditPlan
from matpo_graph.core.reward import LOCAL_SCORERS, final_answer, score_answer, score_tree, with_reward
from matpo_graph.core.rollout import RewardBreakdown, RolloutTree
from matpo_graph.core.trust import TrustPolicy, active_trust
from matpo_graph.retry import (
    RetryableError,
    RetryExhausted,
    RetryPolicy,
    is_retryable_status,
    retry_after_from_headers,
    retry_async,
)
from matpo_graph.tools.netguard import AddressGuard, Resolver

__all__ = [
    "JUDGE_SYSTEM_PROMPT",
    "JudgeConfig",
    "JudgeStats",
    "JudgeVerdict",
    "LLMJudge",
    "parse_verdict",
    "score_trees_judged",
    "score_trees_with_judge",
]

log = logging.getLogger(__name__)

JUDGE_SYSTEM_PROMPT = (
    "You check whether a proposed answer to a question means the same thing as a reference answer.\n"
    "Accept different wording, spelling variants, abbreviations, extra harmless detail, and numbers that are "
    "equal once units and formatting are settled. Reject an answer that is vague, hedges between several "
    "options, contradicts the reference, or answers a different question. Any one of the listed reference "
    "answers is acceptable.\n"
    "Think briefly if you need to, then end with exactly one line: VERDICT: CORRECT or VERDICT: INCORRECT"
)

MAX_RESPONSE_BYTES = 1_000_000
"""Largest judge response read; a larger one is a failure (the verdict is one short line)."""

_VERDICT_RE = re.compile(r"VERDICT\s*:\s*\**\s*(CORRECT|INCORRECT)\b", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True/False from the last ``VERDICT: CORRECT|INCORRECT`` line; None when there is none."""
    found = _VERDICT_RE.findall(text)
    return found[-1].upper() == "CORRECT" if found else None


def _user_prompt(question: str, answer: str, golds: Sequence[str]) -> str:
    refs = "\n".join(f"- {g}" for g in golds)
    return f"Question:\n{question}\n\nReference answer(s):\n{refs}\n\nProposed answer:\n{answer}"


@dataclass(frozen=True)
class JudgeConfig:
    """Where the judge runs; mirrors the DSL's ``reward.accuracy.judge`` block."""

    endpoint: str
    model: str
    api_key_env: str | None = None
    retries: int = 2
    timeout_s: float = 30.0
    fallback: str = "contains"
    max_tokens: int = 256

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "JudgeConfig":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        config = cls(**known)
        if config.fallback not in LOCAL_SCORERS:
            raise ValueError(f"judge fallback {config.fallback!r} is not a local scorer: {', '.join(LOCAL_SCORERS)}")
        return config

    @property
    def url(self) -> str:
        base = self.endpoint.rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"


@dataclass
class JudgeStats:
    """Counters of judge use; read them as metrics with :meth:`as_metrics`."""

    calls: int = 0
    correct: int = 0
    failures: int = 0
    fallbacks: int = 0
    attempts: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, float]:
        return {
            "matpo/judge/calls": float(self.calls),
            "matpo/judge/correct": float(self.correct),
            "matpo/judge/failures": float(self.failures),
            "matpo/judge/fallbacks": float(self.fallbacks),
            "matpo/judge/attempts": float(self.attempts),
        }


@dataclass(frozen=True)
class JudgeVerdict:
    """The judge's decision (None when it failed), how many attempts it took, and why it failed."""

    correct: bool | None
    attempts: int
    error: str | None = None


class _Retryable(RetryableError):
    """A judge failure worth another try (timeouts, transport errors, 429/5xx, unreadable replies)."""


class LLMJudge:
    """Judges answers with retries; falls back to a local scorer instead of raising."""

    def __init__(
        self,
        config: JudgeConfig,
        *,
        client: httpx.AsyncClient | None = None,
        stats: JudgeStats | None = None,
        backoff_s: float = 0.5,
        deadline_s: float | None = 120.0,
        trust: TrustPolicy | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.config = config
        self.stats = stats if stats is not None else JudgeStats()
        self._client = client
        self._owns_client = client is None
        self._backoff_s = backoff_s
        self._deadline_s = deadline_s
        self.sleep = asyncio.sleep
        """How waits between attempts happen (replaceable, e.g. to observe the delays chosen)."""
        policy = trust if trust is not None else active_trust()
        self.guard = AddressGuard(policy.allow_hosts, resolver=resolver)
        self._refusal: str | None = None
        invalid = http_url_problem(config.endpoint)  # the check validate applies
        if invalid:
            self._refusal = f"refused: the judge endpoint {invalid}"
        elif config.api_key_env:
            problem = policy.secret_problem(config.api_key_env, config.url)
            self._refusal = f"refused: {problem}" if problem else None

    @classmethod
    def from_plan(cls, plan: CreditPlan, **kwargs: Any) -> "LLMJudge":
        if not plan.judge:
            raise ValueError("the credit plan has no judge config (reward.accuracy.judge)")
        return cls(JudgeConfig.from_mapping(plan.judge), **kwargs)

    async def __aenter__(self) -> "LLMJudge":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            from matpo_graph.tools.transport import make_client  # noqa: PLC0415

            self._client = make_client(guard=self.guard)
        return self._client

    async def _attempt(self, payload: dict[str, Any], headers: dict[str, str]) -> bool:
        problem = await self.guard.check_url(self.config.url)
        if problem:
            raise PermissionError(f"refused: {problem}")  # not retried: the address will not change
        try:
            client = self._http()
            request = client.build_request("POST", self.config.url, json=payload, headers=headers, timeout=self.config.timeout_s)
            resp = await client.send(request, stream=True)
            try:
                body = bytearray()
                async for chunk in resp.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise RuntimeError(f"judge response larger than {MAX_RESPONSE_BYTES} bytes")
            finally:
                await resp.aclose()
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timeout after {self.config.timeout_s}s") from exc
        except httpx.ConnectError as exc:
            if "refused by address guard" in str(exc):
                raise PermissionError(str(exc)) from exc
            raise _Retryable(f"transport error: {type(exc).__name__}") from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"transport error: {type(exc).__name__}") from exc
        if is_retryable_status(resp.status_code):
            raise _Retryable(f"HTTP {resp.status_code}", retry_after=retry_after_from_headers(resp.headers))
        if resp.status_code >= 400:
            raise RuntimeError(f"HTTP {resp.status_code}")  # auth or request errors do not heal by retrying
        try:
            content = json.loads(bytes(body))["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable("response is not a chat completion") from exc
        verdict = parse_verdict(str(content))
        if verdict is None:
            raise _Retryable("no VERDICT line in the judge's reply")
        return verdict

    async def judge(self, question: str, answer: str, golds: Sequence[str]) -> JudgeVerdict:
        """Ask the judge whether `answer` matches one of `golds`; never raises."""
        self.stats.calls += 1
        if self._refusal:
            log.warning("judge %s", self._refusal)
            return self._failed(0, self._refusal)
        headers = {"Content-Type": "application/json"}
        if self.config.api_key_env:
            key = os.environ.get(self.config.api_key_env)
            if not key:
                return self._failed(0, f"environment variable {self.config.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        payload = {
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
                {"role": "user", "content": _user_prompt(question, answer, golds)},
            ],
            "temperature": 0.0,
            "max_tokens": self.config.max_tokens,
        }
        attempts = 0

        async def once(n: int) -> bool:
            nonlocal attempts
            attempts = n
            self.stats.attempts += 1
            return await self._attempt(payload, headers)

        def note(n: int, exc: RetryableError, delay: float) -> None:
            log.warning("judge attempt %d/%d failed: %s; retrying in %.2fs", n, self.config.retries + 1, exc, delay)

        policy = RetryPolicy(retries=self.config.retries, backoff_s=self._backoff_s, max_backoff_s=10.0,
                             deadline_s=self._deadline_s)
        try:
            verdict = await retry_async(once, policy, sleep=self.sleep, on_retry=note)
        except RetryExhausted as exc:
            log.warning("judge failed: %s", exc)
            return self._failed(exc.attempts, str(exc.last) if exc.reason == "retries" and exc.last else str(exc))
        except Exception as exc:  # non-retryable: stop now and fall back
            error = f"{type(exc).__name__}: {exc}"
            log.warning("judge failed without retry: %s", error)
            return self._failed(attempts, error)
        self.stats.correct += int(verdict)
        return JudgeVerdict(correct=verdict, attempts=attempts)

    def _failed(self, attempts: int, error: str) -> JudgeVerdict:
        self.stats.failures += 1
        kind = error.split(":")[0].split(" after")[0]
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
        return JudgeVerdict(correct=None, attempts=attempts, error=error)

    async def score_tree(self, tree: RolloutTree, plan: CreditPlan) -> RewardBreakdown:
        """The tree's reward with judged accuracy, or the fallback scorer's when the judge fails."""
        answer = final_answer(tree, plan.answer_format)
        if answer is None or not tree.answers:
            return score_tree(tree, plan, accuracy=0.0, details={"scorer": "judge", "judge": "no answer to judge"})
        try:
            verdict = await self.judge(tree.question, answer, tree.answers)
        except Exception as exc:  # defensive: a bug here must not stop the run either
            verdict = self._failed(0, f"{type(exc).__name__}: {exc}")
        if verdict.correct is not None:
            return score_tree(
                tree,
                plan,
                accuracy=1.0 if verdict.correct else 0.0,
                details={"scorer": "judge", "judge_attempts": verdict.attempts},
            )
        self.stats.fallbacks += 1
        fallback = self.config.fallback
        acc = score_answer(answer, tree.answers, fallback, numeric_tolerance=plan.numeric_tolerance)
        return score_tree(
            tree,
            plan,
            accuracy=acc,
            judge_fallback=True,
            details={"scorer": fallback, "judge_error": verdict.error, "judge_attempts": verdict.attempts},
        )


async def score_trees_judged(
    trees: Sequence[RolloutTree], plan: CreditPlan, *, judge: LLMJudge | None = None, max_concurrency: int = 8
) -> list[RewardBreakdown]:
    """Score trees with the plan's judge, `max_concurrency` at a time, in input order; never raises on judge failure."""
    owned = judge is None
    judge = judge or LLMJudge.from_plan(plan)
    gate = asyncio.Semaphore(max_concurrency)

    async def one(tree: RolloutTree) -> RewardBreakdown:
        async with gate:
            return await judge.score_tree(tree, plan)

    try:
        return list(await asyncio.gather(*(one(t) for t in trees)))
    finally:
        if owned:
            await judge.aclose()


async def score_trees_with_judge(
    trees: Sequence[RolloutTree], plan: CreditPlan, *, judge: LLMJudge | None = None, max_concurrency: int = 8
) -> list[RolloutTree]:
    """New trees carrying their judged rewards (see :func:`score_trees_judged`); the inputs are not modified."""
    breakdowns = await score_trees_judged(trees, plan, judge=judge, max_concurrency=max_concurrency)
    return [with_reward(t, b) for t, b in zip(trees, breakdowns, strict=True)]
