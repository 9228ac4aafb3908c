"""The project's Policy protocol over veRL's LLM server client (token ids in, ids and logprobs out).

veRL's agent loops reach its vLLM servers through ``server_manager.generate(request_id, prompt_ids=...,
sampling_params=...) -> TokenOutput``. This adapter lets the executor, unchanged, drive them: veRL's
per-batch sampling settings (temperature, top-p/k, the greedy settings of validation) are kept, the
executor supplies the token budget, stop strings and seed of each call, and log-probabilities are
always requested because training needs the sampling logprob of every generated token.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import uuid4

from matpo_graph.runtime.gen_context import GENERATION_CONTEXT
from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams

__all__ = ["GenerationStats", "ServerClient", "ServerManagerPolicy"]

# veRL's per-batch sampling keys that are forwarded to the server as they are.
_FORWARDED = ("temperature", "top_p", "top_k", "repetition_penalty", "min_p")


class ServerClient(Protocol):
    """What the adapter needs of veRL's ``LLMServerClient``."""

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        ...


@dataclass
class GenerationStats:
    """Per-trajectory time and counts of one tree's generations, for veRL's metrics and staleness tags."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    num_preempted: int = -1
    min_global_steps: int | None = None
    max_global_steps: int | None = None

    def record(self, traj_id: str, seconds: float, output: Any) -> None:
        self.seconds[traj_id] = self.seconds.get(traj_id, 0.0) + seconds
        self.calls[traj_id] = self.calls.get(traj_id, 0) + 1
        preempted = getattr(output, "num_preempted", None)
        if preempted is not None:
            self.num_preempted = max(self.num_preempted, 0) + int(preempted)
        extra = getattr(output, "extra_fields", None) or {}
        for key, pick in (("min_global_steps", min), ("max_global_steps", max)):
            step = extra.get(key, extra.get("global_steps"))
            if step is None:
                continue
            current = getattr(self, key)
            setattr(self, key, int(step) if current is None else pick(current, int(step)))


class ServerManagerPolicy:
    """A :class:`~matpo_graph.runtime.policy.Policy` backed by veRL's server manager.

    Args:
        server: veRL's ``LLMServerClient`` (``AgentLoopBase.server_manager``).
        sampling_params: the sampling dict veRL passes to ``AgentLoopBase.run``.
        session: prefix of request ids; each trajectory keeps one request id (``<session>:<traj_id>``),
            so veRL routes its turns to the same server and reuses the prefix cache.
        request_kwargs: extra keyword arguments of every ``generate`` call (e.g. veRL's ``priority``).
    """

    def __init__(
        self,
        server: ServerClient,
        sampling_params: Mapping[str, Any],
        *,
        session: str | None = None,
        request_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.base = {k: sampling_params[k] for k in _FORWARDED if k in sampling_params}
        self.session = session or uuid4().hex
        self.request_kwargs = dict(request_kwargs or {})
        self.stats = GenerationStats()
        self._anonymous = 0

    def sampling_dict(self, sampling: SamplingParams) -> dict[str, Any]:
        """The server's sampling dict for one call (a fresh dict: the server pops keys from it)."""
        params: dict[str, Any] = dict(self.base)
        params["max_tokens"] = int(sampling.max_tokens)
        params["logprobs"] = True
        if sampling.stop:
            params["stop"] = list(sampling.stop)
            params["include_stop_str_in_output"] = True
        if sampling.seed is not None:
            params["seed"] = int(sampling.seed)
        if getattr(sampling, "ignore_eos", False):
            params["ignore_eos"] = True
        return params

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        ctx = GENERATION_CONTEXT.get()
        if ctx is not None:
            traj_id = ctx.traj_id
        else:
            self._anonymous += 1
            traj_id = f"call{self._anonymous}"
        start = time.perf_counter()
        output = await self.server.generate(
            request_id=f"{self.session}:{traj_id}",
            prompt_ids=list(prompt_ids),
            sampling_params=self.sampling_dict(sampling),
            **self.request_kwargs,
        )
        self.stats.record(traj_id, time.perf_counter() - start, output)
        if getattr(output, "stop_reason", None) == "aborted":
            raise PolicyError("the rollout server aborted the request")
        token_ids = [int(t) for t in output.token_ids]
        logprobs = output.log_probs
        if logprobs is None or len(logprobs) != len(token_ids):
            got = "none" if logprobs is None else str(len(logprobs))
            raise PolicyError(f"the rollout server returned {len(token_ids)} tokens and {got} logprobs")
        finish = "length" if len(token_ids) >= sampling.max_tokens else "stop"
        return Generation(token_ids=token_ids, logprobs=[float(x) for x in logprobs], finish_reason=finish)
