from matpo_graph.core.rollout import CallRecord, RewardBreakdown, RolloutTree, Trajectory, Turn
from matpo_graph.tracking.rollout_metrics import group_variance_share, rollout_metrics


def _traj(traj_id: str, role: str, depth: int, parent: str | None, n: int, calls: list[CallRecord]) -> Trajectory:
    return Trajectory(
        traj_id=traj_id, parent_id=parent, role=role, depth=depth, token_ids=list(range(n)),
        loss_mask=[0] * (n // 2) + [1] * (n - n // 2), logprobs=[0.0] * n, prompt_length=n // 2,
        turns=[Turn(index=0, text="x", num_tokens=n - n // 2, calls=calls)],
    )


def _tree(tid: str, gid: str, reward: float) -> RolloutTree:
    child_call = CallRecord(name="delegate", kind="child", child_id="0.0")
    bad = CallRecord(name="nope", kind="invalid", valid=False, error="unknown tool")
    tool_err = CallRecord(name="search", kind="tool", error="timeout")
    tool_ok = CallRecord(name="search", kind="tool")
    return RolloutTree(
        tree_id=tid, group_id=gid, question="q",
        trajectories=[
            _traj("0", "planner", 0, None, 10, [child_call, bad]),
            _traj("0.0", "worker", 1, "0", 20, [tool_err, tool_ok]),
        ],
        reward=RewardBreakdown(total=reward, accuracy=reward, format=0.5, answer="a"),
    )


def test_rollout_metrics_counts_roles_tools_and_structure() -> None:
    m = rollout_metrics([_tree("a/0", "a", 1.0), _tree("a/1", "a", 0.0)])
    assert m["trajectories_root"] == 2 and m["trajectories_descendant"] == 2
    assert m["subtasks_per_root"] == 1.0
    assert m["tokens/planner"] == 20 and m["tokens/worker"] == 40
    assert m["max_context/worker"] == 20
    assert m["tool_error_rate"] == 0.5
    assert m["invalid_call_rate"] == 0.25
    assert m["reward_mean"] == 0.5 and m["reward_std"] == 0.5


def test_group_variance_share_counts_only_varied_groups() -> None:
    trees = [_tree("a/0", "a", 1.0), _tree("a/1", "a", 0.0), _tree("b/0", "b", 0.3), _tree("b/1", "b", 0.3)]
    assert group_variance_share(trees) == 0.5


def test_format_only_differences_are_not_accuracy_signal() -> None:
    """Rewards [0.95, 1, 1, 1] (one tree's format score lower, every answer right) look like a learning signal
    to GRPO's std normalisation; the accuracy-signal count does not take them for one."""
    right = [_tree(f"a/{i}", "a", 1.0) for i in range(4)]
    right[0] = right[0].model_copy(update={"reward": RewardBreakdown(total=0.95, accuracy=1.0, format=0.5, answer="a")})
    mixed = [_tree("b/0", "b", 1.0), _tree("b/1", "b", 0.0)]
    m = rollout_metrics(right + mixed)
    assert m["group_variance_share"] == 1.0  # both groups vary in reward
    assert m["groups"] == 2 and m["groups_with_accuracy_signal"] == 1  # only b is right against wrong
