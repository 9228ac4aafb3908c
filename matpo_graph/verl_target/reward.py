"""veRL's custom reward function for a compiled graph.

The MATPO agent loop scores each rollout tree itself (:func:`matpo_graph.core.reward.score_tree`:
accuracy of the root's answer plus the format score of every trajectory) and hands veRL the total,
so veRL never calls this function for those rows. It is the fallback for rows the loop did not score
(e.g. a manual evaluation with another agent loop): the loop's own breakdown, when veRL passes it
through ``extra_info``, is returned as is; otherwise the root's decoded response is scored for
accuracy with the plan's local scorer, and the format part is 0 (it needs the whole tree).

A custom scorer ('package.module:function', veRL's ``compute_score`` signature) is called with the
row's own ``data_source``, ``solution_str``, ``ground_truth`` and ``extra_info``, here exactly as the
local trainer calls it, and only when the user's trust policy allows that code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matpo_graph.core.answer import extract_answer
from matpo_graph.core.program import CreditPlan
from matpo_graph.core.reward import call_custom_scorer, fallback_scorer, resolve_scorer, score_answer
from matpo_graph.core.trust import TrustPolicy, is_code_ref

__all__ = ["LOOP_REWARD_KEY", "make_compute_score", "score_response"]

LOOP_REWARD_KEY = "matpo_reward"
"""Key of the root output's extra fields holding the loop's reward breakdown."""

ComputeScore = Callable[..., dict[str, Any]]


def _golds(ground_truth: Any) -> list[str]:
    if ground_truth is None:
        return []
    if isinstance(ground_truth, str):
        text = ground_truth.strip()
        if text.startswith("["):
            try:
                return [str(g) for g in json.loads(text)]
            except json.JSONDecodeError:
                pass
        return [ground_truth]
    if isinstance(ground_truth, Sequence) or hasattr(ground_truth, "tolist"):
        items = ground_truth.tolist() if hasattr(ground_truth, "tolist") else list(ground_truth)
        return [str(g) for g in items]
    return [str(ground_truth)]


def score_response(
    plan: CreditPlan,
    response: str,
    ground_truth: Any,
    *,
    data_source: str | None = None,
    extra_info: dict[str, Any] | None = None,
    trust: TrustPolicy | None = None,
) -> dict[str, Any]:
    """Accuracy-only reward of one decoded root response (the keys match the loop's breakdown)."""
    scorer = plan.accuracy_scorer if plan.accuracy_scorer != "judge" else fallback_scorer(plan)
    answer = extract_answer(response, plan.answer_format)  # type: ignore[arg-type]
    if is_code_ref(scorer):
        acc = call_custom_scorer(
            resolve_scorer(scorer, trust=trust),
            scorer,
            data_source=data_source or "",
            solution_str=response,
            ground_truth=_golds(ground_truth),
            extra_info={"answer": answer, **(extra_info or {})},
        )
        return {"score": plan.accuracy_weight * acc, "acc": acc, "format": 0.0, "scored_by_loop": False}
    acc = score_answer(answer, _golds(ground_truth), scorer, numeric_tolerance=plan.numeric_tolerance)
    return {"score": plan.accuracy_weight * acc, "acc": acc, "format": 0.0, "scored_by_loop": False}


def make_compute_score(plan_path: str | Path) -> ComputeScore:
    """A veRL ``compute_score(data_source, solution_str, ground_truth, extra_info)`` bound to a credit plan."""
    plan = CreditPlan.model_validate_json(Path(plan_path).read_text(encoding="utf-8"))

    def compute_score(
        data_source: str | None = None,
        solution_str: str = "",
        ground_truth: Any = None,
        extra_info: dict[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        loop = (extra_info or {}).get(LOOP_REWARD_KEY)
        if isinstance(loop, dict) and "score" in loop:
            return {
                "score": float(loop["score"]),
                "acc": float(loop.get("acc", 0.0)),
                "format": float(loop.get("format", 0.0)),
                "scored_by_loop": True,
            }
        return score_response(plan, solution_str or "", ground_truth, data_source=data_source, extra_info=extra_info)

    return compute_score
