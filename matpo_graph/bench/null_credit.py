"""A credit strategy that carries no information about correctness: the null control of a learning benchmark.

Held-out greedy answers near a tie flip under almost any change of the weights, and which way depends only on
whether the starting policy had them right. So "RL moved held-out accuracy by x" needs a control that changes the
weights as much, on the same batches, without learning from the reward. :func:`shuffled_broadcast` is MATPO's
broadcast after each group's rewards have been shuffled among its trees: every group keeps its multiset of
advantages (the update has the same size and the same rows), but which tree gets which is a random draw, so the
expected advantage of a right tree is zero. Name it in a graph's credit block as
``strategy: matpo_graph.bench.null_credit:shuffled_broadcast`` (it is project code, but a graph naming code still
needs the user's trust: ``--trust-module matpo_graph.bench.null_credit``).
"""

from __future__ import annotations

import random
import zlib

from matpo_graph.core.credit import CreditBatch, StrategyResult, broadcast

__all__ = ["shuffled_broadcast"]


def _group_rng(group_id: str, generated_tokens: int) -> random.Random:
    """A draw fixed by the group's rollouts, so a step replays identically and a question met again (other samples,
    other token counts) gets a fresh draw."""
    return random.Random(zlib.crc32(f"{group_id}|{generated_tokens}".encode()))


def shuffled_broadcast(batch: CreditBatch) -> StrategyResult:
    """MATPO's broadcast of group-normalised root rewards, after shuffling each group's rewards among its trees."""
    shuffled: dict[str, float] = {}
    for group_id, trees in batch.groups().items():
        rewards = [batch.rewards[t.tree_id] for t in trees]
        tokens = sum(turn.num_tokens for tree in trees for t in tree.trajectories for turn in t.turns)
        _group_rng(group_id, tokens).shuffle(rewards)
        shuffled.update(zip((t.tree_id for t in trees), rewards, strict=True))
    result = broadcast(CreditBatch(batch.trees, shuffled, batch.plan))
    moved = sum(shuffled[tid] != r for tid, r in batch.rewards.items() if tid in shuffled)
    return StrategyResult(result.advantages, {**result.metrics, "matpo/credit/shuffled_trees": float(moved)})
