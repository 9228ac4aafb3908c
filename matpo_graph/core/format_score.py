"""Format score of a rollout tree: the share of well-formed tool and delegation calls.

Following the MATPO paper, a trajectory's format score is the share of its calls that were well
formed (``CallRecord.valid``: a name this role may call and arguments matching the schema), and a
tree's is ``0.5 * fmt_root + 0.5 * mean(fmt of the descendants)``.

Trajectories that made no call at all need a rule, and this module fixes it deliberately:

- a role that **could** call something (it has tools or outgoing edges; ``plan.calling_roles``)
  but made no call scores ``plan.no_call_score`` (0.0 by default). The reference implementation
  scores such a trajectory 1.0, so a policy that answers without ever searching earns the full
  format bonus while one that tries a tool and slips loses it: the format term then pushes the
  policy away from tool use, the opposite of its purpose.
- a role with **nothing to call** is excluded: it had no chance to be well or badly formed, and
  averaging a constant into the score would only dilute the signal of the roles that do call.
- a tree with no scored descendants has ``fmt = fmt_root`` (single-agent GRPO: the root's share),
  one whose root is excluded has ``fmt = mean(descendants)``, and a tree with nothing scored at all
  has ``fmt = 1.0``: a constant that GRPO's group normalisation removes anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matpo_graph.core.program import CreditPlan
from matpo_graph.core.rollout import RolloutTree, Trajectory

__all__ = ["FormatScore", "can_call", "trajectory_format_score", "tree_format_score"]


@dataclass(frozen=True)
class FormatScore:
    """A tree's format score and the parts it was built from (None marks an excluded part)."""

    value: float
    root: float | None
    descendants: float | None
    per_trajectory: dict[str, float | None] = field(default_factory=dict)


def can_call(role: str, plan: CreditPlan) -> bool:
    """Whether trajectories of `role` had anything to call (every role when the plan does not say)."""
    return plan.calling_roles is None or role in plan.calling_roles


def trajectory_format_score(traj: Trajectory, *, callable_role: bool, no_call_score: float) -> float | None:
    """Share of well-formed calls in one trajectory; None when the role is excluded.

    Args:
        traj: the trajectory.
        callable_role: whether its role had anything to call.
        no_call_score: the score of a trajectory that could call but made no call.

    Returns:
        A value in [0, 1], or None for a trajectory that made no call and could not have made one.
    """
    calls = traj.calls
    if calls:
        return sum(1 for c in calls if c.valid) / len(calls)
    return no_call_score if callable_role else None


def tree_format_score(tree: RolloutTree, plan: CreditPlan) -> FormatScore:
    """``0.5 * fmt_root + 0.5 * mean(fmt of descendants)`` with the zero-call rules of this module."""
    per: dict[str, float | None] = {
        t.traj_id: trajectory_format_score(t, callable_role=can_call(t.role, plan), no_call_score=plan.no_call_score)
        for t in tree.trajectories
    }
    if not tree.trajectories:
        return FormatScore(value=1.0, root=None, descendants=None, per_trajectory=per)
    root = per[tree.root.traj_id]
    desc_scores = [s for t in tree.descendants if (s := per[t.traj_id]) is not None]
    desc = sum(desc_scores) / len(desc_scores) if desc_scores else None
    if root is not None and desc is not None:
        value = 0.5 * root + 0.5 * desc
    elif root is not None:
        value = root
    elif desc is not None:
        value = desc
    else:
        value = 1.0
    return FormatScore(value=value, root=root, descendants=desc, per_trajectory=per)
