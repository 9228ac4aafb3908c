"""Which way a run's training batches pushed the root's number of delegations, and which way its plans went.

The root's choice of how many delegations to make is one habit shared by every question. Within a GRPO group the
root advantages sum to zero, so ``sum(advantage * delegations)`` over a group is the covariance of the two: above
zero when the group's trees that delegated more did better. Summed over a run's training trees, split by the
questions' hop counts, it says how hard the run's own batches pushed the habit up (two-hop groups, where one
delegation cannot reach the answer) and down (one-hop groups, where a second delegation is wasted or goes
astray). Set beside how often held-out one-hop trees delegate more than once before and after the run, it tests a
reading of why runs of one setting end apart: the luck of which questions came up, not the update rule.
Pure: takes trees, returns numbers and markdown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from matpo_graph.bench.flips import tree_shape
from matpo_graph.core.rollout import RolloutTree

__all__ = ["DelegationPush", "OneHopPlans", "RunPlanCredit", "delegation_push", "one_hop_plans", "render_plan_credit"]


@dataclass(frozen=True)
class DelegationPush:
    """Advantage times root delegations, summed over a run's training trees, by the question's hop count."""

    by_hops: dict[int | None, float]
    trees: int

    @property
    def total(self) -> float:
        return sum(self.by_hops.values())


def delegation_push(trees: Iterable[RolloutTree]) -> DelegationPush:
    """Sum of root advantage x root delegations per hop count (None: the question's hops are unknown).

    Trees without a root advantage (not yet credited) count as advantage 0.

    Raises:
        ValueError: a tree without a reward (training trees are scored before they are written).
    """
    by_hops: dict[int | None, float] = {}
    n = 0
    for tree in trees:
        n += 1
        shape = tree_shape(tree)
        adv = tree.trajectories[0].advantage if tree.trajectories else None
        by_hops[shape.hops] = by_hops.get(shape.hops, 0.0) + float(adv or 0.0) * shape.delegations
    return DelegationPush(by_hops=by_hops, trees=n)


@dataclass(frozen=True)
class OneHopPlans:
    """Held-out one-hop trees of one evaluation: how many, how many delegated more than once, how many were right."""

    trees: int
    over: int
    right: int
    greedy: int
    greedy_over: int

    @property
    def over_share(self) -> float:
        return self.over / self.trees if self.trees else float("nan")

    @property
    def greedy_over_share(self) -> float:
        return self.greedy_over / self.greedy if self.greedy else float("nan")

    @property
    def accuracy(self) -> float:
        return self.right / self.trees if self.trees else float("nan")


def one_hop_plans(trees: Iterable[RolloutTree]) -> OneHopPlans:
    """Count an evaluation's one-hop trees (greedy and sampled) and those whose root delegated more than once.

    Raises:
        ValueError: a tree without a reward (an evaluation tree always has one).
    """
    n = over = right = greedy = greedy_over = 0
    for tree in trees:
        shape = tree_shape(tree)
        if shape.hops != 1:
            continue
        n += 1
        over += shape.delegations > 1
        right += shape.outcome == "right"
        if shape.greedy:
            greedy += 1
            greedy_over += shape.delegations > 1
    return OneHopPlans(trees=n, over=over, right=right, greedy=greedy, greedy_over=greedy_over)


@dataclass(frozen=True)
class RunPlanCredit:
    """One run: its training batches' push and its held-out one-hop plans before and after."""

    label: str
    push: DelegationPush | None
    """None: the folder holds no training trees (a warm-up evaluated at step 0 only)."""
    before: OneHopPlans
    after: OneHopPlans | None
    """None: no evaluation after step 0."""


def render_plan_credit(runs: Sequence[RunPlanCredit]) -> str:
    """Markdown: one row per run, sorted by the push, so a reading that the push sets the drift shows at a glance."""
    hops = sorted({h for r in runs if r.push is not None for h in r.push.by_hops if h is not None})
    head = ["run", "training trees", *(f"push, {h}-hop groups" for h in hops), "push, all",
            "one-hop trees delegating twice or more, before -> after (greedy)", "one-hop accuracy, before -> after"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(runs, key=lambda r: r.push.total if r.push is not None else float("inf")):
        if r.push is None:
            cells, trees, total = " | ".join("-" for _ in hops), "0", "-"
        else:
            cells = " | ".join(f"{r.push.by_hops.get(h, 0.0):+.2f}" for h in hops)
            trees, total = str(r.push.trees), f"{r.push.total:+.2f}"
        b, a = r.before, r.after
        plans = (f"{b.over_share:.2f} -> {a.over_share:.2f} ({b.greedy_over_share:.2f} -> {a.greedy_over_share:.2f})"
                 if a is not None else f"{b.over_share:.2f} ({b.greedy_over_share:.2f})")
        accuracy = f"{b.accuracy:.2f} -> {a.accuracy:.2f}" if a is not None else f"{b.accuracy:.2f}"
        lines.append(f"| {r.label} | {trees} | {cells}{' | ' if hops else ''}{total} | {plans} | {accuracy} |")
    return "\n".join(lines) + "\n"
