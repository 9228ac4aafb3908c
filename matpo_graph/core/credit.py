"""Credit assignment: root rewards of GRPO groups become scalar advantages on every trajectory.

MATPO (the default ``broadcast`` strategy): for each group (trees sharing ``group_id``, one per
root rollout of a question) the ROOT rewards are normalised,
``A_i = (r_i - mean_G r) / (std_G r + eps)`` with the unbiased std, exactly as verl's
``compute_grpo_outcome_advantage``; workers never enter the statistics. The scalar ``A_i`` is then
copied to every descendant of tree i, and each trajectory's per-token advantage is that scalar
times the trajectory's OWN loss mask (:func:`token_advantages`).

Other built-in strategies: ``root_only`` (descendants are left out of the loss) and
``role_normalized`` (Dr. MAS: statistics per role within a group, each trajectory scored by its
tree's root reward). A custom strategy is named ``'package.module:function'`` in ``plan.strategy``
and has the built-ins' signature: ``fn(batch: CreditBatch) -> StrategyResult`` (or a plain mapping
``{(tree_id, traj_id): advantage or None}``). Custom code runs only when the user's trust policy
allows it (:mod:`matpo_graph.core.trust`): a graph cannot grant that itself.

Degenerate groups (all rewards equal, or a single member) carry no learning signal and get
advantage 0, counted in the metrics and announced once by a :class:`CreditWarning`;
``plan.single_member == "passthrough"`` reproduces verl instead (a lone member keeps
``r / (1 + eps)``). An advantage of None means "not trained": the batch packer skips it.

Pure: no torch, no I/O; inputs are never modified.
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from matpo_graph.core.program import CreditPlan
from matpo_graph.core.registry import CREDIT_STRATEGIES
from matpo_graph.core.rollout import RolloutTree, Trajectory
from matpo_graph.core.trust import TrustPolicy, UntrustedCodeError, active_trust

__all__ = [
    "BUILTIN_STRATEGIES",
    "CreditBatch",
    "CreditError",
    "CreditStrategy",
    "CreditWarning",
    "GroupNorm",
    "StrategyResult",
    "TrajKey",
    "assign_credit",
    "broadcast",
    "group_advantages",
    "resolve_strategy",
    "role_normalized",
    "root_only",
    "token_advantages",
]

TrajKey = tuple[str, str]
"""(tree_id, traj_id): identifies one trajectory within a batch."""

GroupStatus = Literal["ok", "zero_var", "single"]
_PREFIX = "matpo/credit/"


class CreditError(ValueError):
    """Credit assignment got bad input, or a strategy broke one of its invariants."""


class CreditWarning(UserWarning):
    """Some groups were degenerate (equal rewards or a single member) and got zero advantage."""


@dataclass(frozen=True)
class CreditBatch:
    """What a strategy sees: the trees, each tree's root reward, and the plan."""

    trees: tuple[RolloutTree, ...]
    rewards: Mapping[str, float]
    """tree_id -> scalar root reward."""
    plan: CreditPlan

    def groups(self) -> dict[str, list[RolloutTree]]:
        """Trees by group_id (groups in first-seen order, trees in batch order)."""
        out: dict[str, list[RolloutTree]] = {}
        for tree in self.trees:
            out.setdefault(tree.group_id, []).append(tree)
        return out

    def keys(self) -> list[TrajKey]:
        return [(tree.tree_id, t.traj_id) for tree in self.trees for t in tree.trajectories]


@dataclass(frozen=True)
class StrategyResult:
    """A strategy's answer: a scalar advantage (or None: not trained) per trajectory, plus metrics."""

    advantages: Mapping[TrajKey, float | None]
    metrics: Mapping[str, float] = field(default_factory=dict)


CreditStrategy = Callable[[CreditBatch], "StrategyResult | Mapping[TrajKey, float | None]"]


@dataclass(frozen=True)
class GroupNorm:
    """Normalised scores of one group and whether the group was degenerate."""

    values: list[float]
    status: GroupStatus


def group_advantages(
    scores: Sequence[float],
    *,
    normalization: Literal["std", "mean_only"] = "std",
    epsilon: float = 1e-6,
    single_member: Literal["zero", "passthrough"] = "zero",
) -> GroupNorm:
    """GRPO statistics of one group, as verl's ``compute_grpo_outcome_advantage`` computes them.

    ``(r - mean) / (std + epsilon)`` with the unbiased std (``torch.std``), or ``r - mean`` for
    ``mean_only``. Equal scores give exactly 0 (status ``zero_var``). A single score gives 0
    (``single``), or with ``passthrough`` verl's ``(r - 0) / (1 + epsilon)`` (``r`` for mean_only).
    Sums use ``math.fsum``, so the result does not depend on the order of `scores`.

    Raises:
        CreditError: for an empty group or a non-finite score.
    """
    n = len(scores)
    if n == 0:
        raise CreditError("a GRPO group needs at least one score")
    if not all(math.isfinite(s) for s in scores):
        raise CreditError(f"GRPO scores must be finite, got {list(scores)!r}")
    if n == 1:
        if single_member == "passthrough":
            value = scores[0] / (1.0 + epsilon) if normalization == "std" else scores[0]
            return GroupNorm([value], "single")
        return GroupNorm([0.0], "single")
    if max(scores) == min(scores):
        return GroupNorm([0.0] * n, "zero_var")
    mean = math.fsum(scores) / n
    if normalization == "mean_only":
        return GroupNorm([s - mean for s in scores], "ok")
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / (n - 1))
    return GroupNorm([(s - mean) / (std + epsilon) for s in scores], "ok")


def _normalise(scores: Sequence[float], plan: CreditPlan) -> GroupNorm:
    return group_advantages(
        scores, normalization=plan.normalization, epsilon=plan.epsilon, single_member=plan.single_member
    )


def _count(statuses: Sequence[GroupStatus], units: str) -> dict[str, float]:
    return {
        f"{_PREFIX}{units}": float(len(statuses)),
        f"{_PREFIX}degenerate_zero_var": float(sum(s == "zero_var" for s in statuses)),
        f"{_PREFIX}degenerate_single": float(sum(s == "single" for s in statuses)),
    }


def _root_scalars(batch: CreditBatch) -> tuple[dict[str, float], list[GroupStatus]]:
    """GRPO over root rewards per group: tree_id -> scalar advantage."""
    scalars: dict[str, float] = {}
    statuses: list[GroupStatus] = []
    for trees in batch.groups().values():
        norm = _normalise([batch.rewards[t.tree_id] for t in trees], batch.plan)
        statuses.append(norm.status)
        scalars.update({t.tree_id: v for t, v in zip(trees, norm.values, strict=True)})
    return scalars, statuses


def broadcast(batch: CreditBatch) -> StrategyResult:
    """MATPO: GRPO over root rewards per group; the root's scalar goes to every descendant."""
    scalars, statuses = _root_scalars(batch)
    advantages = {(tree.tree_id, t.traj_id): scalars[tree.tree_id] for tree in batch.trees for t in tree.trajectories}
    return StrategyResult(advantages, _count(statuses, "groups"))


def root_only(batch: CreditBatch) -> StrategyResult:
    """GRPO over root rewards; only root trajectories are trained (descendants get None)."""
    scalars, statuses = _root_scalars(batch)
    advantages: dict[TrajKey, float | None] = {}
    for tree in batch.trees:
        for t in tree.trajectories:
            advantages[(tree.tree_id, t.traj_id)] = scalars[tree.tree_id] if t.parent_id is None else None
    return StrategyResult(advantages, _count(statuses, "groups"))


def role_normalized(batch: CreditBatch) -> StrategyResult:
    """Dr. MAS: within each group, normalise separately over each role's trajectories.

    Every trajectory is scored by its tree's root reward, so a tree with three workers contributes
    its reward three times to the worker statistics of its group.
    """
    advantages: dict[TrajKey, float | None] = {}
    statuses: list[GroupStatus] = []
    for trees in batch.groups().values():
        by_role: dict[str, list[tuple[TrajKey, float]]] = {}
        for tree in trees:
            for t in tree.trajectories:
                by_role.setdefault(t.role, []).append(((tree.tree_id, t.traj_id), batch.rewards[tree.tree_id]))
        for members in by_role.values():
            norm = _normalise([r for _, r in members], batch.plan)
            statuses.append(norm.status)
            advantages.update({key: v for (key, _), v in zip(members, norm.values, strict=True)})
    metrics = _count(statuses, "role_groups")
    metrics[f"{_PREFIX}groups"] = float(len(batch.groups()))
    return StrategyResult(advantages, metrics)


BUILTIN_STRATEGIES: dict[str, CreditStrategy] = CREDIT_STRATEGIES.implemented_by({
    "broadcast": broadcast,
    "root_only": root_only,
    "role_normalized": role_normalized,
})

_CUSTOM_HINT = (
    "use one of: {names}; or a custom strategy as 'package.module:function' taking a CreditBatch and "
    "returning a StrategyResult or a mapping {{(tree_id, traj_id): advantage or None}}"
)


def resolve_strategy(name: str, *, trust: TrustPolicy | None = None) -> CreditStrategy:
    """A built-in strategy by name, or a custom one imported from ``'package.module:function'``.

    Args:
        name: a built-in name or a code reference.
        trust: the user's policy; custom code is imported only when it trusts it (by default the
            active policy, :func:`matpo_graph.core.trust.active_trust`).

    Raises:
        CreditError: naming what failed (format, trust, import, attribute, not callable) and how to fix it.
    """
    if name in BUILTIN_STRATEGIES:
        return BUILTIN_STRATEGIES[name]
    hint = _CUSTOM_HINT.format(names=", ".join(BUILTIN_STRATEGIES))
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr or not attr.isidentifier():
        raise CreditError(f"unknown credit strategy {name!r}: {hint}")
    problem = (trust if trust is not None else active_trust()).code_problem(name)
    if problem:
        raise CreditError(f"credit strategy: {problem}") from UntrustedCodeError(problem)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CreditError(
            f"credit strategy {name!r}: cannot import module {module_name!r} ({exc}); "
            "is it installed or on PYTHONPATH?"
        ) from exc
    except Exception as exc:  # the user's module failed while importing
        raise CreditError(
            f"credit strategy {name!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    fn = getattr(module, attr, None)
    if fn is None:
        public = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise CreditError(
            f"credit strategy {name!r}: module {module_name!r} has no attribute {attr!r}; "
            f"its public callables are: {', '.join(public) or '(none)'}"
        )
    if not callable(fn):
        raise CreditError(f"credit strategy {name!r}: {attr!r} is a {type(fn).__name__}, not a function; {hint}")
    return fn


def _collect_rewards(trees: Sequence[RolloutTree], rewards: Mapping[str, float] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    missing: list[str] = []
    for tree in trees:
        if tree.tree_id in out:
            raise CreditError(f"tree id {tree.tree_id!r} appears twice in the batch; tree ids must be unique")
        if rewards is not None and tree.tree_id in rewards:
            value = float(rewards[tree.tree_id])
        elif rewards is None and tree.reward is not None:
            value = float(tree.reward.total)
        else:
            missing.append(tree.tree_id)
            continue
        if not math.isfinite(value):
            raise CreditError(f"tree {tree.tree_id!r}: reward must be finite, got {value!r}")
        out[tree.tree_id] = value
    if missing:
        shown = ", ".join(map(repr, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise CreditError(
            f"{len(missing)} tree(s) have no reward ({shown}); score them first with "
            "matpo_graph.core.reward.score_tree (or the judge) or pass rewards={tree_id: value}"
        )
    return out


def _checked_advantages(
    result: object, batch: CreditBatch, name: str
) -> tuple[dict[TrajKey, float | None], dict[str, float]]:
    """Normalise a strategy's return value and check it covers every trajectory with finite values."""
    if isinstance(result, StrategyResult):
        advantages, metrics = dict(result.advantages), dict(result.metrics)
    elif isinstance(result, Mapping):
        advantages, metrics = dict(result), {}
    else:
        raise CreditError(
            f"credit strategy {name!r} returned {type(result).__name__}; expected a StrategyResult or a mapping "
            "{(tree_id, traj_id): advantage or None}"
        )
    expected = set(batch.keys())
    got = set(advantages)
    if got != expected:
        missing, extra = sorted(expected - got)[:5], sorted(got - expected, key=repr)[:5]
        raise CreditError(
            f"credit strategy {name!r} must give one advantage (or None) per trajectory; "
            f"missing {missing}, unknown {extra}"
        )
    for key, value in advantages.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise CreditError(
                f"credit strategy {name!r}: advantage of {key} must be a finite float or None, got {value!r}"
            )
        advantages[key] = float(value)
    return advantages, {(k if k.startswith("matpo/") else _PREFIX + k): float(v) for k, v in metrics.items()}


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return mean, math.sqrt(var)


def _summary(trees: Sequence[RolloutTree], rewards: Mapping[str, float], plan: CreditPlan) -> dict[str, float]:
    trained = [t for tree in trees for t in tree.trajectories if t.advantage is not None]
    roots = [tree.root.advantage for tree in trees if tree.trajectories and tree.root.advantage is not None]
    tokens = sum(t.num_trained_tokens for t in trained)
    token_adv = math.fsum(t.advantage * t.num_trained_tokens for t in trained)  # type: ignore[operator]
    sizes: dict[str, int] = {}
    for tree in trees:
        sizes[tree.group_id] = sizes.get(tree.group_id, 0) + 1
    adv_mean, adv_std = _mean_std([t.advantage for t in trained])  # type: ignore[misc]
    root_mean, root_std = _mean_std(roots)  # type: ignore[arg-type]
    reward_mean, reward_std = _mean_std(list(rewards.values()))
    return {
        f"{_PREFIX}trees": float(len(trees)),
        f"{_PREFIX}trajectories": float(sum(len(tree.trajectories) for tree in trees)),
        f"{_PREFIX}trained_trajectories": float(len(trained)),
        f"{_PREFIX}trained_tokens": float(tokens),
        f"{_PREFIX}groups_incomplete": float(sum(n != plan.group_size for n in sizes.values())),
        f"{_PREFIX}adv_mean": adv_mean,
        f"{_PREFIX}adv_std": adv_std,
        f"{_PREFIX}root_adv_mean": root_mean,
        f"{_PREFIX}root_adv_std": root_std,
        f"{_PREFIX}token_adv_mean": token_adv / tokens if tokens else 0.0,
        f"{_PREFIX}reward_mean": reward_mean,
        f"{_PREFIX}reward_std": reward_std,
    }


def assign_credit(
    trees: Sequence[RolloutTree],
    plan: CreditPlan,
    *,
    rewards: Mapping[str, float] | None = None,
    strategy: str | CreditStrategy | None = None,
    warn: bool = True,
    trust: TrustPolicy | None = None,
) -> tuple[list[RolloutTree], dict[str, float]]:
    """Set ``Trajectory.advantage`` on every trajectory of every tree.

    Args:
        trees: the batch: every root rollout of every question of one RL step; tree ids are unique.
        plan: the credit plan (strategy, normalisation, epsilon, single-member rule, trained roles).
        rewards: tree_id -> root reward; by default each tree's ``reward.total``.
        strategy: overrides ``plan.strategy`` (a name, ``'module:function'`` or a callable). A name
            given here is the caller's own choice and runs without a trust check; ``plan.strategy``
            (which a graph sets) runs only when `trust` allows it.
        warn: emit a :class:`CreditWarning` when some groups were degenerate.
        trust: the policy a custom strategy named by a string is checked against (default: the active one).

    Returns:
        New trees, in input order, with advantages set (None: left out of the loss; roles outside
        ``plan.trained_roles`` always get None), and metrics namespaced ``matpo/credit/...``.
        The inputs are not modified; token lists are shared with them and must be treated as read-only.

    Raises:
        CreditError: duplicate tree ids, missing or non-finite rewards, an unknown or failing
            strategy, or a strategy result that does not cover every trajectory with finite values.
    """
    trees = tuple(trees)
    batch = CreditBatch(trees=trees, rewards=_collect_rewards(trees, rewards), plan=plan)
    spec = plan.strategy if strategy is None else strategy
    policy = trust if trust is not None else active_trust()
    if isinstance(strategy, str):  # named by the caller (code or command line), not by a graph: their choice
        policy = policy.merged(TrustPolicy(trusted_code=(strategy,)))
    fn = resolve_strategy(spec, trust=policy) if isinstance(spec, str) else spec
    name = spec if isinstance(spec, str) else getattr(spec, "__qualname__", repr(spec))
    advantages, metrics = _checked_advantages(fn(batch), batch, name)
    trained_roles = set(plan.trained_roles)
    out: list[RolloutTree] = []
    for tree in trees:
        trajectories = []
        for t in tree.trajectories:
            advantage = advantages[(tree.tree_id, t.traj_id)] if t.role in trained_roles else None
            trajectories.append(t.model_copy(update={"advantage": advantage}))
        out.append(tree.model_copy(update={"trajectories": trajectories}))
    metrics.update(_summary(out, batch.rewards, plan))
    degenerate = metrics.get(f"{_PREFIX}degenerate_zero_var", 0.0) + metrics.get(f"{_PREFIX}degenerate_single", 0.0)
    if warn and degenerate:
        warnings.warn(
            "some GRPO groups were degenerate (equal rewards, or a single member) and carry no learning signal; "
            "they got zero advantage (a single member keeps its score with single_member='passthrough'); "
            "see the matpo/credit/degenerate_* metrics",
            CreditWarning,
            stacklevel=2,
        )
    return out, metrics


def token_advantages(traj: Trajectory) -> list[float]:
    """Per-token advantages: the trajectory's scalar on its own trained tokens, exactly 0.0 elsewhere."""
    a = traj.advantage
    if a is None:
        return [0.0] * len(traj.token_ids)
    return [a if m else 0.0 for m in traj.loss_mask]
