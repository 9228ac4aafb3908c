"""Accuracy on each step's training questions, met for the first time, paired between two runs on the same batches.

Held-out evaluations are few and slow here (48 questions every ten steps), but every RL step already measures the
policy on questions it has never trained on: the step's own batch, drawn before its update. Two runs of one RL seed
draw the same batches in the same order, whatever their update does, so a question's accuracy in one run minus its
accuracy in the other is a paired difference between two policies on a fresh question. Run against the null control
(rewards shuffled within groups), it asks whether learning from the reward helps on questions not yet seen, with
trees the runs sample anyway. A question met at an earlier step is left out: after it, the policy has trained on it.
With dynamic sampling a run also trains on extra questions that its own outcomes drew (and the other run may not
have): those count as met, so they are never fresh later, but only each step's regular questions, the same for
both runs, are units.
Pure: takes trees, returns numbers and markdown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from matpo_graph.core.rollout import RolloutTree
from matpo_graph.rl.data_order import is_extra_draw
from matpo_graph.tracking.stats import Interval, mean, paired_difference

__all__ = ["BlockDifference", "first_met_accuracy", "paired_blocks", "render_fresh_pairs"]


def _question(tree: RolloutTree) -> str:
    return str(tree.metadata.get("question_id") or tree.question)


def first_met_accuracy(steps: Mapping[int, Iterable[RolloutTree]]) -> dict[int, dict[str, float | None]]:
    """Per step, each regular question's mean accuracy, or None when an earlier step held it (in any draw).

    The Nones keep the step's whole regular batch visible, so a pair can still be checked for drawing the same
    questions when one run met some of them earlier as extra draws.

    Raises:
        ValueError: a tree without a reward (training trees are scored before they are written).
    """
    seen: set[str] = set()
    out: dict[int, dict[str, float | None]] = {}
    for step in sorted(steps):
        scores: dict[str, list[float]] = {}
        met: set[str] = set()
        for tree in steps[step]:
            if tree.reward is None:
                raise ValueError(f"tree {tree.tree_id!r} of step {step} has no reward")
            met.add(_question(tree))
            if not is_extra_draw(tree.group_id):
                scores.setdefault(_question(tree), []).append(tree.reward.accuracy)
        out[step] = {q: None if q in seen else mean(v) for q, v in scores.items()}
        seen.update(met)
    return out


@dataclass(frozen=True)
class BlockDifference:
    """Steps first..last, pooled over run pairs: mean accuracy of each side and their paired difference."""

    first: int
    last: int
    a: float
    b: float
    difference: Interval


def paired_blocks(pairs: Sequence[tuple[Mapping[int, Mapping[str, float | None]], Mapping[int, Mapping[str, float | None]]]],
                  block: int) -> list[BlockDifference]:
    """Pool (step, question) units of every pair into blocks of `block` steps and pair A against B in each.

    A unit is a question of the step's batch that is fresh (not None) in both runs.

    Raises:
        ValueError: a pair's runs drew different questions at a step they share (not the same batches, so not
            paired: runs of one RL seed from one start draw the same ones), or no step in common.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    units_a: dict[int, dict[str, float]] = {}
    units_b: dict[int, dict[str, float]] = {}
    steps_in: dict[int, set[int]] = {}
    for index, (a, b) in enumerate(pairs):
        common = sorted(set(a) & set(b))
        if not common:
            raise ValueError(f"pair {index + 1}: the two runs share no training step")
        for step in common:
            if set(a[step]) != set(b[step]):
                raise ValueError(f"pair {index + 1}, step {step}: the runs drew different questions "
                                 f"({sorted(a[step])} against {sorted(b[step])}); pair runs of one RL seed and start")
            key = (step - 1) // block
            steps_in.setdefault(key, set()).add(step)
            for q in a[step]:
                x, y = a[step][q], b[step][q]
                if x is None or y is None:
                    continue
                units_a.setdefault(key, {})[f"{index}|{step}|{q}"] = x
                units_b.setdefault(key, {})[f"{index}|{step}|{q}"] = y
    rows = []
    for key in sorted(units_a):
        if not units_a[key]:
            continue
        rows.append(BlockDifference(first=min(steps_in[key]), last=max(steps_in[key]),
                                    a=mean(list(units_a[key].values())), b=mean(list(units_b[key].values())),
                                    difference=paired_difference(units_a[key], units_b[key])))
    all_a = {k: v for d in units_a.values() for k, v in d.items()}
    all_b = {k: v for d in units_b.values() for k, v in d.items()}
    if len(rows) > 1 and all_a:
        rows.append(BlockDifference(first=rows[0].first, last=rows[-1].last, a=mean(list(all_a.values())), b=mean(list(all_b.values())),
                                    difference=paired_difference(all_a, all_b)))
    return rows


def _iv(iv: Interval) -> str:
    if iv.n < 2:
        return f"{iv.estimate:+.3f} (one question)"
    return f"{iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"


def render_fresh_pairs(rows: Sequence[BlockDifference], a_label: str, b_label: str) -> str:
    """A markdown table: one row per block of steps, the last row all steps together."""
    lines = [f"| steps | questions (pooled over pairs) | {a_label} | {b_label} | difference (paired 95% CI) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.first}-{r.last} | {r.difference.n} | {r.a:.3f} | {r.b:.3f} | {_iv(r.difference)} |")
    return "\n".join(lines) + "\n"
