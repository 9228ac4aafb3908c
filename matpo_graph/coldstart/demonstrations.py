"""Expert demonstrations: rollout trees the expert policy makes through the real executor and real tools.

Only trees that earn the full reward (right answer, every call well formed) are kept, so supervised
warm-up never imitates a failed or sloppy episode.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.reward import score_tree, with_reward
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.data.qa import QAItem
from matpo_graph.env.questions import within_hops

__all__ = ["DemoBatch", "full_reward", "pick_questions", "generate_demos", "make_demos"]


@dataclass
class DemoBatch:
    """Kept demonstrations and what happened to the others."""

    trees: list[RolloutTree]
    tried: int
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return len(self.trees)

    def describe(self) -> str:
        failed = sum(self.rejected.values())
        why = ", ".join(f"{k}: {v}" for k, v in sorted(self.rejected.items()))
        return (f"{self.kept} demonstrations kept; {self.tried} questions tried, {self.tried - failed} with full reward"
                + (f" (rejected {why})" if why else ""))


def full_reward(plan: CreditPlan) -> float:
    """The best total reward a tree can earn under `plan`."""
    return plan.accuracy_weight + plan.format_weight


def pick_questions(items: Sequence[QAItem], n: int, *, seed: int, max_hops: int | None = None) -> list[QAItem]:
    """`n` questions in a seeded order, round-robin over hop counts so short and long chains both appear."""
    pool = within_hops(items, max_hops)
    rng = random.Random(f"demos:{seed}")
    by_hops: dict[int, list[QAItem]] = {}
    for it in pool:
        by_hops.setdefault(int(it.metadata.get("hops", 1)), []).append(it)
    for bucket in by_hops.values():
        rng.shuffle(bucket)
    out: list[QAItem] = []
    keys = sorted(by_hops)
    while len(out) < n and any(by_hops.values()):
        for k in keys:
            if by_hops[k] and len(out) < n:
                out.append(by_hops[k].pop())
    return out


async def generate_demos(
    program: Program,
    plan: CreditPlan,
    items: Sequence[QAItem],
    *,
    tokenizer: Any,
    embedded_url: str | None,
    concurrency: int = 8,
    keep_all: bool = False,
    variety: float = 0.0,
    seed: int = 0,
) -> DemoBatch:
    """Run the expert once per question and keep the trees with full reward.

    Args:
        program, plan: the compiled graph and its credit plan (for scoring).
        items: questions with decompositions.
        tokenizer: the model's ChatTokenizer (demonstrations are in its token ids).
        embedded_url: the embedded web's URL for tools with ``endpoint: embedded``.
        concurrency: trees run at the same time.
        keep_all: keep every tree (scored), not only the full-reward ones.
        variety, seed: how often the expert departs from its canonical choices, and the seed of those
            draws (see :class:`~matpo_graph.coldstart.expert.ExpertPolicy`).

    Raises:
        ExpertUnsupported: the expert cannot play a role of the graph (before anything runs).
    """
    from matpo_graph.coldstart.expert import ExpertPolicy
    from matpo_graph.runtime.executor import Executor
    from matpo_graph.runtime.policy import SamplingParams
    from matpo_graph.tools.registry import build_tools

    policy = ExpertPolicy(program, tokenizer, items, variety=variety, seed=seed)
    tools = build_tools(program.tools, embedded_url=embedded_url)
    executor = Executor(program, policy, tokenizer, tools, sampling=SamplingParams(temperature=0.0))
    gate = asyncio.Semaphore(max(1, concurrency))
    best = full_reward(plan)

    async def one(i: int, item: QAItem) -> RolloutTree:
        async with gate:
            tree = await executor.run(item.question, tree_id=f"demo-{i:05d}", group_id=item.id, answers=item.answers,
                                      metadata={"qa_id": item.id, "demonstration": True, "hops": item.metadata.get("hops")})
        return with_reward(tree, score_tree(tree, plan))

    try:
        trees = await asyncio.gather(*(one(i, it) for i, it in enumerate(items)))
    finally:
        await tools.aclose()
    kept: list[RolloutTree] = []
    rejected: dict[str, int] = {}
    for tree in trees:
        reward = tree.reward
        assert reward is not None
        if keep_all or reward.total >= best - 1e-9:
            kept.append(tree)
            continue
        why = "wrong_answer" if reward.accuracy < 1.0 else "format"
        if any(t.termination == "policy_error" for t in tree.trajectories):
            why = "policy_error"
        rejected[why] = rejected.get(why, 0) + 1
    return DemoBatch(kept, len(trees), rejected)


def make_demos(
    program: Program,
    plan: CreditPlan,
    *,
    n: int,
    model_dir: str | Path,
    seed: int = 0,
    env_seed: int = 0,
    env_entities: int = 400,
    max_hops: int | None = None,
    split: str = "train",
    oversample: float = 1.5,
    keep_all: bool = False,
    variety: float = 0.0,
) -> DemoBatch:
    """Serve the embedded web, draw questions from `split` and return up to `n` full-reward demonstrations.

    Asks the expert for ``ceil(n * oversample)`` questions (a few demonstrations fail on noisy pages or
    distractor names) and keeps the first `n` that earn the full reward (with `keep_all`, the first `n`
    trees whatever their reward). `variety`: see :func:`generate_demos`.

    Raises:
        ExpertUnsupported: the expert cannot play the graph.
        KeyError: `split` is not one of the world's splits.
    """
    from matpo_graph.coldstart.expert_plan import plan_expert
    from matpo_graph.env.server import serve_in_thread
    from matpo_graph.runtime.chat import ChatTokenizer

    plan_expert(program)  # fail before starting anything when the expert cannot play the graph
    tokenizer = ChatTokenizer.from_pretrained(model_dir)
    handle = serve_in_thread(seed=env_seed, n_entities=env_entities)
    try:
        pool = handle.world.questions[split]
        asked = pick_questions(pool, n if keep_all else max(n, math.ceil(n * oversample)), seed=seed, max_hops=max_hops)
        batch = asyncio.run(generate_demos(program, plan, asked, tokenizer=tokenizer, embedded_url=handle.url,
                                           keep_all=keep_all, variety=variety, seed=seed))
    finally:
        handle.stop()
    batch.trees = batch.trees[:n]
    return batch
