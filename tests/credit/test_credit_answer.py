"""Answer extraction: boxed with nested braces (last wins), answer tags, think blocks."""

from __future__ import annotations

import pytest

from matpo_graph.core.answer import extract_answer, extract_boxed, extract_tagged


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{Paris}", "Paris"),  # plain
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces kept whole
        ("\\boxed{a} then \\boxed{b}", "b"),  # the last one wins
        ("\\boxed{a} and a broken \\boxed{b", "a"),  # an unclosed last box falls back to the previous complete one
        ("\\boxed{ {x} {y} }", "{x} {y}"),  # content is stripped, inner groups kept
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are content
        ("no answer here", None),
        ("<think>maybe \\boxed{wrong}</think> final \\boxed{right}", "right"),  # drafts in thinking do not count
        ("<think>only \\boxed{draft}</think>", None),
    ],
)
def test_extract_boxed_cases(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Paris</answer>", "Paris"),
        ("<answer>a</answer> <ANSWER> b\n</ANSWER>", "b"),  # last wins, case-insensitive, multi-line
        ("<answer>unclosed", None),
        ("\\boxed{x}", None),  # the other format does not count
    ],
)
def test_extract_tagged_cases(text: str, expected: str | None) -> None:
    assert extract_tagged(text) == expected


def test_extract_answer_uses_declared_format_and_first_candidate_with_one() -> None:
    assert extract_answer(["no marker", "<answer>x</answer> \\boxed{y}"], "boxed") == "y"
    assert extract_answer(["no marker", "<answer>x</answer> \\boxed{y}"], "tag") == "x"
    assert extract_answer(["\\boxed{first}", "\\boxed{second}"], "boxed") == "first"


def test_extract_answer_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown answer format"):
        extract_answer("x", "json")  # type: ignore[arg-type]
