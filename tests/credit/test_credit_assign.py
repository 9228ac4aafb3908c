"""Credit assignment: built-in strategies on hand-computed cases, errors, custom strategies."""

from __future__ import annotations

import math
import textwrap
import warnings

import pytest

from matpo_graph.core.trust import TrustPolicy
from matpo_graph.core.credit import (
    CreditError,
    CreditWarning,
    StrategyResult,
    assign_credit,
    group_advantages,
    resolve_strategy,
    token_advantages,
)

from credit_helpers import plan, planner_tree, traj, tree

SQRT_HALF = math.sqrt(0.5)


def by_key(trees):
    return {(t.tree_id, x.traj_id): x.advantage for t in trees for x in t.trajectories}


def test_broadcast_copies_root_scalar_to_workers_on_their_own_mask() -> None:
    trees = [planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)]
    out, metrics = assign_credit(trees, plan())
    expected = 0.5 / (SQRT_HALF + 1e-6)  # (1 - 0.5) / (unbiased std + eps)
    for t in out[0].trajectories:
        assert t.advantage == pytest.approx(expected, rel=1e-12)
    worker = out[0].trajectories[1]
    # the worker trains on positions 4 and 5, where the planner has no generated token
    assert token_advantages(worker) == [0.0, 0.0, 0.0, 0.0, worker.advantage, worker.advantage]
    assert all(t.advantage == pytest.approx(-expected) for t in out[1].trajectories)
    assert metrics["matpo/credit/groups"] == 1.0 and metrics["matpo/credit/trained_trajectories"] == 6.0


def test_group_advantages_match_grpo_formula_and_mean_only() -> None:
    scores = [0.0, 0.5, 1.0, 1.0]
    mean = 0.625
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 3)
    got = group_advantages(scores)
    assert got.status == "ok"
    assert got.values == pytest.approx([(s - mean) / (std + 1e-6) for s in scores], rel=1e-12)
    assert group_advantages(scores, normalization="mean_only").values == pytest.approx([s - mean for s in scores])


def test_group_advantages_degenerate_cases() -> None:
    assert group_advantages([0.3, 0.3, 0.3]).values == [0.0, 0.0, 0.0]
    assert group_advantages([0.3, 0.3]).status == "zero_var"
    assert group_advantages([0.7]).values == [0.0]
    assert group_advantages([0.7], single_member="passthrough").values == [0.7 / (1 + 1e-6)]
    assert group_advantages([0.7], single_member="passthrough", normalization="mean_only").values == [0.7]
    with pytest.raises(CreditError, match="at least one"):
        group_advantages([])
    with pytest.raises(CreditError, match="finite"):
        group_advantages([0.1, math.nan])


def test_degenerate_groups_get_zero_and_are_counted_with_one_warning() -> None:
    trees = [planner_tree("a", "q1", 0.5), planner_tree("b", "q1", 0.5), planner_tree("c", "q2", 1.0)]
    with pytest.warns(CreditWarning, match="degenerate"):
        out, metrics = assign_credit(trees, plan())
    assert all(a == 0.0 for a in by_key(out).values())
    assert metrics["matpo/credit/degenerate_zero_var"] == 1.0
    assert metrics["matpo/credit/degenerate_single"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assign_credit(trees, plan(), warn=False)


def test_single_member_passthrough_keeps_verl_behaviour() -> None:
    out, _ = assign_credit([planner_tree("a", "q", 0.8)], plan(single_member="passthrough"), warn=False)
    assert all(a == 0.8 / (1 + 1e-6) for a in by_key(out).values())


def test_root_only_excludes_descendants() -> None:
    out, metrics = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan(strategy="root_only"))
    for t in out:
        assert t.root.advantage is not None
        assert all(d.advantage is None for d in t.descendants)
        assert all(a == 0.0 for d in t.descendants for a in token_advantages(d))
    assert metrics["matpo/credit/trained_trajectories"] == 2.0


def test_role_normalized_uses_per_role_statistics() -> None:
    # group q: tree a (reward 1, 1 worker), tree b (reward 0, 2 workers)
    trees = [planner_tree("a", "q", 1.0, workers=1), planner_tree("b", "q", 0.0, workers=2)]
    out, metrics = assign_credit(trees, plan(strategy="role_normalized"))
    adv = by_key(out)
    planner_expected = 0.5 / (SQRT_HALF + 1e-6)
    assert adv[("a", "0")] == pytest.approx(planner_expected) and adv[("b", "0")] == pytest.approx(-planner_expected)
    worker_scores = [1.0, 0.0, 0.0]  # each worker carries its tree's root reward
    mean = 1 / 3
    std = math.sqrt(sum((s - mean) ** 2 for s in worker_scores) / 2)
    assert adv[("a", "0.1")] == pytest.approx((1 - mean) / (std + 1e-6))
    assert adv[("b", "0.1")] == adv[("b", "0.2")] == pytest.approx((0 - mean) / (std + 1e-6))
    assert metrics["matpo/credit/role_groups"] == 2.0 and metrics["matpo/credit/groups"] == 1.0


def test_untrained_roles_get_no_advantage() -> None:
    out, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan(trained_roles=["planner"]))
    for t in out:
        assert t.root.advantage is not None and all(d.advantage is None for d in t.descendants)


def test_inputs_are_not_modified_and_order_is_kept() -> None:
    trees = [planner_tree("b", "q", 1.0), planner_tree("a", "q", 0.0)]
    before = [t.model_dump_json() for t in trees]
    out, _ = assign_credit(trees, plan())
    assert [t.model_dump_json() for t in trees] == before
    assert [t.tree_id for t in out] == ["b", "a"] and out[0] is not trees[0]


def test_rewards_argument_overrides_tree_rewards() -> None:
    trees = [planner_tree("a", "q", None), planner_tree("b", "q", None)]
    out, _ = assign_credit(trees, plan(), rewards={"a": 0.0, "b": 1.0})
    assert out[0].root.advantage < 0 < out[1].root.advantage


@pytest.mark.parametrize(
    ("trees", "rewards", "match"),
    [
        ([planner_tree("a", "q", None)], None, "have no reward.*score_tree"),
        ([planner_tree("a", "q", 1.0), planner_tree("a", "q", 0.0)], None, "appears twice"),
        ([planner_tree("a", "q", None)], {"a": math.inf}, "finite"),
    ],
)
def test_bad_batches_raise_credit_error(trees, rewards, match: str) -> None:
    with pytest.raises(CreditError, match=match):
        assign_credit(trees, plan(), rewards=rewards)


def test_tree_without_trajectories_still_counts_in_its_group() -> None:
    empty = tree("e", "q", 0.0, [])
    out, _ = assign_credit([planner_tree("a", "q", 1.0), empty], plan())
    assert out[0].root.advantage == pytest.approx(0.5 / (SQRT_HALF + 1e-6))


# ----------------------------------------------------------------------------- custom strategies


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_credit_mod.py").write_text(
        textwrap.dedent(
            """
            from matpo_graph.core.credit import StrategyResult, broadcast

            NOT_A_FUNCTION = 3

            def halve_workers(batch):
                base = broadcast(batch)
                adv = {}
                for tree in batch.trees:
                    for t in tree.trajectories:
                        a = base.advantages[(tree.tree_id, t.traj_id)]
                        adv[(tree.tree_id, t.traj_id)] = a if t.depth == 0 else a / 2
                return StrategyResult(adv, {"halved": 1.0})

            def forgets_workers(batch):
                return {(t.tree_id, t.root.traj_id): 1.0 for t in batch.trees}

            def gives_nan(batch):
                return {k: float("nan") for k in batch.keys()}

            def gives_list(batch):
                return [1.0]
            """
        )
    )
    (tmp_path / "broken_credit_mod.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_credit_mod"


def trusting(module: str) -> TrustPolicy:
    """The user trusts their own strategy module (a graph naming it cannot)."""
    return TrustPolicy(trusted_code=(module,))


def test_custom_strategy_by_import_path(user_module) -> None:
    trees = [planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)]
    out, metrics = assign_credit(trees, plan(strategy=f"{user_module}:halve_workers"), trust=trusting(user_module))
    root, worker = out[0].trajectories[0], out[0].trajectories[1]
    assert worker.advantage == pytest.approx(root.advantage / 2)
    assert metrics["matpo/credit/halved"] == 1.0


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("sideways", "unknown credit strategy 'sideways'.*broadcast, root_only, role_normalized.*module:function"),
        ("no_such_pkg_xyz:fn", "cannot import module 'no_such_pkg_xyz'.*PYTHONPATH"),
        ("broken_credit_mod:fn", "raised RuntimeError: boom at import"),
        ("my_credit_mod:missing", "has no attribute 'missing'.*public callables are: .*halve_workers"),
        ("my_credit_mod:NOT_A_FUNCTION", "is a int, not a function"),
    ],
)
def test_resolve_strategy_errors_say_how_to_fix(user_module, name: str, match: str) -> None:
    with pytest.raises(CreditError, match=match):
        resolve_strategy(name, trust=TrustPolicy(trust_all_code=True))


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        ("forgets_workers", "one advantage \\(or None\\) per trajectory; missing"),
        ("gives_nan", "finite float"),
        ("gives_list", "returned list"),
    ],
)
def test_custom_strategy_results_are_checked(user_module, fn: str, match: str) -> None:
    with pytest.raises(CreditError, match=match):
        assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan(strategy=f"{user_module}:{fn}"),
                      trust=trusting(user_module))


def test_callable_strategy_override() -> None:
    def constant(batch):
        return StrategyResult({k: 0.25 for k in batch.keys()})

    out, _ = assign_credit([planner_tree("a", "q", 1.0)], plan(), strategy=constant)
    assert set(by_key(out).values()) == {0.25}


def test_token_advantages_are_scalar_times_own_mask() -> None:
    t = traj(mask=[0, 1, 0, 1]).model_copy(update={"advantage": -1.5})
    assert token_advantages(t) == [0.0, -1.5, 0.0, -1.5]
    assert token_advantages(traj(mask=[0, 1])) == [0.0, 0.0]  # no advantage: nothing trained
