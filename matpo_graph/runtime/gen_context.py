"""Which trajectory a policy call belongs to, for policies that need to know (the expert demonstrator).

The executor sets `GENERATION_CONTEXT` around every `Policy.generate` call. Ordinary policies ignore it;
the narrow `generate(prompt_ids, sampling)` protocol stays unchanged.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GENERATION_CONTEXT", "GenerationContext"]


@dataclass(frozen=True)
class GenerationContext:
    role: str
    traj_id: str
    depth: int
    question: str
    tree_id: str = ""
    group_id: str = ""
    task: dict[str, Any] = field(default_factory=dict)
    purpose: str = "act"  # act | summary | forced_answer
    turn: int = 0
    messages: tuple[tuple[str, str], ...] = ()  # (role, content) of the context so far
    metadata: dict[str, Any] = field(default_factory=dict)


GENERATION_CONTEXT: ContextVar[GenerationContext | None] = ContextVar("matpo_graph_generation_context", default=None)
