"""Small builders shared by the credit, reward and loss tests."""

from __future__ import annotations

from typing import Any

from matpo_graph.core.rollout import CallRecord, RewardBreakdown, RolloutTree, Trajectory, Turn
from matpo_graph.testing.shapes import EdgeShape, GraphShape, make_plan

PLANNER_WORKER = GraphShape(
    root="planner",
    roles=("planner", "worker"),
    edges={"planner": (EdgeShape("delegate", "worker", 3),), "worker": ()},
    tools={"planner": (), "worker": ("search",)},
    max_depth=2,
)

ONE_ROLE = GraphShape(
    root="solver", roles=("solver",), edges={"solver": ()}, tools={"solver": ("search",)}, max_depth=1
)


def traj(
    traj_id: str = "0",
    *,
    parent: str | None = None,
    role: str = "planner",
    depth: int = 0,
    mask: list[int] | None = None,
    calls: list[bool] | None = None,
    text: str = "",
    final_text: str = "",
    logprob: float = -0.5,
) -> Trajectory:
    """A trajectory whose tokens are 1..n with the given mask; `calls` lists call validity."""
    mask = mask if mask is not None else [0, 0, 1, 1, 0, 1]
    turn_calls = [CallRecord(name="search" if ok else "bogus", valid=ok) for ok in (calls or [])]
    return Trajectory(
        traj_id=traj_id,
        parent_id=parent,
        role=role,
        depth=depth,
        token_ids=list(range(1, len(mask) + 1)),
        loss_mask=mask,
        logprobs=[logprob if m else 0.0 for m in mask],
        prompt_length=next((i for i, m in enumerate(mask) if m), len(mask)),
        turns=[Turn(index=0, text=text, num_tokens=sum(mask), calls=turn_calls)],
        final_text=final_text,
    )


def tree(
    tree_id: str,
    group_id: str,
    reward: float | None,
    trajectories: list[Trajectory] | None = None,
    *,
    answers: list[str] | None = None,
) -> RolloutTree:
    return RolloutTree(
        tree_id=tree_id,
        group_id=group_id,
        question="q?",
        answers=answers or ["gold"],
        trajectories=trajectories if trajectories is not None else [traj()],
        reward=None if reward is None else RewardBreakdown(total=reward, accuracy=reward, format=0.0),
    )


def planner_tree(tree_id: str, group_id: str, reward: float | None, *, workers: int = 2) -> RolloutTree:
    """A planner root with `workers` worker children whose masks differ from the planner's."""
    ts = [traj("0", role="planner", mask=[0, 0, 1, 1, 0, 0])]
    for w in range(workers):
        ts.append(traj(f"0.{w + 1}", parent="0", role="worker", depth=1, mask=[0, 0, 0, 0, 1, 1, 0, 1][: 6 + w]))
    return tree(tree_id, group_id, reward, ts)


def plan(shape: GraphShape = PLANNER_WORKER, **overrides: Any):
    return make_plan(shape, **overrides)


def one_torch_thread():
    """Generator for an autouse fixture: tiny tensors run far faster on one thread on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
