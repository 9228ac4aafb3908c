"""Property-testing kit for credit assignment: tree generators shaped by a graph, and invariant checks.

Test a custom credit strategy in a few lines::

    from hypothesis import given
    from matpo_graph.testing import check_credit_invariants, credit_cases, graphs

    @given(credit_cases(graphs(), strategy="my_package.credit:my_strategy"))
    def test_my_strategy(case):
        check_credit_invariants(case.trees, case.plan)

The hypothesis strategies need the ``hypothesis`` package; shapes and checks do not. Names are
loaded on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DYADIC_REWARDS",
    "CreditCase",
    "EdgeShape",
    "GraphShape",
    "InvariantViolation",
    "check_broadcast",
    "check_credit_invariants",
    "check_degenerate_groups_zero",
    "check_group_normalized",
    "check_masked_tokens_zero",
    "check_matpo_invariants",
    "check_permutation_invariant",
    "check_policy_binding",
    "check_untrained_roles_excluded",
    "credit_batches",
    "credit_cases",
    "credit_plans",
    "expected_root_advantages",
    "graphs",
    "make_plan",
    "rewards",
    "rollout_trees",
    "shape_of",
]

_HOME = {
    "shapes": ("EdgeShape", "GraphShape", "make_plan", "shape_of"),
    "checks": (
        "InvariantViolation", "check_broadcast", "check_credit_invariants", "check_degenerate_groups_zero",
        "check_group_normalized", "check_masked_tokens_zero", "check_matpo_invariants",
        "check_permutation_invariant", "check_policy_binding", "check_untrained_roles_excluded",
        "expected_root_advantages",
    ),
    "strategies": (
        "DYADIC_REWARDS", "CreditCase", "credit_batches", "credit_cases", "credit_plans", "graphs", "rewards",
        "rollout_trees",
    ),
}  # fmt: skip
_WHERE = {name: module for module, names in _HOME.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'matpo_graph.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"matpo_graph.testing.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
