"""A policy that replies from a script: for executor tests and benchmarks, never for training.

The script is a list of replies (used in call order), a callable that sees the request (prompt, sampling
and the :class:`~matpo_graph.runtime.gen_context.GenerationContext`: role, trajectory id, turn), or a
JSON file holding either a list or ``{"rules": [...], "default": ..., "latency_s": ...}`` where each rule
may test ``role``, ``turn``, ``depth``, ``purpose`` and ``contains`` (substrings of the decoded prompt)
and gives a ``reply``. Reply text is tokenised with the real tokenizer and ends with the end-of-turn
token, as a model's reply would; logprobs are a fixed function of the token id, so tests can check that
they travel through unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matpo_graph.runtime.chat import ChatTokenizer
from matpo_graph.runtime.gen_context import GENERATION_CONTEXT, GenerationContext
from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams

__all__ = ["ScriptRequest", "ScriptedPolicy", "scripted_logprob"]


@dataclass(frozen=True)
class ScriptRequest:
    prompt_ids: list[int]
    sampling: SamplingParams
    index: int  # how many requests this policy received before this one
    context: GenerationContext | None
    tokenizer: ChatTokenizer

    @property
    def prompt_text(self) -> str:
        return self.tokenizer.decode(self.prompt_ids, skip_special_tokens=False)


Reply = str | Generation
Handler = Callable[[ScriptRequest], Reply | Awaitable[Reply]]


def scripted_logprob(token_id: int) -> float:
    """The logprob the scripted policy reports for a token: fixed, distinct per token id, negative."""
    return -0.05 - (token_id % 97) / 100.0


class ScriptedPolicy:
    """Replies from a script with an optional fixed latency per request; safe to call concurrently."""

    def __init__(
        self,
        script: Sequence[str] | Handler,
        tokenizer: ChatTokenizer,
        *,
        latency_s: float = 0.0,
        end_with_eos: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.latency_s = latency_s
        self.end_with_eos = end_with_eos
        self._counter = itertools.count()
        self.requests: list[ScriptRequest] = []
        if callable(script):
            self._handler: Handler = script
        else:
            replies = list(script)
            if not replies:
                raise ValueError("a scripted policy needs at least one reply")
            self._handler = lambda req: replies[req.index % len(replies)]

    @classmethod
    def from_file(cls, path: str | Path, tokenizer: ChatTokenizer, **kwargs: Any) -> ScriptedPolicy:
        """Load a JSON script: a list of replies or ``{"rules": [...], "default": str, "latency_s": float}``."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a readable JSON script: {exc}") from exc
        if isinstance(data, list) and all(isinstance(x, str) for x in data):
            return cls(data, tokenizer, **kwargs)
        if not isinstance(data, dict) or not isinstance(data.get("rules", []), list):
            raise ValueError(f"{path}: a script is a list of strings or an object with 'rules' and 'default'")  # noqa: TRY004
        kwargs.setdefault("latency_s", float(data.get("latency_s", 0.0)))
        return cls(_rule_handler(data.get("rules", []), data.get("default"), path), tokenizer, **kwargs)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        req = ScriptRequest(list(prompt_ids), sampling, next(self._counter), GENERATION_CONTEXT.get(), self.tokenizer)
        self.requests.append(req)
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        reply = self._handler(req)
        if inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, Generation):
            return reply
        if not isinstance(reply, str):
            raise PolicyError(f"script returned {type(reply).__name__}, expected str or Generation")
        ids = self.tokenizer.encode(reply)
        if self.end_with_eos and self.tokenizer.eos_token_ids:
            ids.append(min(self.tokenizer.eos_token_ids))
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        return Generation(token_ids=ids, logprobs=[scripted_logprob(i) for i in ids], finish_reason=finish, text=None)


def _rule_handler(rules: list[dict[str, Any]], default: Any, path: Path) -> Handler:
    keys = {"role", "turn", "depth", "purpose", "contains", "reply"}
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or not isinstance(rule.get("reply"), str) or set(rule) - keys:
            raise ValueError(f"{path}: rules[{i}] needs a string 'reply' and only the keys {sorted(keys)}")

    def handle(req: ScriptRequest) -> str:
        ctx = req.context
        text: str | None = None
        for rule in rules:
            tested = [k for k in ("role", "turn", "depth", "purpose") if k in rule]
            if tested and (ctx is None or any(rule[k] != getattr(ctx, k) for k in tested)):
                continue
            needles = rule.get("contains", [])
            needles = [needles] if isinstance(needles, str) else needles
            if needles:
                text = text if text is not None else req.prompt_text
                if not all(n in text for n in needles):
                    continue
            return rule["reply"]
        if isinstance(default, str):
            return default
        raise PolicyError(f"{path}: no rule matched and there is no default reply")

    return handle
