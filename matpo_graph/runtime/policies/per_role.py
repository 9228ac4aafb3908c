"""Serving a graph's per-role policies with vLLM: one engine for the base model and its adapters, one per separate model.

- The shared policy and every lora policy run on ONE engine of the base model, started with vLLM's multi-LoRA
  support (``enable_lora``, ``max_loras`` = the number of lora policies, ``max_lora_rank`` = the largest rank
  rounded up to a size vLLM accepts); each request carries its role's adapter. A fresh lora policy is served as
  the base model (peft initialises an adapter's B matrix to zero, so an untrained adapter changes nothing)
  until its first trained version is loaded.
- A separate policy gets an engine of its own. Its tokenizer must equal the base model's: trajectories are
  token ids rendered with the base model's chat template (checked here, before any engine starts).
- A :class:`~matpo_graph.runtime.policies.router.PolicyRouter` sends each generation to its role's policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matpo_graph.core.program import Program
from matpo_graph.runtime.policies.router import AdapterPolicy, PolicyRouter

__all__ = ["PerRoleEngines", "TokenizerMismatchError", "check_same_tokenizer", "vllm_lora_rank"]

_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class TokenizerMismatchError(ValueError):
    """A separate policy's model does not tokenize as the base model does."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds `rank`."""
    for r in _VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest ({_VLLM_LORA_RANKS[-1]})")


def check_same_tokenizer(base_dir: Path, other_dir: Path, *, policy: str) -> None:
    """Refuse a separate model whose vocabulary, special tokens or chat template differ from the base model's.

    Raises:
        TokenizerMismatchError: naming the policy, both folders and the first differences.
    """
    from transformers import AutoTokenizer

    a, b = AutoTokenizer.from_pretrained(str(base_dir)), AutoTokenizer.from_pretrained(str(other_dir))
    problems = []
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        diff = sorted(set(va.items()) ^ set(vb.items()))[:3]
        problems.append(f"the vocabularies differ ({len(va)} vs {len(vb)} tokens; e.g. {diff})")
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            problems.append(f"{attr} is {getattr(b, attr)} instead of {getattr(a, attr)}")
    if getattr(a, "chat_template", None) != getattr(b, "chat_template", None):
        problems.append("the chat templates differ")
    if problems:
        raise TokenizerMismatchError(
            f"separate policy {policy!r}: the tokenizer of {other_dir} does not match the base model's ({base_dir}): "
            + "; ".join(problems) + ". Roles exchange token ids, so every policy must use the base model's tokenizer."
        )


class PerRoleEngines:
    """The engines of a graph's policies and the router the executor calls.

    Args:
        program: the compiled graph.
        model_dir: the base model folder (the shared policy; lora adapters sit on it).
        engine_kwargs: VLLMPolicy arguments for every engine (kv_cache_gib, seed, max_model_len, ...).
    """

    def __init__(self, program: Program, model_dir: Path, **engine_kwargs: Any) -> None:
        from matpo_graph.runtime.models import resolve_model
        from matpo_graph.runtime.policies.vllm import VLLMPolicy

        bound = program.role_policies()
        used = {n: p for n, p in program.policies.items() if n in bound.values()}
        self.shared = next((n for n, p in program.policies.items() if p.kind == "shared"), "shared")
        self.lora = [n for n, p in used.items() if p.kind == "lora"]
        separate = {n: resolve_model(str(p.model)) for n, p in used.items() if p.kind == "separate"}
        for name, folder in separate.items():
            check_same_tokenizer(Path(model_dir), folder, policy=name)
        base_kwargs = dict(engine_kwargs)
        if self.lora:
            base_kwargs.update(enable_lora=True, max_loras=len(self.lora),
                               max_lora_rank=vllm_lora_rank(max(int(used[n].rank or 8) for n in self.lora)))
        self.engines: dict[str, Any] = {}
        try:
            self.base = VLLMPolicy(model_dir, **base_kwargs)
            self.engines[self.shared] = self.base
            for name, folder in separate.items():
                self.engines[name] = VLLMPolicy(folder, **engine_kwargs)
        except BaseException:
            self.shutdown()
            raise
        routes: dict[str, Any] = {self.shared: self.base, **{n: self.engines[n] for n in separate}}
        routes.update({n: _FreshAdapter(self.base, n) for n in self.lora})
        self.router = PolicyRouter(routes, bound)

    async def load_weights(self, policy: str, state_dict: Any) -> float:
        """New full weights for the shared (base) or a separate policy's engine."""
        return float(await self.engines[policy].load_weights(state_dict))

    async def load_adapter(self, policy: str, folder: Path) -> float:
        """A new version of a lora policy's adapter, served from now on by the base engine."""
        seconds = float(await self.base.load_adapter(policy, folder))
        self.router.routes[policy] = AdapterPolicy(self.base, policy)
        return seconds

    async def score(self, policy: str, token_ids: list[int]) -> list[float]:
        """The engine's logprobs of a fixed sequence under `policy` (to check that a sync took)."""
        if policy in self.lora:
            loaded = self.base.adapter_version(policy) is not None
            return await self.base.score(token_ids, adapter=policy if loaded else None)
        return await self.engines[policy].score(token_ids)

    def shutdown(self) -> None:
        for engine in self.engines.values():
            engine.shutdown()


class _FreshAdapter(AdapterPolicy):
    """A lora policy before its first trained version: the base model (its adapter is still zero)."""

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        if self.engine.adapter_version(self.adapter) is not None:
            return await super().generate(prompt_ids, sampling)
        return await self.engine.generate(prompt_ids, sampling)
