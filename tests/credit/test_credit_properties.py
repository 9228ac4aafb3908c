"""Credit properties over random graphs, trees, rewards and masks (hypothesis)."""

from __future__ import annotations

import statistics

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matpo_graph.core.credit import assign_credit, token_advantages
from matpo_graph.testing import (
    check_broadcast,
    check_credit_invariants,
    check_degenerate_groups_zero,
    check_group_normalized,
    check_matpo_invariants,
    check_permutation_invariant,
    credit_cases,
    graphs,
    rewards,
)

from credit_helpers import PLANNER_WORKER

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
BUILTINS = st.sampled_from(["broadcast", "root_only", "role_normalized"])


@PROPS
@given(credit_cases(graphs()))
def test_property_descendant_tokens_carry_root_scalar(case) -> None:
    out, _ = assign_credit(case.trees, case.plan, warn=False)
    check_broadcast(out, case.plan, case.rewards())
    for tree in out:
        root_scalar = tree.root.advantage
        for t in tree.descendants:
            trained = [a for a, m in zip(token_advantages(t), t.loss_mask, strict=True) if m]
            assert all(a == root_scalar for a in trained)


@PROPS
@given(credit_cases(graphs(), plan={"normalization": "std"}, group_size=(2, 6)))
def test_property_root_advantages_are_group_normalized(case) -> None:
    out, _ = assign_credit(case.trees, case.plan, warn=False)
    check_group_normalized(out, case.plan, case.rewards())
    groups: dict[str, list[float]] = {}
    for tree in out:
        groups.setdefault(tree.group_id, []).append(tree.root.advantage)
    for gid, adv in groups.items():
        rs = [t.reward.total for t in case.trees if t.group_id == gid]
        assert abs(statistics.fmean(adv)) < 1e-9
        if len(set(rs)) > 1:
            assert abs(statistics.stdev(adv) - 1.0) <= case.plan.epsilon / statistics.stdev(rs) + 1e-7


@PROPS
@given(credit_cases(graphs(), plan={"single_member": "zero"}, reward=rewards(dyadic_only=True)))
def test_property_degenerate_groups_give_zero(case) -> None:
    out, metrics = assign_credit(case.trees, case.plan, warn=False)
    check_degenerate_groups_zero(out, case.plan, case.rewards())
    groups: dict[str, list[float]] = {}
    for t in case.trees:
        groups.setdefault(t.group_id, []).append(t.reward.total)
    degenerate = [g for g, rs in groups.items() if len(rs) == 1 or len(set(rs)) == 1]
    assert metrics["matpo/credit/degenerate_zero_var"] + metrics["matpo/credit/degenerate_single"] == len(degenerate)
    for tree in out:
        if tree.group_id in degenerate:
            assert all(a == 0.0 for t in tree.trajectories for a in token_advantages(t))


@PROPS
@given(credit_cases(graphs()), st.integers(0, 2**32 - 1))
def test_property_permutation_does_not_change_advantages(case, seed: int) -> None:
    check_permutation_invariant(case.trees, case.plan, seed=seed)


@PROPS
@given(BUILTINS.flatmap(lambda s: credit_cases(graphs(), strategy=s)))
def test_property_builtin_strategies_satisfy_generic_invariants(case) -> None:
    check_credit_invariants(case.trees, case.plan)


@PROPS
@given(credit_cases(PLANNER_WORKER, group_size=(2, 5), trained_roles=["planner", "worker"]))
def test_property_planner_worker_matpo_invariants(case) -> None:
    check_matpo_invariants(case.trees, case.plan)


@PROPS
@given(credit_cases(graphs(), strategy="role_normalized", plan={"normalization": "std", "single_member": "zero"}))
def test_property_role_normalized_is_zero_mean_per_role_and_group(case) -> None:
    out, _ = assign_credit(case.trees, case.plan, warn=False)
    units: dict[tuple[str, str], list[float]] = {}
    for tree in out:
        for t in tree.trajectories:
            units.setdefault((tree.group_id, t.role), []).append(t.advantage)
    for adv in units.values():
        assert abs(statistics.fmean(adv)) < 1e-9
