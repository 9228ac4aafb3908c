"""The property-testing kit: generated trees obey the graph, and the checks catch broken strategies."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from matpo_graph.core.credit import broadcast
from matpo_graph.core.loader import load_graph
from matpo_graph.testing import (
    InvariantViolation,
    check_broadcast,
    check_credit_invariants,
    check_matpo_invariants,
    credit_cases,
    graphs,
    make_plan,
    rollout_trees,
    shape_of,
)

from credit_helpers import PLANNER_WORKER, plan, planner_tree

KIT_PROPS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "property_test_credit"


@KIT_PROPS
@given(graphs().flatmap(lambda g: rollout_trees(g).map(lambda t: (g, t))))
def test_generated_trees_follow_the_graph(pair) -> None:
    graph, tree = pair
    shape = shape_of(graph)
    by_id = {t.traj_id: t for t in tree.trajectories}
    assert tree.root.role == graph.root
    for t in tree.trajectories:
        assert t.depth <= graph.limits.max_depth
        allowed = set(graph.roles[t.role].tools) | {e.as_ for e in graph.edges_from(t.role)}
        for turn in t.turns:
            started: dict[str, int] = {}
            for call in turn.calls:
                assert call.name in allowed or not call.valid
                if call.child_id is not None:
                    child = by_id[call.child_id]
                    edge = next(e for e in graph.edges_from(t.role) if e.as_ == call.name)
                    assert child.parent_id == t.traj_id and child.role == edge.to and child.depth == t.depth + 1
                    started[call.name] = started.get(call.name, 0) + 1
                    assert started[call.name] <= edge.max_parallel
        assert all(lp < 0 for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m)
        assert all(lp == 0 for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if not m)
    children = {t.traj_id for t in tree.descendants}
    assert children == {c.child_id for t in tree.trajectories for c in t.calls if c.child_id}
    assert shape.root == graph.root


def test_shape_of_program_matches_shape_of_graph() -> None:
    from matpo_graph.compilers.local import compile_graph

    graph = load_graph(EXAMPLE / "graph.yaml")
    program, compiled_plan = compile_graph(graph, EXAMPLE)
    a, b = shape_of(graph), shape_of(program)
    assert (a.root, set(a.roles), a.max_depth) == (b.root, set(b.roles), b.max_depth)
    assert {r: set(e) for r, e in a.edges.items()} == {r: set(e) for r, e in b.edges.items()}
    assert sorted(make_plan(graph).calling_roles or []) == sorted(compiled_plan.calling_roles or [])


def test_make_plan_rejects_unknown_fields() -> None:
    with pytest.raises(TypeError, match="unknown CreditPlan fields"):
        make_plan(PLANNER_WORKER, stratgy="broadcast")
    with pytest.raises(TypeError):
        shape_of("graph.yaml")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the checks can fail


def trees_pair():
    return [planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)]


def workers_off_by_one(batch):
    base = broadcast(batch)
    return {k: (v + (1.0 if k[1] != "0" else 0.0)) for k, v in base.advantages.items()}


def order_dependent(batch):
    first = batch.trees[0].tree_id
    return {k: (1.0 if k[0] == first else 0.0) for k in batch.keys()}


def mutating(batch):
    batch.trees[0].trajectories[0].token_ids.append(99)
    return broadcast(batch)


def test_check_broadcast_catches_a_worker_without_the_root_scalar() -> None:
    from matpo_graph.core.credit import assign_credit

    out, _ = assign_credit(trees_pair(), plan(), strategy=workers_off_by_one)
    with pytest.raises(InvariantViolation, match="root scalar"):
        check_broadcast(out, plan())


def test_check_credit_invariants_catches_order_dependence() -> None:
    with pytest.raises(InvariantViolation, match="permuted batch"):
        check_credit_invariants(trees_pair(), plan(), strategy=order_dependent, seed=1)


def test_check_credit_invariants_catches_input_mutation() -> None:
    with pytest.raises(InvariantViolation, match="modified its input"):
        check_credit_invariants(trees_pair(), plan(), strategy=mutating)


def test_check_matpo_invariants_pass_on_the_real_thing() -> None:
    check_matpo_invariants(trees_pair(), plan())


@KIT_PROPS
@given(credit_cases(graphs(), group_size=(2, 4)))
def test_check_matpo_invariants_reject_a_biased_std(case) -> None:
    """A strategy using the biased std must be caught whenever some group has two different rewards."""

    def biased(batch):
        import math

        adv = {}
        for members in batch.groups().values():
            rs = [batch.rewards[t.tree_id] for t in members]
            mean = sum(rs) / len(rs)
            std = math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs))
            for t, r in zip(members, rs, strict=True):
                a = 0.0 if std == 0 else (r - mean) / (std + batch.plan.epsilon)
                adv.update({(t.tree_id, x.traj_id): a for x in t.trajectories})
        return adv

    from matpo_graph.core.credit import assign_credit

    p = case.plan.model_copy(update={"normalization": "std"})
    out, _ = assign_credit(case.trees, p, strategy=biased, warn=False)
    groups: dict[str, set[float]] = {}
    for t in case.trees:
        groups.setdefault(t.group_id, set()).add(t.reward.total)
    # Rewards that differ by less than epsilon give (near-)zero advantages under either std: undetectable.
    if any(max(v) - min(v) > 1e-3 for v in groups.values()):
        with pytest.raises(InvariantViolation):
            check_broadcast(out, p)


def test_worked_example_runs() -> None:
    sys.path.insert(0, str(EXAMPLE))
    try:
        module = importlib.import_module("test_my_credit")
        for name in dir(module):
            if name.startswith("test_"):
                getattr(module, name)()
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in ("test_my_credit", "my_credit"):
            sys.modules.pop(name, None)
