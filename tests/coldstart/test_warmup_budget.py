"""The warm-up token budget: equal trained tokens for graphs whose demonstrations differ in length (no torch)."""

from __future__ import annotations

import pytest

from matpo_graph.core.rollout import RolloutTree, Trajectory
from matpo_graph.coldstart.sft_data import examples_from_trees, opening_examples, within_token_budget


def tree(name: str, first_turn: int, later: int = 0) -> RolloutTree:
    """One root trajectory: a prompt of 3 tokens, a first turn of `first_turn` tokens, then `later` more after a result."""
    mask = [0, 0, 0] + [1] * first_turn + ([0, 0] + [1] * later if later else [])
    n = len(mask)
    root = Trajectory(traj_id="0", role="agent", depth=0, token_ids=list(range(n)), loss_mask=mask,
                      logprobs=[0.0] * n, prompt_length=3)
    return RolloutTree(tree_id=name, group_id=name, question="q", trajectories=[root])


def trained(demos, drills) -> int:
    return sum(e.trained_tokens for e in examples_from_trees(demos) + opening_examples(drills))


def test_budget_keeps_the_proportion_and_stops_before_passing_it():
    demos = [tree(f"d{i}", 10, 10) for i in range(4)]  # 20 trained tokens each
    drills = [tree(f"r{i}", 5, 50) for i in range(8)]  # a drill trains only its first turn: 5 tokens
    kept_demos, kept_drills = within_token_budget(demos, drills, max_trained_tokens=62)
    # order by position: r0 d0 r1 r2 d1 r3 r4 d2 ... -> 5+20+5+5+20+5 = 60, the next (r4, 5) would pass 62
    assert [t.tree_id for t in kept_demos] == ["d0", "d1"]
    assert [t.tree_id for t in kept_drills] == ["r0", "r1", "r2", "r3"]
    assert trained(kept_demos, kept_drills) == 60


def test_budget_larger_than_everything_keeps_everything_in_order():
    demos = [tree(f"d{i}", 10) for i in range(3)]
    drills = [tree(f"r{i}", 4) for i in range(6)]
    kept = within_token_budget(demos, drills, max_trained_tokens=10**6)
    assert kept == (demos, drills)


def test_graphs_with_longer_demonstrations_get_fewer_of_them_for_the_same_budget():
    short = [tree(f"s{i}", 10) for i in range(40)]
    long = [tree(f"l{i}", 30) for i in range(40)]
    kept_short, _ = within_token_budget(short, [], max_trained_tokens=300)
    kept_long, _ = within_token_budget(long, [], max_trained_tokens=300)
    assert (len(kept_short), len(kept_long)) == (30, 10)
    assert trained(kept_short, []) == trained(kept_long, []) == 300


def test_budget_must_be_positive():
    with pytest.raises(ValueError):
        within_token_budget([tree("d", 3)], [], max_trained_tokens=0)
