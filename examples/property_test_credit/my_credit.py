"""A custom credit strategy: MATPO's broadcast, discounted by depth.

The root keeps its GRPO advantage; a trajectory at depth d gets ``root_advantage * GAMMA ** d``,
so deep helpers move the shared policy less than the agent whose answer was scored.
Select it in a graph with ``credit: {strategy: "my_credit:depth_discounted"}``.
"""

from __future__ import annotations

from matpo_graph.core.credit import CreditBatch, StrategyResult, broadcast

GAMMA = 0.5


def depth_discounted(batch: CreditBatch) -> StrategyResult:
    base = broadcast(batch)  # GRPO over root rewards, the root scalar on every trajectory
    advantages = {}
    for tree in batch.trees:
        for t in tree.trajectories:
            key = (tree.tree_id, t.traj_id)
            advantages[key] = base.advantages[key] * GAMMA**t.depth
    return StrategyResult(advantages, base.metrics)
