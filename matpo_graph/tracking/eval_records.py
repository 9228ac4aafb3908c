"""Held-out evaluations kept per question, so two evaluations of one run compare question by question.

A run's evaluation at step N writes ``evals/step_N.json``: for each question its greedy accuracy and its
sampled accuracies. The report pairs the warm-up's evaluation (step 0) with the last one: a paired interval
over the same questions is far narrower than two independent ones, and says whether RL changed anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matpo_graph.core.rollout import RolloutTree
from matpo_graph.tracking.stats import Interval, mean_interval, paired_difference

__all__ = ["HeldOutComparison", "compare_heldout", "read_eval_records", "write_eval_record"]


def _question(tree: RolloutTree) -> str:
    return str(tree.metadata.get("question_id") or tree.group_id)


def write_eval_record(path: Path, step: int, greedy: Sequence[RolloutTree], sampled: Sequence[RolloutTree]) -> Path:
    """Write one evaluation's per-question accuracies (greedy, and each sample's) to `path`."""
    questions: dict[str, dict[str, Any]] = {}
    for tree in greedy:
        if tree.reward is not None:
            questions.setdefault(_question(tree), {"greedy": None, "sampled": []})["greedy"] = float(tree.reward.accuracy)
    for tree in sampled:
        if tree.reward is not None:
            questions.setdefault(_question(tree), {"greedy": None, "sampled": []})["sampled"].append(float(tree.reward.accuracy))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"step": step, "questions": questions}, indent=1, sort_keys=True), encoding="utf-8")
    return path


def read_eval_records(run_dir: Path) -> dict[int, dict[str, dict[str, Any]]]:
    """step -> {question id -> {"greedy": accuracy, "sampled": [accuracies]}} for every evaluation of a run."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for path in sorted((Path(run_dir) / "evals").glob("step_*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out[int(data["step"])] = dict(data["questions"])
        except (ValueError, KeyError, TypeError):
            continue  # a half-written or foreign file is not an evaluation
    return out


@dataclass(frozen=True)
class HeldOutComparison:
    """Two evaluations of the same questions: each one's accuracy and their paired difference (after - before)."""

    before_step: int
    after_step: int
    questions: int
    before: Interval
    after: Interval
    difference: Interval
    won: int
    lost: int


def _per_question(record: dict[str, dict[str, Any]], kind: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for qid, r in record.items():
        values = ([r["greedy"]] if r.get("greedy") is not None else []) if kind == "greedy" else list(r.get("sampled") or [])
        if kind == "all":
            values = ([r["greedy"]] if r.get("greedy") is not None else []) + list(r.get("sampled") or [])
        if values:
            out[qid] = sum(values) / len(values)
    return out


def compare_heldout(records: dict[int, dict[str, dict[str, Any]]], *, kind: str = "all",
                    before_step: int = 0, after_step: int | None = None) -> HeldOutComparison | None:
    """Accuracy at `before_step` (the warm-up) and `after_step` (default: the last evaluation) on the questions
    both evaluated; `kind` is ``greedy``, ``sampled`` or ``all`` (greedy and samples averaged per question).
    None when there are not two evaluations to compare."""
    if before_step not in records:
        return None
    later = [s for s in records if s > before_step]
    after_step = max(later) if after_step is None and later else after_step
    if after_step is None or after_step not in records:
        return None
    before = _per_question(records[before_step], kind)
    after = _per_question(records[after_step], kind)
    common = sorted(set(before) & set(after))
    if not common:
        return None
    b = {q: before[q] for q in common}
    a = {q: after[q] for q in common}
    return HeldOutComparison(before_step, after_step, len(common), mean_interval(list(b.values())),
                             mean_interval(list(a.values())), paired_difference(a, b),
                             sum(1 for q in common if a[q] > b[q]), sum(1 for q in common if a[q] < b[q]))
