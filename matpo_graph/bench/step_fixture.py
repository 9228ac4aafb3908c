"""A credited RL step made from expert demonstrations, for benchmarks and engine tests of the update.

The expert plays the graph through the real executor, tokenizer, embedded web and tools, so the trees
have a real step's shape: planner and worker trajectories with their system prompts, scraped pages and
reports, and rows of one role sharing their system prompt. Each tree is a different question (the
expert is deterministic, so G copies of one question would be identical rows); G rollouts of one
real question share more (the question too), so this understates what prefix sharing saves. Rewards
alternate inside each group of `group_size` consecutive trees, so every group carries signal, and
credit is MATPO's. Sampling logprobs are the caller's to set (:func:`with_logprobs`, :func:`engine_logprobs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.rollout import RolloutTree

__all__ = ["demo_step", "engine_logprobs", "with_logprobs"]


def demo_step(program: Program, plan: CreditPlan, *, model_dir: str | Path, questions: int = 8,
              group_size: int = 4, seed: int = 0) -> list[RolloutTree]:
    """`questions` expert trees in groups of `group_size`, credited as one RL step (advantages set).

    Raises:
        ValueError: the expert produced fewer than two trees.
    """
    from matpo_graph.coldstart.demonstrations import make_demos
    from matpo_graph.core.credit import assign_credit

    batch = make_demos(program, plan, n=questions, model_dir=model_dir, seed=seed, max_hops=2, keep_all=True)
    if len(batch.trees) < 2:
        raise ValueError(f"the expert made {len(batch.trees)} trees; a step needs at least two")
    trees = [t.model_copy(update={"group_id": f"g{i // group_size}", "tree_id": f"t{i:03d}"})
             for i, t in enumerate(batch.trees)]
    rewards = {t.tree_id: (1.0 if i % 2 == 0 else 0.1) for i, t in enumerate(trees)}
    credited, _ = assign_credit(trees, plan, rewards=rewards, warn=False)
    return credited


def with_logprobs(trees: Sequence[RolloutTree],
                  logprobs: Callable[[list[list[int]], list[list[int]]], list[list[float]]]) -> list[RolloutTree]:
    """Trees whose trajectories carry ``logprobs(rows, trained_positions)`` (one list per row, all rows of
    the step at once) at their trained tokens and 0 elsewhere, standing in for the engine's sampling logprobs."""
    rows: list[list[int]] = []
    positions: list[list[int]] = []
    for tree in trees:
        for t in tree.trajectories:
            rows.append(list(t.token_ids))
            positions.append([i for i, m in enumerate(t.loss_mask) if m])
    values = logprobs(rows, positions)
    out = []
    at = 0
    for tree in trees:
        trajs = []
        for t in tree.trajectories:
            lp = [0.0] * len(t.token_ids)
            for i, v in zip(positions[at], values[at], strict=True):
                lp[i] = float(v)
            at += 1
            trajs.append(t.model_copy(update={"logprobs": lp}))
        out.append(tree.model_copy(update={"trajectories": trajs}))
    return out


def engine_logprobs(model: Any, *, temperature: float = 0.7, max_tokens: int = 8192) -> Callable[
        [list[list[int]], list[list[int]]], list[list[float]]]:
    """A float32 forward engine over `model` as a :func:`with_logprobs` source: what a float32 inference
    engine sampling at `temperature` reports, up to kernel rounding."""
    import torch

    from matpo_graph.model.forward import ForwardEngine, chunk_rows

    engine = ForwardEngine(model, precision="fp32")

    def run(rows: list[list[int]], positions: list[list[int]]) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in rows]
        keep = [r for r in range(len(rows)) if positions[r]]
        with torch.no_grad():
            for chunk in chunk_rows([rows[r] for r in keep], max_tokens):
                idx = [keep[c] for c in chunk]
                got = engine.row_logprobs([rows[r] for r in idx], [positions[r] for r in idx], [temperature] * len(idx))
                for r, lp in zip(idx, got.logprobs, strict=True):
                    out[r] = lp.tolist()
        return out

    return run
