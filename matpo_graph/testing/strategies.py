"""Hypothesis strategies: random graphs, and rollout trees shaped by a given graph.

Trees respect the graph: a trajectory of role R only calls R's tools and edges, children are
started only along R's edges, never deeper than ``max_depth`` and never more than an edge's
``max_parallel`` per turn. Token arrays follow the rollout contract: a prompt (mask 0), then per
turn a generated span (mask 1, negative logprobs) and an injected span (mask 0, logprob 0).
Rewards, lengths, call validity and masks are random.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.rollout import CallRecord, RewardBreakdown, RolloutTree, Trajectory, Turn
from matpo_graph.core.spec import Graph
from matpo_graph.testing.shapes import GraphShape, make_plan, shape_of

__all__ = [
    "DYADIC_REWARDS",
    "CreditCase",
    "credit_batches",
    "credit_cases",
    "credit_plans",
    "graphs",
    "rewards",
    "rollout_trees",
]

DYADIC_REWARDS: tuple[float, ...] = tuple(k / 8 for k in range(9))
"""Rewards whose sums and group means are exact in binary floating point (handy for oracle tests)."""


def rewards(*, dyadic_only: bool = False) -> st.SearchStrategy[float]:
    """Rewards in [0, 1]; repeated values are common so that zero-variance groups occur."""
    dyadic = st.sampled_from(DYADIC_REWARDS)
    if dyadic_only:
        return dyadic
    return st.one_of(dyadic, st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False))


@st.composite
def graphs(draw: st.DrawFn, *, max_roles: int = 4, max_edges: int = 5, max_tools: int = 2,
           policies: bool = False) -> Graph:
    """Random valid DSL graphs: roles ``r0`` (root) .. ``rK``, random tools and delegation edges
    (cycles and self-delegation allowed; ``limits.max_depth`` bounds the recursion).

    With ``policies=True`` the graph also declares up to three policies (lora groups, a separate model,
    sometimes its own shared policy) and binds each role to one of them or leaves it on the shared default;
    several roles often share one lora policy."""
    n_roles = draw(st.integers(1, max_roles))
    roles = [f"r{i}" for i in range(n_roles)]
    tool_names = [f"tool{i}" for i in range(draw(st.integers(0, max_tools)))]
    tools = {name: {"description": f"{name} tool", "backend": "search"} for name in tool_names}
    role_defs: dict[str, Any] = {}
    for r in roles:
        role_tools = draw(st.lists(st.sampled_from(tool_names), unique=True)) if tool_names else []
        role_defs[r] = {"system": f"You are {r}.", "tools": role_tools}
    pairs = draw(st.lists(st.tuples(st.sampled_from(roles), st.sampled_from(roles)), max_size=max_edges, unique=True))
    if n_roles > 1 and not any(a == "r0" for a, _ in pairs) and max_edges > 0:
        pairs.append(("r0", draw(st.sampled_from(roles[1:]))))  # a root that delegates is the interesting case
    edges = [
        {"from": a, "to": b, "as": f"call_{b}", "max_parallel": draw(st.integers(1, 3))}
        for a, b in pairs
    ]
    data: dict[str, Any] = {
        "name": "random",
        "root": "r0",
        "roles": role_defs,
        "tools": tools,
        "edges": edges,
        "limits": {"max_depth": draw(st.integers(1, 3))},
    }
    if policies:
        declared = _policy_section(draw)
        names = [*declared, None]
        for r in roles:
            chosen = draw(st.sampled_from(names))
            if chosen is not None:
                role_defs[r]["policy"] = chosen
        data["policies"] = declared
    return Graph.model_validate(data)


def _policy_section(draw: st.DrawFn) -> dict[str, Any]:
    """Up to three policies: lora groups (random rank), a separate model, at most one shared policy."""
    out: dict[str, Any] = {}
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["lora", "lora", "separate", "shared"]))
        if kind == "shared":
            if any(p["kind"] == "shared" for p in out.values()):
                continue
            out["base"] = {"kind": "shared"}
        elif kind == "lora":
            out[f"lora{i}"] = {"kind": "lora", "rank": draw(st.sampled_from([4, 8, 16]))}
        else:
            out[f"sep{i}"] = {"kind": "separate", "model": "smollm2-135m-instruct"}
    return out


@st.composite
def rollout_trees(
    draw: st.DrawFn,
    source: Graph | Program | GraphShape,
    *,
    tree_id: str = "t0",
    group_id: str = "q0",
    reward: st.SearchStrategy[float] | None = None,
    max_trajectories: int = 6,
    max_turns: int = 3,
    max_span: int = 5,
    vocab_size: int = 64,
) -> RolloutTree:
    """One rollout tree shaped by `source`, with a random reward (``reward.total``)."""
    shape = shape_of(source)
    trajectories: list[Trajectory] = []
    token = st.integers(0, vocab_size - 1)
    logprob = st.floats(-8.0, -1e-3, allow_nan=False, allow_subnormal=False)
    scheduled = [1]  # trajectories created or promised so far, the root included

    def build(role: str, depth: int, traj_id: str, parent_id: str | None) -> None:
        prompt = draw(st.integers(1, max_span + 1))
        ids = draw(st.lists(token, min_size=prompt, max_size=prompt))
        mask, lps = [0] * prompt, [0.0] * prompt
        index = len(trajectories)
        trajectories.append(Trajectory(traj_id=traj_id, parent_id=parent_id, role=role, depth=depth))  # placeholder
        edges = shape.edges_at(role, depth)
        names = list(shape.tools.get(role, ())) + [e.name for e in edges]
        turns: list[Turn] = []
        pending: list[tuple[str, str]] = []  # (child role, child id), started after this trajectory
        for k in range(draw(st.integers(1, max_turns))):
            gen = draw(st.integers(0, max_span))
            ids += draw(st.lists(token, min_size=gen, max_size=gen))
            mask += [1] * gen
            lps += draw(st.lists(logprob, min_size=gen, max_size=gen))
            calls: list[CallRecord] = []
            started: dict[str, int] = {}
            for _ in range(draw(st.integers(0, 2))):
                name = draw(st.sampled_from(names)) if names and draw(st.integers(0, 3)) else "not_a_tool"
                edge = next((e for e in edges if e.name == name), None)
                valid = name != "not_a_tool" and draw(st.integers(0, 3)) > 0
                child_id = None
                if (
                    edge is not None
                    and valid
                    and started.get(name, 0) < edge.max_parallel
                    and scheduled[0] < max_trajectories
                ):
                    scheduled[0] += 1
                    started[name] = started.get(name, 0) + 1
                    child_id = f"{traj_id}.{len(pending) + 1}"
                    pending.append((edge.child, child_id))
                kind = "invalid" if not valid else ("child" if edge is not None else "tool")
                arguments = {} if valid else None
                calls.append(CallRecord(name=name, kind=kind, valid=valid, child_id=child_id, arguments=arguments))
            turns.append(Turn(index=k, text="", num_tokens=gen, calls=calls))
            injected = draw(st.integers(0, max_span))
            ids += draw(st.lists(token, min_size=injected, max_size=injected))
            mask += [0] * injected
            lps += [0.0] * injected
        trajectories[index] = Trajectory(
            traj_id=traj_id,
            parent_id=parent_id,
            role=role,
            depth=depth,
            token_ids=ids,
            loss_mask=mask,
            logprobs=lps,
            prompt_length=prompt,
            turns=turns,
            policy=shape.policy_of(role),
        )
        for child_role, child_id in pending:
            build(child_role, depth + 1, child_id, traj_id)

    build(shape.root, 0, "0", None)
    total = draw(reward if reward is not None else rewards())
    return RolloutTree(
        tree_id=tree_id,
        group_id=group_id,
        question=f"question {group_id}",
        answers=["gold"],
        trajectories=trajectories,
        reward=RewardBreakdown(total=total, accuracy=total, format=0.0),
    )


@st.composite
def credit_batches(
    draw: st.DrawFn,
    source: Graph | Program | GraphShape,
    *,
    num_groups: tuple[int, int] = (1, 3),
    group_size: tuple[int, int] = (1, 4),
    reward: st.SearchStrategy[float] | None = None,
    **tree_kwargs: Any,
) -> list[RolloutTree]:
    """The trees of one RL step: several groups (questions), each with several root rollouts."""
    trees: list[RolloutTree] = []
    for g in range(draw(st.integers(*num_groups))):
        for i in range(draw(st.integers(*group_size))):
            trees.append(
                draw(rollout_trees(source, tree_id=f"q{g}-t{i}", group_id=f"q{g}", reward=reward, **tree_kwargs))
            )
    return trees


@st.composite
def credit_plans(draw: st.DrawFn, source: Graph | Program | GraphShape, **fixed: Any) -> CreditPlan:
    """Plans with random normalisation, single-member rule and loss aggregation; `fixed` fields win."""
    choices: dict[str, Any] = {
        "normalization": draw(st.sampled_from(["std", "mean_only"])),
        "single_member": draw(st.sampled_from(["zero", "passthrough"])),
        "loss_agg": draw(st.sampled_from(["tree_token_mean", "token_mean", "seq_mean_token_mean"])),
    }
    choices.update(fixed)
    return make_plan(source, **choices)


@dataclass(frozen=True)
class CreditCase:
    """A batch of trees and the plan to credit them with."""

    trees: list[RolloutTree]
    plan: CreditPlan

    def rewards(self) -> dict[str, float]:
        return {t.tree_id: t.reward.total for t in self.trees if t.reward is not None}


@st.composite
def credit_cases(
    draw: st.DrawFn,
    source: Graph | Program | GraphShape | st.SearchStrategy[Graph],
    *,
    strategy: str = "broadcast",
    trained_roles: Sequence[str] | None = None,
    plan: dict[str, Any] | None = None,
    **batch_kwargs: Any,
) -> CreditCase:
    """A random batch for `source` (a graph, program, shape, or a strategy of graphs) and a plan naming `strategy`."""
    if isinstance(source, st.SearchStrategy):
        source = draw(source)
    shape = shape_of(source)
    fixed: dict[str, Any] = {"strategy": strategy, **(plan or {})}
    if trained_roles is not None:
        fixed["trained_roles"] = list(trained_roles)
    return CreditCase(trees=draw(credit_batches(shape, **batch_kwargs)), plan=draw(credit_plans(shape, **fixed)))
