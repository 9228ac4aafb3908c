"""How an evaluation's answers changed between two steps, and how the trees that changed behave.

A paired accuracy difference says *that* held-out answers were won or lost; reading why needs the trees: did a
lost question end with a wrong answer, with no answer at all, or cut off? Did the planner delegate less, the
trees get longer, the tools fail more? This module sorts each evaluation tree into one outcome and a few
behaviour numbers, so two evaluations of one benchmark folder can be compared question by question.
Pure: it reads trees given to it, does no I/O.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from matpo_graph.core.rollout import RolloutTree

__all__ = ["OUTCOMES", "TreeShape", "HopsRow", "FlipReport", "tree_shape", "compare_evaluations", "render_flips"]

OUTCOMES = ("right", "wrong answer", "no answer", "cut off")
"""What a tree ended with, in the order of the report: exact match, an answer that does not match, no
extractable answer, or a tree stopped by its token/time budget (whatever its answer)."""


@dataclass(frozen=True)
class TreeShape:
    """One evaluation tree reduced to its outcome and the behaviour a policy update can shift."""

    question: str
    hops: int | None
    """Length of the question's relation chain, when its metadata says (embedded-web questions do)."""
    greedy: bool
    outcome: str
    answer: str | None
    delegations: int
    """Calls from the root along an edge (for deep_search: browser workers started by the planner)."""
    root_turns: int
    generated_tokens: int
    """Tokens the policy generated in the whole tree, every role."""
    tool_calls: int
    tool_errors: int
    invalid_calls: int
    """Calls that did not parse or named nothing the role may call."""


def tree_shape(tree: RolloutTree) -> TreeShape:
    """Sort a scored tree into an outcome (see OUTCOMES) and count what it did.

    Raises:
        ValueError: the tree has no reward (an evaluation tree always has one).
    """
    if tree.reward is None:
        raise ValueError(f"tree {tree.tree_id!r} has no reward")
    if tree.truncated is not None:
        outcome = "cut off"
    elif tree.reward.accuracy >= 1.0:
        outcome = "right"
    elif tree.reward.answer is None:
        outcome = "no answer"
    else:
        outcome = "wrong answer"
    root = tree.trajectories[0] if tree.trajectories else None
    calls = [c for t in tree.trajectories for turn in t.turns for c in turn.calls]
    return TreeShape(
        question=str(tree.metadata.get("question_id") or tree.group_id),
        hops=hops if isinstance(hops := tree.metadata.get("hops"), int) else None,
        greedy=tree.tree_id.startswith("eg"),
        outcome=outcome,
        answer=tree.reward.answer,
        delegations=sum(1 for turn in root.turns for c in turn.calls if c.kind == "child") if root else 0,
        root_turns=len(root.turns) if root else 0,
        generated_tokens=sum(turn.num_tokens for t in tree.trajectories for turn in t.turns),
        tool_calls=sum(1 for c in calls if c.kind == "tool"),
        tool_errors=sum(1 for c in calls if c.kind == "tool" and c.error),
        invalid_calls=sum(1 for c in calls if not c.valid),
    )


@dataclass(frozen=True)
class HopsRow:
    """Accuracy and delegations of one kind of tree on questions of one chain length, before and after.

    A policy can trade one kind of question for another (delegating twice helps two-hop questions and can cost
    one-hop ones) while the overall accuracy barely moves; split by hops, the trade shows.
    """

    hops: int | None
    greedy: bool
    trees: tuple[int, int]
    accuracy: tuple[float, float]
    """Fraction of trees ending right (outcome 'right')."""
    delegations: tuple[float, float]


@dataclass(frozen=True)
class FlipReport:
    """Two evaluations of the same questions, compared."""

    before_step: int
    after_step: int
    greedy_transitions: dict[tuple[str, str], int]
    """(outcome before, outcome after) -> greedy answers, over the questions both evaluations hold."""
    won: list[tuple[str, TreeShape, TreeShape]]
    """Questions whose greedy answer went from not right to right: (question, before, after)."""
    lost: list[tuple[str, TreeShape, TreeShape]]
    behaviour: dict[str, dict[str, tuple[float, float]]]
    """'greedy' / 'sampled' -> measure -> (mean before, mean after) over all trees of that kind."""
    sampled_outcomes: dict[str, tuple[int, int]]
    """outcome -> (sampled trees before, after)."""
    by_hops: list[HopsRow]
    """Greedy then sampled rows, by hops ascending (unknown hops last)."""
    before_label: str = ""
    """How the report names the first evaluation (default ``step N``); e.g. a configuration, when two
    configurations of one folder are compared at one step."""
    after_label: str = ""

    @property
    def labels(self) -> tuple[str, str]:
        return (self.before_label or f"step {self.before_step}", self.after_label or f"step {self.after_step}")


_MEASURES = ("delegations", "root_turns", "generated_tokens", "tool_calls", "tool_errors", "invalid_calls")


def _behaviour(shapes: Sequence[TreeShape]) -> dict[str, float]:
    return {m: statistics.fmean(getattr(s, m) for s in shapes) if shapes else 0.0 for m in _MEASURES}


def _by_hops(shapes0: Sequence[TreeShape], shapes1: Sequence[TreeShape]) -> list[HopsRow]:
    rows = []
    hops = sorted({s.hops for s in (*shapes0, *shapes1)}, key=lambda h: (h is None, h or 0))
    for greedy in (True, False):
        for h in hops:
            sides = [[s for s in shapes if s.greedy == greedy and s.hops == h] for shapes in (shapes0, shapes1)]
            if not any(sides):
                continue
            acc = tuple(statistics.fmean(s.outcome == "right" for s in side) if side else 0.0 for side in sides)
            dele = tuple(statistics.fmean(s.delegations for s in side) if side else 0.0 for side in sides)
            rows.append(HopsRow(h, greedy, (len(sides[0]), len(sides[1])), acc, dele))  # type: ignore[arg-type]
    return rows


def compare_evaluations(before: Iterable[RolloutTree], after: Iterable[RolloutTree], *, before_step: int,
                        after_step: int, before_label: str = "", after_label: str = "") -> FlipReport:
    """Compare two evaluations tree by tree; greedy answers are paired by question.

    Raises:
        ValueError: a question with more than one greedy tree in one evaluation, or a tree without a reward.
    """
    sides = []
    for trees in (before, after):
        shapes = [tree_shape(t) for t in trees]
        greedy: dict[str, TreeShape] = {}
        for s in shapes:
            if s.greedy:
                if s.question in greedy:
                    raise ValueError(f"question {s.question!r} has two greedy trees in one evaluation")
                greedy[s.question] = s
        sides.append((shapes, greedy))
    (shapes0, greedy0), (shapes1, greedy1) = sides
    common = [q for q in greedy0 if q in greedy1]
    transitions = Counter((greedy0[q].outcome, greedy1[q].outcome) for q in common)
    won = [(q, greedy0[q], greedy1[q]) for q in common
           if greedy0[q].outcome != "right" and greedy1[q].outcome == "right"]
    lost = [(q, greedy0[q], greedy1[q]) for q in common
            if greedy0[q].outcome == "right" and greedy1[q].outcome != "right"]
    behaviour = {
        kind: {m: (b0[m], b1[m]) for m in _MEASURES}
        for kind, b0, b1 in (
            ("greedy", _behaviour([s for s in shapes0 if s.greedy]), _behaviour([s for s in shapes1 if s.greedy])),
            ("sampled", _behaviour([s for s in shapes0 if not s.greedy]),
             _behaviour([s for s in shapes1 if not s.greedy])),
        )
    }
    sampled0 = Counter(s.outcome for s in shapes0 if not s.greedy)
    sampled1 = Counter(s.outcome for s in shapes1 if not s.greedy)
    return FlipReport(before_step, after_step, dict(transitions), won, lost, behaviour,
                      {o: (sampled0[o], sampled1[o]) for o in OUTCOMES}, _by_hops(shapes0, shapes1),
                      before_label, after_label)


def _shape_cell(s: TreeShape) -> str:
    said = "" if s.answer is None else f" {s.answer[:40]!r};"
    return f"{s.outcome};{said} {s.delegations} delegations, {s.root_turns} root turns, {s.generated_tokens} tokens"


def render_flips(report: FlipReport) -> str:
    """Markdown: the greedy transition table, the won and lost questions, and behaviour before and after."""
    b, a = report.labels
    lines = [f"### Greedy answers, {b} -> {a} (rows: {b}, columns: {a})", "",
             "| | " + " | ".join(OUTCOMES) + " |", "|---|" + "---|" * len(OUTCOMES)]
    for o0 in OUTCOMES:
        lines.append(f"| {o0} | " + " | ".join(str(report.greedy_transitions.get((o0, o1), 0)) for o1 in OUTCOMES)
                     + " |")
    for title, rows in (("Lost", report.lost), ("Won", report.won)):
        lines += ["", f"### {title} greedy answers ({len(rows)})", ""]
        if rows:
            lines += [f"| question | hops | {b} | {a} |", "|---|---|---|---|"]
            lines += [f"| {q} | {'?' if s0.hops is None else s0.hops} | {_shape_cell(s0)} | {_shape_cell(s1)} |"
                      for q, s0, s1 in rows]
        else:
            lines.append("none")
    lines += ["", f"### Behaviour, mean per tree ({b} -> {a})", "",
              "| measure | greedy | sampled |", "|---|---|---|"]
    for m in _MEASURES:
        g0, g1 = report.behaviour["greedy"][m]
        s0, s1 = report.behaviour["sampled"][m]
        lines.append(f"| {m.replace('_', ' ')} | {g0:.2f} -> {g1:.2f} | {s0:.2f} -> {s1:.2f} |")
    lines += ["", f"### By hops ({b} -> {a})", "",
              "| hops | kind | trees | accuracy | delegations |", "|---|---|---|---|---|"]
    for r in report.by_hops:
        count = f"{r.trees[0]}" if r.trees[0] == r.trees[1] else f"{r.trees[0]} -> {r.trees[1]}"
        lines.append(f"| {'?' if r.hops is None else r.hops} | {'greedy' if r.greedy else 'sampled'} | {count} | "
                     f"{r.accuracy[0]:.3f} -> {r.accuracy[1]:.3f} | {r.delegations[0]:.2f} -> {r.delegations[1]:.2f} |")
    lines += ["", "### Sampled outcomes (trees)", "", f"| outcome | {b} | {a} |", "|---|---|---|"]
    lines += [f"| {o} | {n0} | {n1} |" for o, (n0, n1) in report.sampled_outcomes.items()]
    return "\n".join(lines) + "\n"
