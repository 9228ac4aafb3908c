"""A custom credit strategy for the training test: fixed, non-zero advantages.

With the untrained embedded model every reward is 0, so GRPO's advantages would all be 0 and no
weight would move; this strategy makes the weight-update path observable regardless of rewards.
"""

from matpo_graph.core.credit import CreditBatch, StrategyResult


def alternating(batch: CreditBatch) -> StrategyResult:
    advantages = {}
    for i, tree in enumerate(batch.trees):
        for traj in tree.trajectories:
            advantages[(tree.tree_id, traj.traj_id)] = 1.0 if i % 2 == 0 else -1.0
    return StrategyResult(advantages, {"matpo/credit/custom": 1.0})
