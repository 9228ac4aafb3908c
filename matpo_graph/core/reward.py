"""Reward of a rollout tree: accuracy of the root's final answer plus the format score.

``total = plan.accuracy_weight * acc + plan.format_weight * fmt`` (paper: 0.9 and 0.1). Accuracy
compares the extracted answer with every gold alias and keeps the best match. Pure: the LLM judge
lives in :mod:`matpo_graph.judge` and hands its verdict in through ``score_tree(accuracy=...)``.

A custom scorer is named ``'package.module:function'`` and has veRL's signature,
``compute_score(data_source, solution_str, ground_truth, extra_info)``, returning a number in
[0, 1] or a dict whose ``score`` is one; the same function then serves the local trainer and veRL's
reward module. It runs only when the user's trust policy allows it (:mod:`matpo_graph.core.trust`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from matpo_graph.core.answer import extract_answer
from matpo_graph.core.format_score import tree_format_score
from matpo_graph.core.program import CreditPlan
from matpo_graph.core.registry import LOCAL_SCORER_NAMES, SCORERS
from matpo_graph.core.rollout import RewardBreakdown, RolloutTree
from matpo_graph.core.trust import TrustPolicy, import_trusted, is_code_ref

__all__ = [
    "LOCAL_SCORERS",
    "ComputeScore",
    "call_custom_scorer",
    "resolve_scorer",
    "Scorer",
    "contains_score",
    "exact_match_score",
    "f1_score",
    "fallback_scorer",
    "final_answer",
    "normalize_answer",
    "numeric_score",
    "parse_number",
    "score_answer",
    "score_tree",
    "with_reward",
]

Scorer = Callable[[str, Sequence[str]], float]
"""(prediction, gold aliases) -> score in [0, 1]; the best alias wins."""

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}\b)")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(" " if unicodedata.category(ch).startswith("P") or ch in "$^`~+=<>|" else ch for ch in text)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised alias."""
    pred = normalize_answer(prediction)
    return 1.0 if pred and any(pred == normalize_answer(g) for g in golds) else 0.0


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Best token-level F1 between the normalised prediction and an alias."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        gold_tokens = normalize_answer(gold).split()
        common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
        if common == 0:
            continue
        precision = common / len(pred_tokens)
        recall = common / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains_score(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a normalised alias appears in the normalised prediction as whole words."""
    pred = f" {normalize_answer(prediction)} "
    return 1.0 if any((g := normalize_answer(gold)) and f" {g} " in pred for gold in golds) else 0.0


def parse_number(text: str) -> float | None:
    """The single number in `text` (thousands commas, $ and % allowed), or None when there is not exactly one."""
    found = _NUMBER_RE.findall(_THOUSANDS_RE.sub("", text))
    if len(found) != 1:
        return None
    try:
        value = float(found[0])
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numeric_score(prediction: str, golds: Sequence[str], *, tolerance: float = 1e-6) -> float:
    """1.0 when the prediction's number is within ``tolerance * max(|gold|, 1)`` of a numeric alias.

    Aliases that are not numbers fall back to exact match, so mixed alias lists still work.
    """
    pred = parse_number(prediction)
    for gold in golds:
        gold_value = parse_number(gold)
        if gold_value is None:
            if exact_match_score(prediction, [gold]):
                return 1.0
        elif pred is not None and abs(pred - gold_value) <= tolerance * max(abs(gold_value), 1.0):
            return 1.0
    return 0.0


LOCAL_SCORERS: dict[str, Scorer] = SCORERS.implemented_by({
    "exact_match": exact_match_score,
    "f1": f1_score,
    "contains": contains_score,
    "numeric": numeric_score,
}, subset=LOCAL_SCORER_NAMES)


ComputeScore = Callable[..., Any]
"""veRL's ``compute_score(data_source, solution_str, ground_truth, extra_info) -> float | {"score": float, ...}``."""


def resolve_scorer(name: str, *, trust: TrustPolicy | None = None) -> ComputeScore:
    """Import a custom scorer 'package.module:function' when the trust policy allows it.

    Raises:
        ValueError: the name is not a code reference, the code is not trusted
            (:class:`~matpo_graph.core.trust.UntrustedCodeError`), or it cannot be imported.
    """
    if not is_code_ref(name):
        raise ValueError(f"unknown scorer {name!r}: expected one of {', '.join(LOCAL_SCORERS)}, judge, or 'module:function'")
    try:
        return import_trusted(name, trust=trust, what="reward scorer")
    except (ImportError, AttributeError, TypeError) as exc:
        raise ValueError(f"reward scorer {name!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc


def call_custom_scorer(
    fn: ComputeScore, name: str, *, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any]
) -> float:
    """Call a veRL-style scorer and return its score as an accuracy in [0, 1].

    Raises:
        ValueError: the scorer returned something that is not a finite number in [0, 1] (or a dict with one).
    """
    value = fn(data_source, solution_str, ground_truth, extra_info)
    if isinstance(value, dict):
        value = value.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"reward scorer {name!r} must return a number in [0, 1] (or a dict with 'score'), got {value!r}")
    return float(value)


def score_answer(answer: str | None, golds: Sequence[str], scorer: str, *, numeric_tolerance: float = 1e-6) -> float:
    """Accuracy of one answer with a local scorer; a missing answer or no golds scores 0.

    Raises:
        ValueError: for a scorer name that is not local (``judge`` runs in :mod:`matpo_graph.judge`).
    """
    if scorer not in LOCAL_SCORERS:
        raise ValueError(f"unknown local scorer {scorer!r}: expected one of {', '.join(LOCAL_SCORERS)}")
    if answer is None or not golds:
        return 0.0
    if scorer == "numeric":
        return numeric_score(answer, golds, tolerance=numeric_tolerance)
    return LOCAL_SCORERS[scorer](answer, golds)


def final_answer(tree: RolloutTree, answer_format: str) -> str | None:
    """The root's answer: from its final text, else from its turns, latest first."""
    if not tree.trajectories:
        return None
    root = tree.root
    candidates = [root.final_text] + [t.text for t in reversed(root.turns)]
    return extract_answer(candidates, answer_format)  # type: ignore[arg-type]


def fallback_scorer(plan: CreditPlan) -> str:
    """The local scorer that stands in for the judge (the judge config's `fallback`, default contains)."""
    name = (plan.judge or {}).get("fallback", "contains")
    return name if name in LOCAL_SCORERS else "contains"


def score_tree(
    tree: RolloutTree,
    plan: CreditPlan,
    *,
    accuracy: float | None = None,
    judge_fallback: bool = False,
    details: dict[str, Any] | None = None,
    trust: TrustPolicy | None = None,
) -> RewardBreakdown:
    """Score one tree: ``accuracy_weight * acc + format_weight * fmt``.

    Args:
        tree: the rollout tree; it is not modified.
        plan: the credit plan (answer format, scorer, weights, format rules).
        accuracy: an accuracy already decided elsewhere (the LLM judge); computed locally when None.
            With ``plan.accuracy_scorer == "judge"`` and no accuracy given, the judge's local fallback
            scorer is used and the breakdown is marked ``judge_fallback``.
        judge_fallback: mark the breakdown as scored by the fallback (set by the judge path).
        details: extra entries for ``RewardBreakdown.details``.
        trust: the policy a custom scorer ('module:function') is checked against; by default the
            active one (see :func:`matpo_graph.core.trust.active_trust`).

    Returns:
        The reward breakdown, with the per-trajectory format scores in ``details``.
    """
    answer = final_answer(tree, plan.answer_format)
    scorer = plan.accuracy_scorer
    if accuracy is None and is_code_ref(scorer):
        root = tree.root if tree.trajectories else None
        solution = (root.final_text or (root.turns[-1].text if root.turns else "")) if root is not None else ""
        accuracy = call_custom_scorer(
            resolve_scorer(scorer, trust=trust),
            scorer,
            data_source=str(tree.metadata.get("data_source") or f"matpo_graph/{tree.graph}"),
            solution_str=solution or "",
            ground_truth=list(tree.answers),
            extra_info={"question": tree.question, "answers": list(tree.answers), "answer": answer, **dict(tree.metadata)},
        )
    if accuracy is None:
        if scorer == "judge":
            scorer, judge_fallback = fallback_scorer(plan), True
        accuracy = score_answer(answer, tree.answers, scorer, numeric_tolerance=plan.numeric_tolerance)
    if not (math.isfinite(accuracy) and 0.0 <= accuracy <= 1.0):
        raise ValueError(f"tree {tree.tree_id!r}: accuracy must be in [0, 1], got {accuracy!r}")
    fmt = tree_format_score(tree, plan)
    total = plan.accuracy_weight * accuracy + plan.format_weight * fmt.value
    info: dict[str, Any] = {
        "scorer": scorer,
        "format_root": fmt.root,
        "format_descendants": fmt.descendants,
        "format_by_trajectory": fmt.per_trajectory,
    }
    info.update(details or {})
    return RewardBreakdown(
        total=total, accuracy=accuracy, format=fmt.value, answer=answer, judge_fallback=judge_fallback, details=info
    )


def with_reward(tree: RolloutTree, breakdown: RewardBreakdown) -> RolloutTree:
    """A new tree carrying `breakdown` and each trajectory's format score; the input is not modified."""
    per = breakdown.details.get("format_by_trajectory", {})
    trajectories = [t.model_copy(update={"format_score": per.get(t.traj_id)}) for t in tree.trajectories]
    return tree.model_copy(update={"reward": breakdown, "trajectories": trajectories})
