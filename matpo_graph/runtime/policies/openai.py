"""A policy behind an OpenAI-compatible ``/v1/completions`` server (vLLM's, SGLang's, ...).

The prompt goes out as token ids, and token ids come back when the server can return them: vLLM's
``return_tokens_as_token_ids`` writes each sampled token as ``token_id:<n>`` in the logprobs. A server
that only returns text is supported with a local tokenizer, but its ids are then re-tokenised text
(marked ``finish_reason`` suffix ``+retokenised``), which is fine for evaluation and wrong for training.
The API key is read from an environment variable and never logged or stored. Connection errors, 429 and
5xx are retried with backoff, jitter and the server's ``Retry-After``, within a total deadline
(matpo_graph.retry).
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from matpo_graph.retry import (
    RetryableError,
    RetryExhausted,
    RetryPolicy,
    is_retryable_status,
    retry_after_from_headers,
    retry_async,
)
from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams

__all__ = ["OpenAIPolicy"]

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class OpenAIPolicy:
    """Generate through an OpenAI-compatible completions endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: model name sent to the server; asked from ``/models`` when omitted.
        api_key_env: environment variable holding the API key (optional).
        tokenizer: a :class:`~matpo_graph.runtime.chat.ChatTokenizer` for servers that return text only.
        timeout_s: request timeout (one attempt).
        retries: retries on connection errors, 429 and 5xx.
        backoff_s: wait before the first retry (doubling, with jitter, never below the server's Retry-After).
        deadline_s: bound on one request's attempts and waits together.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key_env: str | None = None,
        tokenizer: Any = None,
        timeout_s: float = 300.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        deadline_s: float | None = 900.0,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.retries = retries
        self.retry_policy = RetryPolicy(retries=retries, backoff_s=backoff_s, deadline_s=deadline_s)
        self.sleep = asyncio.sleep
        """How waits between attempts happen (replaceable, e.g. to observe the delays chosen)."""
        headers = {}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"environment variable {api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout_s)

    async def _post(self, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx

        async def once(_n: int) -> dict[str, Any]:
            try:
                resp = await (self._client.post(path, json=payload) if payload is not None else self._client.get(path))
            except httpx.HTTPError as exc:
                raise RetryableError(f"{type(exc).__name__}: {exc}") from None
            if is_retryable_status(resp.status_code):
                raise RetryableError(f"HTTP {resp.status_code}", retry_after=retry_after_from_headers(resp.headers))
            if resp.status_code >= 400:
                raise PolicyError(f"{path}: HTTP {resp.status_code}: {resp.text[:300]}")
            try:
                return resp.json()
            except ValueError as exc:
                raise PolicyError(f"{path}: response is not JSON") from exc

        try:
            return await retry_async(once, self.retry_policy, sleep=self.sleep)
        except RetryExhausted as exc:
            raise PolicyError(f"{path}: failed: {exc}") from None

    async def _model_name(self) -> str:
        if self.model is None:
            data = await self._post("/models")
            models = data.get("data") or []
            if not models:
                raise PolicyError("the server lists no models; pass model=")
            self.model = str(models[0]["id"])
        return self.model

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        payload: dict[str, Any] = {
            "model": await self._model_name(),
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            "echo": False,
            "return_tokens_as_token_ids": True,  # vLLM extension; other servers ignore it
            "skip_special_tokens": False,
        }
        if sampling.stop:
            payload["stop"] = list(sampling.stop)
            payload["include_stop_str_in_output"] = True
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        if sampling.ignore_eos:
            payload["ignore_eos"] = True
        data = await self._post("/completions", payload)
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError) as exc:
            raise PolicyError("completions response has no choices") from exc
        text = choice.get("text") or ""
        finish = str(choice.get("finish_reason") or "stop")
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        values = lp.get("token_logprobs") or []
        matches = [_TOKEN_ID.match(str(t)) for t in tokens]
        if tokens and all(matches) and len(values) == len(tokens):
            ids = [int(m.group(1)) for m in matches if m]
            return Generation(
                token_ids=ids, logprobs=[float(v or 0.0) for v in values], finish_reason=finish, text=text
            )
        if self.tokenizer is None:
            raise PolicyError("the server returned no token ids; give the policy a tokenizer to re-tokenise its text")
        ids = self.tokenizer.encode(text)
        if finish == "stop" and self.tokenizer.eos_token_ids and not sampling.stop:
            ids.append(min(self.tokenizer.eos_token_ids))
        logprobs = [float(v or 0.0) for v in values] if len(values) == len(ids) else [0.0] * len(ids)
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish + "+retokenised", text=text)

    async def aclose(self) -> None:
        await self._client.aclose()
