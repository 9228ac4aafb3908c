"""The null-control credit strategy keeps each group's advantages but not which tree gets them."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from matpo_graph.bench.null_credit import shuffled_broadcast
from matpo_graph.core.credit import assign_credit, broadcast, CreditBatch

from credit_helpers import plan, planner_tree


def _batch(groups: list[list[float]]) -> CreditBatch:
    trees = tuple(planner_tree(f"g{g}/{i}", f"g{g}", r, workers=1 + i % 2) for g, rs in enumerate(groups) for i, r in enumerate(rs))
    return CreditBatch(trees, {t.tree_id: t.reward.total for t in trees}, plan())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.1, 0.95, 1.0]), min_size=1, max_size=6), min_size=1, max_size=5))
def test_each_group_keeps_its_advantages_and_every_trajectory_of_a_tree_gets_one(groups):
    batch = _batch(groups)
    got, want = shuffled_broadcast(batch), broadcast(batch)
    assert set(got.advantages) == set(want.advantages)
    for tree in batch.trees:
        values = {got.advantages[(tree.tree_id, t.traj_id)] for t in tree.trajectories}
        assert len(values) == 1  # still a broadcast: one scalar per tree
    by_group = lambda res: {g: Counter(round(res.advantages[(t.tree_id, "0")], 9) for t in batch.trees if t.group_id == g)
                            for g in {t.group_id for t in batch.trees}}
    assert by_group(got) == by_group(want)
    assert shuffled_broadcast(batch).advantages == got.advantages  # the same rollouts, the same draw


def test_a_right_tree_keeps_its_positive_advantage_about_as_often_as_chance():
    # 400 groups of one right tree among four: a uniform shuffle leaves the reward with it a quarter of the time
    batch = _batch([[1.0, 0.0, 0.0, 0.0]] * 400)
    got = shuffled_broadcast(batch)
    kept = sum(got.advantages[(f"g{g}/0", "0")] > 0 for g in range(400))
    assert 70 <= kept <= 130
    assert got.metrics["matpo/credit/shuffled_trees"] > 0


def test_named_from_a_plan_it_runs_through_assign_credit_when_trusted():
    from matpo_graph.core.trust import TrustPolicy

    batch = _batch([[1.0, 0.0, 0.0, 0.0]])
    ref = "matpo_graph.bench.null_credit:shuffled_broadcast"
    trees, metrics = assign_credit(list(batch.trees), plan(strategy=ref),
                                   trust=TrustPolicy(trusted_code=("matpo_graph.bench.null_credit",)), warn=False)
    assert sorted(t.trajectories[0].advantage for t in trees) == sorted(
        v for (tid, traj), v in broadcast(batch).advantages.items() if traj == "0")
    assert "matpo/credit/shuffled_trees" in metrics
