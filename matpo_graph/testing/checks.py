"""Invariant checks for credit assignment, usable from any test (plain functions, no hypothesis).

Each check raises :class:`InvariantViolation` (an ``AssertionError``, so pytest shows it as a
failed assertion) naming the tree, trajectory and values involved. Expected GRPO values are
recomputed here with the ``statistics`` module, independently of :mod:`matpo_graph.core.credit`.

- :func:`check_credit_invariants`: what every strategy must satisfy (inputs untouched, structure
  kept, finite values, untrained roles excluded, masked tokens zero, permutation invariance,
  determinism).
- :func:`check_matpo_invariants`: the above plus MATPO's own rules (broadcast of the root's GRPO
  scalar, group normalisation, zero advantage for degenerate groups).
- :func:`check_policy_binding`: per-role policies (shared, lora, separate) leave every advantage as
  it is, each trajectory is on its role's policy, and each trained trajectory is trained by exactly
  one policy, its own.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from matpo_graph.core.credit import CreditStrategy, assign_credit, token_advantages
from matpo_graph.core.policies import policy_partition
from matpo_graph.core.program import CreditPlan
from matpo_graph.core.rollout import RolloutTree

__all__ = [
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
    "expected_root_advantages",
]

_TOL = 1e-9


class InvariantViolation(AssertionError):
    """A credit assignment result broke an invariant."""


def _close(a: float, b: float, tol: float = _TOL) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def _rewards(trees: Sequence[RolloutTree], rewards: Mapping[str, float] | None) -> dict[str, float]:
    if rewards is not None:
        return dict(rewards)
    missing = [t.tree_id for t in trees if t.reward is None]
    if missing:
        raise InvariantViolation(f"trees without reward: {missing}")
    return {t.tree_id: t.reward.total for t in trees}  # type: ignore[union-attr]


def _groups(trees: Sequence[RolloutTree]) -> dict[str, list[RolloutTree]]:
    out: dict[str, list[RolloutTree]] = {}
    for tree in trees:
        out.setdefault(tree.group_id, []).append(tree)
    return out


def _degenerate(scores: Sequence[float]) -> bool:
    return len(scores) < 2 or len(set(scores)) == 1


def expected_root_advantages(
    trees: Sequence[RolloutTree], plan: CreditPlan, rewards: Mapping[str, float] | None = None
) -> dict[str, float]:
    """tree_id -> the GRPO scalar of its root, recomputed with ``statistics`` (verl's formula)."""
    scores = _rewards(trees, rewards)
    out: dict[str, float] = {}
    for members in _groups(trees).values():
        rs = [scores[t.tree_id] for t in members]
        for tree, r in zip(members, rs, strict=True):
            if len(rs) == 1:
                passthrough = plan.single_member == "passthrough"
                value = (r / (1 + plan.epsilon) if plan.normalization == "std" else r) if passthrough else 0.0
            elif len(set(rs)) == 1:
                value = 0.0
            elif plan.normalization == "mean_only":
                value = r - statistics.fmean(rs)
            else:
                value = (r - statistics.fmean(rs)) / (statistics.stdev(rs) + plan.epsilon)
            out[tree.tree_id] = value
    return out


def check_masked_tokens_zero(trees: Sequence[RolloutTree]) -> None:
    """Per-token advantages are exactly 0 off the loss mask, and everywhere for untrained trajectories."""
    for tree in trees:
        for t in tree.trajectories:
            for i, (m, a) in enumerate(zip(t.loss_mask, token_advantages(t), strict=True)):
                if (not m or t.advantage is None) and a != 0.0:
                    raise InvariantViolation(f"{tree.tree_id}/{t.traj_id} token {i}: mask {m} but advantage {a}")
                if m and t.advantage is not None and a != t.advantage:
                    raise InvariantViolation(f"{tree.tree_id}/{t.traj_id} token {i}: {a} != scalar {t.advantage}")


def check_untrained_roles_excluded(trees: Sequence[RolloutTree], plan: CreditPlan) -> None:
    """Roles outside ``plan.trained_roles`` carry no advantage."""
    for tree in trees:
        for t in tree.trajectories:
            if t.role not in plan.trained_roles and t.advantage is not None:
                raise InvariantViolation(
                    f"{tree.tree_id}/{t.traj_id}: role {t.role!r} is not trained but has advantage {t.advantage}"
                )


def check_broadcast(trees: Sequence[RolloutTree], plan: CreditPlan, rewards: Mapping[str, float] | None = None) -> None:
    """Every trained token of every trajectory (root and descendants) carries its root's GRPO scalar."""
    expected = expected_root_advantages(trees, plan, rewards)
    for tree in trees:
        scalar = expected[tree.tree_id]
        for t in tree.trajectories:
            if t.role not in plan.trained_roles:
                continue
            if t.advantage is None or not _close(t.advantage, scalar):
                raise InvariantViolation(
                    f"{tree.tree_id}/{t.traj_id} ({t.role}, depth {t.depth}): "
                    f"advantage {t.advantage} != root scalar {scalar}"
                )
            for i, m in enumerate(t.loss_mask):
                if m and token_advantages(t)[i] != t.advantage:
                    raise InvariantViolation(f"{tree.tree_id}/{t.traj_id} token {i} does not carry the scalar")


def check_group_normalized(
    trees: Sequence[RolloutTree], plan: CreditPlan, rewards: Mapping[str, float] | None = None
) -> None:
    """Per group, root advantages have mean 0 and (std normalisation, rewards differing) unbiased std
    ``std_r / (std_r + eps)``, which is 1 up to ``eps / std_r``."""
    scores = _rewards(trees, rewards)
    for gid, members in _groups(trees).items():
        rs = [scores[t.tree_id] for t in members]
        roots = [t.root.advantage for t in members if t.trajectories]
        if _degenerate(rs) or len(roots) != len(members) or any(a is None for a in roots):
            continue
        adv = [float(a) for a in roots]  # type: ignore[arg-type]
        scale = max(1.0, max(abs(a) for a in adv))
        if abs(statistics.fmean(adv)) > 1e-9 * scale:
            raise InvariantViolation(
                f"group {gid}: root advantages {adv} have mean {statistics.fmean(adv)}, expected 0"
            )
        if plan.normalization != "std":
            continue
        std_r = statistics.stdev(rs)
        std_a = statistics.stdev(adv)
        if not _close(std_a, std_r / (std_r + plan.epsilon), 1e-7) or abs(std_a - 1.0) > plan.epsilon / std_r + 1e-7:
            raise InvariantViolation(
                f"group {gid}: root advantages {adv} have std {std_a}, expected 1 (reward std {std_r})"
            )


def check_degenerate_groups_zero(
    trees: Sequence[RolloutTree], plan: CreditPlan, rewards: Mapping[str, float] | None = None
) -> None:
    """Groups with equal rewards (or a single member, unless passthrough) give every trajectory 0 or None."""
    scores = _rewards(trees, rewards)
    for gid, members in _groups(trees).items():
        rs = [scores[t.tree_id] for t in members]
        single_kept = len(rs) == 1 and plan.single_member == "passthrough"
        if not _degenerate(rs) or single_kept:
            continue
        for tree in members:
            for t in tree.trajectories:
                if t.advantage not in (None, 0.0):
                    raise InvariantViolation(
                        f"degenerate group {gid} (rewards {rs}): {tree.tree_id}/{t.traj_id} has advantage {t.advantage}"
                    )


def _by_key(trees: Sequence[RolloutTree]) -> dict[tuple[str, str], float | None]:
    return {(tree.tree_id, t.traj_id): t.advantage for tree in trees for t in tree.trajectories}


def _same(a: dict[tuple[str, str], float | None], b: dict[tuple[str, str], float | None], what: str) -> None:
    if a.keys() != b.keys():
        raise InvariantViolation(f"{what}: different trajectories")
    for key, x in a.items():
        y = b[key]
        if (x is None) != (y is None) or (x is not None and y is not None and not _close(x, y)):
            raise InvariantViolation(f"{what}: {key} got {x} and {y}")


def check_permutation_invariant(
    trees: Sequence[RolloutTree], plan: CreditPlan, *, seed: int = 0, strategy: str | CreditStrategy | None = None
) -> None:
    """Reversing, then shuffling, trees and descendants does not change any trajectory's advantage."""
    rng = random.Random(seed)
    reversed_trees = [
        t.model_copy(update={"trajectories": t.trajectories[:1] + t.descendants[::-1]}) for t in trees[::-1]
    ]
    shuffled = []
    for tree in trees:
        rest = list(tree.descendants)
        rng.shuffle(rest)
        shuffled.append(tree.model_copy(update={"trajectories": tree.trajectories[:1] + rest}))
    rng.shuffle(shuffled)
    strategy = plan.strategy if strategy is None else strategy  # the strategy under test: the caller's own code
    base, _ = assign_credit(trees, plan, strategy=strategy, warn=False)
    for variant in (reversed_trees, shuffled):
        perm, _ = assign_credit(variant, plan, strategy=strategy, warn=False)
        _same(_by_key(base), _by_key(perm), "permuted batch")


def check_credit_invariants(
    trees: Sequence[RolloutTree], plan: CreditPlan, *, strategy: str | CreditStrategy | None = None, seed: int = 0
) -> tuple[list[RolloutTree], dict[str, float]]:
    """Run credit assignment and check what any strategy must satisfy; returns its result."""
    before = [t.model_dump_json() for t in trees]
    strategy = plan.strategy if strategy is None else strategy  # the strategy under test: the caller's own code
    out, metrics = assign_credit(trees, plan, strategy=strategy, warn=False)
    if [t.model_dump_json() for t in trees] != before:
        raise InvariantViolation("assign_credit modified its input trees")
    if [t.tree_id for t in out] != [t.tree_id for t in trees]:
        raise InvariantViolation("assign_credit changed the order or ids of trees")
    for old, new in zip(trees, out, strict=True):
        strip: Any = {"trajectories": {"__all__": {"advantage"}}}
        if old.model_dump(exclude=strip) != new.model_dump(exclude=strip):
            raise InvariantViolation(f"tree {old.tree_id}: assign_credit changed more than the advantages")
        for t in new.trajectories:
            if t.advantage is not None and not math.isfinite(t.advantage):
                raise InvariantViolation(f"{new.tree_id}/{t.traj_id}: advantage {t.advantage} is not finite")
    check_untrained_roles_excluded(out, plan)
    check_masked_tokens_zero(out)
    check_permutation_invariant(trees, plan, seed=seed, strategy=strategy)
    again, _ = assign_credit(trees, plan, strategy=strategy, warn=False)
    _same(_by_key(out), _by_key(again), "second run")
    return out, metrics


def check_matpo_invariants(
    trees: Sequence[RolloutTree], plan: CreditPlan, *, seed: int = 0
) -> tuple[list[RolloutTree], dict[str, float]]:
    """The generic checks plus broadcast, group normalisation and degenerate groups (strategy broadcast)."""
    out, metrics = check_credit_invariants(trees, plan, strategy="broadcast", seed=seed)
    check_broadcast(out, plan, _rewards(trees, None))
    check_group_normalized(out, plan, _rewards(trees, None))
    check_degenerate_groups_zero(out, plan, _rewards(trees, None))
    return out, metrics


def check_policy_binding(
    trees: Sequence[RolloutTree], plan: CreditPlan, *, strategy: str | CreditStrategy | None = None
) -> tuple[list[RolloutTree], dict[str, list[tuple[str, str]]]]:
    """Per-role policies: the binding is recorded faithfully and changes nothing but who trains what.

    Checks that each trajectory names the policy its role is bound to in ``plan.role_policies``; that
    credit gives exactly (bit for bit) the advantages it gives with every trajectory on one shared policy;
    and that every trained trajectory appears in exactly one policy's rows, its own.

    Returns:
        The credited trees and the rows of each policy (:func:`matpo_graph.core.policies.policy_partition`).
    """
    for tree in trees:
        for t in tree.trajectories:
            bound = plan.role_policies.get(t.role, "shared")
            if t.policy != bound:
                raise InvariantViolation(f"{tree.tree_id}/{t.traj_id}: role {t.role!r} is bound to {bound!r} but the "
                                         f"trajectory records policy {t.policy!r}")
    strategy = plan.strategy if strategy is None else strategy
    out, _ = assign_credit(trees, plan, strategy=strategy, warn=False)
    unbound = [t.model_copy(update={"trajectories": [x.model_copy(update={"policy": "shared", "adapter": None})
                                                      for x in t.trajectories]}) for t in trees]
    shared, _ = assign_credit(unbound, plan.model_copy(update={"role_policies": {}}), strategy=strategy, warn=False)
    a, b = _by_key(out), _by_key(shared)
    if a != b:
        diff = next(k for k in a if a[k] != b.get(k))
        raise InvariantViolation(f"the policy binding changed the advantage of {diff}: {a[diff]} vs {b.get(diff)} shared")
    parts = policy_partition(out, trained_roles=plan.trained_roles)
    policy_by_key = {(tree.tree_id, t.traj_id): t.policy for tree in out for t in tree.trajectories}
    seen: dict[tuple[str, str], str] = {}
    for policy, keys in parts.items():
        for key in keys:
            if key in seen:
                raise InvariantViolation(f"{key} is trained by both {seen[key]!r} and {policy!r}")
            if policy_by_key[key] != policy:
                raise InvariantViolation(f"{key} was generated by {policy_by_key[key]!r} but is trained by {policy!r}")
            seen[key] = policy
    trained = {(tree.tree_id, t.traj_id) for tree in out for t in tree.trajectories
               if t.advantage is not None and t.num_trained_tokens and t.role in plan.trained_roles}
    if set(seen) != trained:
        raise InvariantViolation(f"trajectories trained by no policy: {sorted(trained - set(seen))[:5]}")
    return out, parts
