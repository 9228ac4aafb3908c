"""Property tests of the custom strategy in my_credit.py. Run: pytest examples/property_test_credit"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings

from matpo_graph.core.credit import assign_credit
from matpo_graph.core.loader import load_graph
from matpo_graph.core.spec import Graph
from matpo_graph.testing import (
    check_credit_invariants,
    check_matpo_invariants,
    check_policy_binding,
    credit_cases,
    expected_root_advantages,
    graphs,
)

GRAPH = load_graph(Path(__file__).with_name("graph.yaml"))
STRATEGY = "my_credit:depth_discounted"


def _with_policies(graph: Graph) -> Graph:
    """The same graph with the planner on an adapter of its own and both helpers on one shared adapter."""
    data = graph.to_yaml_dict()
    data["policies"] = {"planner_lora": {"kind": "lora", "rank": 8}, "helpers": {"kind": "lora", "rank": 4}}
    data["roles"]["planner"]["policy"] = "planner_lora"
    data["roles"]["researcher"]["policy"] = data["roles"]["checker"]["policy"] = "helpers"
    return Graph.model_validate(data)


POLICY_GRAPH = _with_policies(GRAPH)


@settings(max_examples=50, deadline=None)
@given(credit_cases(GRAPH, strategy=STRATEGY))
def test_depth_discounted_keeps_the_generic_invariants(case):
    # inputs untouched, finite values, masked tokens at zero, order and permutation invariance
    check_credit_invariants(case.trees, case.plan)


@settings(max_examples=50, deadline=None)
@given(credit_cases(GRAPH, strategy=STRATEGY))
def test_depth_discounted_halves_the_root_scalar_per_level(case):
    credited, _ = assign_credit(case.trees, case.plan, strategy=STRATEGY, warn=False)  # your own code, named here
    roots = expected_root_advantages(case.trees, case.plan)
    for tree in credited:
        for t in tree.trajectories:
            assert t.advantage == pytest.approx(roots[tree.tree_id] * 0.5**t.depth, rel=1e-9, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(credit_cases(GRAPH))
def test_the_default_strategy_is_matpo(case):
    check_matpo_invariants(case.trees, case.plan)


@settings(max_examples=25, deadline=None)
@given(credit_cases(POLICY_GRAPH, strategy=STRATEGY))
def test_per_role_policies_change_who_trains_not_the_advantage(case):
    # every trajectory records its role's policy, the advantages equal those of one shared policy,
    # and each trained trajectory is trained by exactly one policy: its own
    _, rows = check_policy_binding(case.trees, case.plan)
    assert set(rows) <= {"planner_lora", "helpers"}


@settings(max_examples=25, deadline=None)
@given(credit_cases(graphs(policies=True)))
def test_random_graphs_with_policies_keep_matpo(case):
    check_matpo_invariants(case.trees, case.plan)
    check_policy_binding(case.trees, case.plan)
