"""Local scorers, the format score with its zero-call rule, and score_tree."""

from __future__ import annotations

import pytest

from matpo_graph.core.format_score import tree_format_score
from matpo_graph.core.reward import (
    contains_score,
    exact_match_score,
    f1_score,
    normalize_answer,
    numeric_score,
    score_answer,
    score_tree,
    with_reward,
)

from credit_helpers import ONE_ROLE, plan, traj, tree


def test_normalize_answer_drops_case_punctuation_articles_and_spaces() -> None:
    assert normalize_answer("  The  Eiffel-Tower, Paris! ") == "eiffel tower paris"
    assert normalize_answer("An apple a day") == "apple day"


@pytest.mark.parametrize(
    ("scorer", "pred", "golds", "expected"),
    [
        (exact_match_score, "the Eiffel Tower.", ["Eiffel tower"], 1.0),
        (exact_match_score, "Eiffel", ["Eiffel tower"], 0.0),
        (exact_match_score, "", ["x"], 0.0),  # an empty answer never matches
        (exact_match_score, "NYC", ["New York", "nyc"], 1.0),  # any alias
        (f1_score, "eiffel tower paris", ["eiffel tower"], 0.8),
        (f1_score, "london", ["paris"], 0.0),
        (contains_score, "It is the Eiffel Tower in Paris", ["eiffel tower"], 1.0),
        (contains_score, "Eiffelization", ["eiffel"], 0.0),  # whole words only
    ],
)
def test_local_scorers_table(scorer, pred: str, golds: list[str], expected: float) -> None:
    assert scorer(pred, golds) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("pred", "golds", "expected"),
    [
        ("1,234", ["1234"], 1.0),
        ("$3.50", ["3.5"], 1.0),
        ("42 years", ["42"], 1.0),
        ("42.0001", ["42"], 0.0),
        ("1 or 2", ["1"], 0.0),  # two numbers: no single answer
        ("Paris", ["paris"], 1.0),  # non-numeric gold falls back to exact match
    ],
)
def test_numeric_score_table(pred: str, golds: list[str], expected: float) -> None:
    assert numeric_score(pred, golds) == expected


def test_numeric_score_tolerance_is_relative() -> None:
    assert numeric_score("1000001", ["1000000"], tolerance=1e-6) == 1.0
    assert numeric_score("1000002", ["1000000"], tolerance=1e-6) == 0.0


def test_score_answer_missing_answer_scores_zero_and_unknown_scorer_raises() -> None:
    assert score_answer(None, ["x"], "exact_match") == 0.0
    assert score_answer("x", [], "exact_match") == 0.0
    with pytest.raises(ValueError, match="unknown local scorer"):
        score_answer("x", ["x"], "judge")


def test_format_score_follows_paper_formula() -> None:
    t = tree(
        "t",
        "g",
        None,
        [
            traj("0", role="planner", calls=[True, False]),  # 0.5
            traj("0.1", parent="0", role="worker", depth=1, calls=[True]),  # 1.0
            traj("0.2", parent="0", role="worker", depth=1, calls=[False, False, True, True]),  # 0.5
        ],
    )
    fmt = tree_format_score(t, plan())
    assert fmt.root == 0.5 and fmt.descendants == 0.75
    assert fmt.value == pytest.approx(0.5 * 0.5 + 0.5 * 0.75)


def test_format_score_zero_calls_gets_no_call_score_not_one() -> None:
    t = tree("t", "g", None, [traj("0", role="planner", calls=[])])
    assert tree_format_score(t, plan(calling_roles=["planner", "worker"])).value == 0.0
    assert tree_format_score(t, plan(calling_roles=["planner"], no_call_score=0.25)).value == 0.25


def test_format_score_excludes_roles_without_callables() -> None:
    t = tree(
        "t",
        "g",
        None,
        [traj("0", role="planner", calls=[True, False]), traj("0.1", parent="0", role="worker", depth=1, calls=[])],
    )
    fmt = tree_format_score(t, plan(calling_roles=["planner"]))
    assert fmt.descendants is None and fmt.value == 0.5  # no descendant scored: fmt = fmt_root
    fmt_root_excluded = tree_format_score(
        tree("t", "g", None, [traj("0"), traj("0.1", parent="0", role="worker", depth=1, calls=[True, False])]),
        plan(calling_roles=["worker"]),
    )
    assert fmt_root_excluded.root is None and fmt_root_excluded.value == 0.5  # fmt = mean(descendants)
    assert tree_format_score(tree("t", "g", None, [traj("0")]), plan(calling_roles=[])).value == 1.0


def test_score_tree_weights_accuracy_and_format() -> None:
    t = tree("t", "g", None, [traj("0", role="solver", calls=[True, False], final_text="it is \\boxed{Gold}")])
    b = score_tree(t, plan(ONE_ROLE))
    assert b.answer == "Gold" and b.accuracy == 1.0 and b.format == 0.5
    assert b.total == pytest.approx(0.9 * 1.0 + 0.1 * 0.5)
    assert not b.judge_fallback


def test_score_tree_reads_answer_from_turns_when_final_text_has_none() -> None:
    t = tree("t", "g", None, [traj("0", role="solver", text="<answer>gold</answer>")])
    assert score_tree(t, plan(ONE_ROLE, answer_format="tag")).accuracy == 1.0
    assert score_tree(t, plan(ONE_ROLE, answer_format="boxed")).accuracy == 0.0


def test_score_tree_judge_scorer_without_judge_uses_fallback_and_marks_it() -> None:
    t = tree("t", "g", None, [traj("0", role="solver", final_text="\\boxed{the gold medal}")])
    judge = {"endpoint": "http://x", "model": "m", "fallback": "contains"}
    b = score_tree(t, plan(ONE_ROLE, accuracy_scorer="judge", judge=judge))
    assert b.judge_fallback and b.accuracy == 1.0 and b.details["scorer"] == "contains"


def test_score_tree_rejects_accuracy_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match="accuracy must be in"):
        score_tree(tree("t", "g", None), plan(ONE_ROLE), accuracy=1.5)


def test_with_reward_sets_format_scores_without_touching_input() -> None:
    t = tree("t", "g", None, [traj("0", role="solver", calls=[True, False])])
    out = with_reward(t, score_tree(t, plan(ONE_ROLE)))
    assert out.reward is not None and out.root.format_score == 0.5
    assert t.reward is None and t.root.format_score is None
