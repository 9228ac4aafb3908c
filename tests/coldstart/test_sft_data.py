"""Trajectories to supervised examples and micro-batches (no torch)."""

from __future__ import annotations

import pytest

from matpo_graph.core.rollout import RolloutTree, Trajectory
from matpo_graph.coldstart.sft_data import SFTExample, examples_from_trees, micro_batches, opening_examples, optimizer_batches


def traj(tid, parent, mask, role="worker", depth=None):
    n = len(mask)
    return Trajectory(traj_id=tid, parent_id=parent, role=role, depth=depth if depth is not None else tid.count("."),
                      token_ids=list(range(100, 100 + n)), loss_mask=mask, logprobs=[0.0] * n,
                      prompt_length=next((i for i, m in enumerate(mask) if m), n))


def test_examples_from_trees_keeps_masks_and_cuts_the_untrained_tail():
    tree = RolloutTree(tree_id="t", group_id="g", question="q", trajectories=[
        traj("0", None, [0, 0, 1, 1, 0, 1, 0, 0], role="planner"),
        traj("0.1", "0", [0, 0, 0]),  # generated nothing: skipped
        traj("0.2", "0", [0, 1, 1]),
    ])
    out = examples_from_trees([tree])
    assert [e.key for e in out] == ["t/0", "t/0.2"]
    assert out[0].loss_mask == (0, 0, 1, 1, 0, 1) and out[0].token_ids == tuple(range(100, 106))
    assert [e.role for e in out] == ["planner", "worker"]
    assert out[0].trained_tokens == 3
    assert examples_from_trees([tree], max_tokens=5) == [out[1]]


def test_opening_examples_train_each_trajectorys_first_turn_or_all_of_it():
    tree = RolloutTree(tree_id="t", group_id="g", question="q", trajectories=[
        traj("0", None, [0, 0, 1, 1, 0, 0, 1, 0], role="planner"),
        traj("0.1", "0", [0, 0, 0, 1, 1, 1, 0, 1]),
        traj("0.2", "0", [0, 0]),  # generated nothing: no example
    ])
    silent = RolloutTree(tree_id="s", group_id="g", question="q", trajectories=[traj("0", None, [0, 0], role="planner")])
    out = opening_examples([tree, silent])
    assert [(e.key, e.role) for e in out] == [("t/0:opening", "planner"), ("t/0.1:opening", "worker")]
    assert out[0].loss_mask == (0, 0, 1, 1) and out[0].token_ids == (100, 101, 102, 103)
    assert out[1].loss_mask == (0, 0, 0, 1, 1, 1) and out[1].trained_tokens == 3
    # each a prefix of the full example: the same context the policy saw, nothing invented
    for opening, full in zip(out, examples_from_trees([tree])):
        assert full.token_ids[: len(opening)] == opening.token_ids and full.loss_mask[: len(opening)] == opening.loss_mask
    whole = opening_examples([tree, silent], whole_roles={"planner"})
    assert whole[0].loss_mask == (0, 0, 1, 1, 0, 0, 1) and whole[1] == out[1]  # the planner's every turn


def ex(key, n):
    return SFTExample(key, "r", tuple(range(n)), tuple([0] * (n - 1) + [1]))


def test_micro_batches_fit_the_token_budget_and_cover_the_batch_once():
    batch = [ex(f"e{i}", n) for i, n in enumerate([50, 400, 120, 90, 300, 700, 30])]
    micro = micro_batches(batch, max_tokens=500)
    assert sorted(e.key for m in micro for e in m) == sorted(e.key for e in batch)
    for m in micro:
        assert len(m) == 1 or len(m) * max(len(e) for e in m) <= 500
    assert [len(m[0]) for m in micro if len(m) == 1 and len(m[0]) > 500] == [700]  # too long alone: own batch


def test_optimizer_batches_are_a_seeded_partition():
    data = [ex(f"e{i}", 10) for i in range(10)]
    a = optimizer_batches(data, batch_size=4, seed=1, epoch=1)
    assert [len(b) for b in a] == [4, 4, 2]
    assert sorted(e.key for b in a for e in b) == sorted(e.key for e in data)
    assert a == optimizer_batches(data, batch_size=4, seed=1, epoch=1)
    assert a != optimizer_batches(data, batch_size=4, seed=1, epoch=2)


def test_sft_example_rejects_misaligned_arrays():
    with pytest.raises(ValueError, match="2 token ids but 3 mask values"):
        SFTExample("k", "r", (1, 2), (0, 1, 1))
