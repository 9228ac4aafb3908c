"""Per-step statistics of a batch of scored rollout trees (no torch, no I/O)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from matpo_graph.core.rollout import RolloutTree

__all__ = ["accuracy_signal_groups", "group_variance_share", "rollout_metrics"]


def _mean(xs: Sequence[float]) -> float:
    return float(statistics.fmean(xs)) if xs else 0.0


def _groups(trees: Sequence[RolloutTree], field: str) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trees:
        if t.reward is not None:
            groups[t.group_id].append(float(getattr(t.reward, field)))
    return groups


def _varied(groups: dict[str, list[float]]) -> int:
    return sum(1 for rs in groups.values() if len(rs) > 1 and max(rs) - min(rs) > 1e-12)


def group_variance_share(trees: Sequence[RolloutTree]) -> float:
    """Share of groups whose root rewards are not all equal (the groups GRPO can learn from)."""
    groups = _groups(trees, "total")
    return _varied(groups) / len(groups) if groups else 0.0


def accuracy_signal_groups(trees: Sequence[RolloutTree]) -> int:
    """Groups whose roots differ in accuracy: right against wrong, not only a format score apart. A group whose
    rewards differ by the format term alone still gets advantages of full size under std normalisation."""
    return _varied(_groups(trees, "accuracy"))


def rollout_metrics(trees: Sequence[RolloutTree], *, prefix: str = "") -> dict[str, float]:
    """Reward, structure, token and tool statistics of a batch of trees."""
    rewards = [t.reward.total for t in trees if t.reward is not None]
    acc = [t.reward.accuracy for t in trees if t.reward is not None]
    fmt = [t.reward.format for t in trees if t.reward is not None]
    answered = [1.0 if (t.reward is not None and t.reward.answer is not None) else 0.0 for t in trees]
    fallbacks = sum(1 for t in trees if t.reward is not None and t.reward.judge_fallback)
    n_desc = sum(len(t.descendants) for t in trees)
    subtasks = [sum(1 for c in t.root.calls if c.kind == "child") for t in trees if t.trajectories]
    tokens_by_role: dict[str, int] = defaultdict(int)
    trained_by_role: dict[str, int] = defaultdict(int)
    max_ctx_by_role: dict[str, int] = defaultdict(int)
    tool_calls = tool_errors = invalid_calls = all_calls = 0
    terminations: dict[str, int] = defaultdict(int)
    for t in trees:
        for traj in t.trajectories:
            tokens_by_role[traj.role] += len(traj.token_ids)
            trained_by_role[traj.role] += traj.num_trained_tokens
            max_ctx_by_role[traj.role] = max(max_ctx_by_role[traj.role], len(traj.token_ids))
            terminations[traj.termination] += 1
            for c in traj.calls:
                all_calls += 1
                if not c.valid:
                    invalid_calls += 1
                if c.kind == "tool" and c.valid:
                    tool_calls += 1
                    if c.error:
                        tool_errors += 1
    out: dict[str, float] = {
        "reward_mean": _mean(rewards),
        "reward_std": float(statistics.pstdev(rewards)) if len(rewards) > 1 else 0.0,
        "accuracy": _mean(acc),
        "format_score": _mean(fmt),
        "answered": _mean(answered),
        "judge_fallbacks": float(fallbacks),
        "trajectories_root": float(len(trees)),
        "trajectories_descendant": float(n_desc),
        "subtasks_per_root": _mean([float(s) for s in subtasks]),
        "tool_calls": float(tool_calls),
        "tool_error_rate": tool_errors / tool_calls if tool_calls else 0.0,
        "invalid_call_rate": invalid_calls / all_calls if all_calls else 0.0,
        "valid_calls": float(all_calls - invalid_calls),
        "group_variance_share": group_variance_share(trees),
        "groups": float(len(_groups(trees, "total"))),
        "groups_with_accuracy_signal": float(accuracy_signal_groups(trees)),
        "truncated": float(sum(1 for t in trees if t.truncated is not None)),
    }
    for role, n in sorted(tokens_by_role.items()):
        out[f"tokens/{role}"] = float(n)
        out[f"trained_tokens/{role}"] = float(trained_by_role[role])
        out[f"max_context/{role}"] = float(max_ctx_by_role[role])
    for term, n in sorted(terminations.items()):
        out[f"termination/{term}"] = float(n)
    return {f"{prefix}{k}": v for k, v in out.items()}
