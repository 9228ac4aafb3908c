"""Per-role policies at rollout time: each generation goes to the policy its role is bound to.

The executor calls one :class:`~matpo_graph.runtime.policy.Policy`; a :class:`PolicyRouter` is that policy for a
graph with several (``policies:`` in the graph). It reads the calling role from the generation context the
executor sets, and forwards to the role's backend: the shared engine, a LoRA adapter on that engine
(:class:`AdapterPolicy`), or the engine of a separate model. A graph whose roles are all on the shared policy
needs no router.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matpo_graph.runtime.gen_context import GENERATION_CONTEXT
from matpo_graph.runtime.policy import Generation, Policy, PolicyError, SamplingParams

__all__ = ["AdapterPolicy", "PolicyRouter"]


class AdapterPolicy:
    """One LoRA adapter of an engine that serves several (see ``VLLMPolicy.load_adapter``), as a Policy."""

    def __init__(self, engine: Any, adapter: str) -> None:
        self.engine = engine
        self.adapter = adapter

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await self.engine.generate(prompt_ids, sampling, adapter=self.adapter)

    async def score(self, token_ids: list[int]) -> list[float]:
        return await self.engine.score(token_ids, adapter=self.adapter)


class PolicyRouter:
    """Dispatches each generation to the policy bound to the role that asks.

    Args:
        routes: backend by policy name (every policy a role is bound to must have one).
        role_policies: policy name by role (``Program.role_policies()``).

    Raises:
        ValueError: a role bound to a policy without a backend.
    """

    def __init__(self, routes: Mapping[str, Policy], role_policies: Mapping[str, str]) -> None:
        missing = sorted({p for p in role_policies.values() if p not in routes})
        if missing:
            raise ValueError(f"no backend for policy(ies) {', '.join(map(repr, missing))}")
        self.routes = dict(routes)
        self.role_policies = dict(role_policies)

    def policy_for(self, role: str) -> Policy:
        """The backend that plays `role`."""
        name = self.role_policies.get(role)
        if name is None:
            raise PolicyError(f"role {role!r} is bound to no policy")
        return self.routes[name]

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        info = GENERATION_CONTEXT.get(None)
        if info is None:
            raise PolicyError("a per-role policy router needs the executor's generation context (which role asks)")
        return await self.policy_for(info.role).generate(prompt_ids, sampling)
