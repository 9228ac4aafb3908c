"""The one protocol every policy backend implements: prompt token ids in, sampled ids and logprobs out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_TEMPERATURE", "Generation", "Policy", "PolicyError", "SamplingParams", "UpdatablePolicy"]

# The sampling temperature `rollout`, `train` and `eval` use unless told otherwise (roles may set their own):
# 0.7 keeps a 135M model from derailing while leaving a GRPO group enough spread.
DEFAULT_TEMPERATURE = 0.7


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=512, ge=1)
    stop: tuple[str, ...] = Field(default=(), description="Stop strings (kept in the output, see include_stop).")
    seed: int | None = None
    ignore_eos: bool = Field(default=False, description="Keep sampling past the end-of-turn token (benchmarks only).")


class Generation(BaseModel):
    """What a policy sampled. `logprobs[i]` is the sampling logprob of `token_ids[i]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"
    text: str | None = Field(default=None, description="Decoded text, when the backend has it.")
    adapter: str | None = Field(default=None, description="The LoRA adapter (name@version) that sampled it, if any.")


class PolicyError(RuntimeError):
    """A policy backend failed to produce a generation (recorded in the trajectory, never fatal)."""


@runtime_checkable
class Policy(Protocol):
    """A shared LLM policy. One instance plays every role; only the prompts differ."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sample a continuation of `prompt_ids`. Must be safe to call concurrently."""
        ...


@runtime_checkable
class UpdatablePolicy(Policy, Protocol):
    """A policy whose weights the trainer can replace between rollout phases (vllm, hf)."""

    async def load_weights(self, state_dict: Mapping[str, Any]) -> float:
        """Serve `state_dict` from now on (``lm_head.weight`` included); returns the seconds it took."""
        ...
