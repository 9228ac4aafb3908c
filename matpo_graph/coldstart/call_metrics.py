"""Cold-start statistics of scored rollout trees: does the policy call tools, answer in format, and learn?

Per role (``<stat>/<role>``):

- ``first_reply_valid_call``: share of trajectories whose first reply holds at least one well-formed call.
  Every role of a tool-using graph must call something first (a planner delegates, a browser searches),
  so this is the plainest "can it use its tools" number.
- ``reply_valid_call``: share of all acting replies (summary and forced-answer turns excluded) that hold
  a well-formed call. A perfect policy stays below 1 here, since its last reply answers without a call.
- ``call_validity``: share of written calls that are well formed.

Over root rollouts: ``answer_in_format`` (the root's answer parses in the graph's format), ``accuracy``,
``reward`` and ``group_variance_share`` (groups whose root rewards are not all equal: the ones GRPO
learns from).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from matpo_graph.core.reward import final_answer
from matpo_graph.core.rollout import RolloutTree

__all__ = ["call_metrics"]


def _share(hits: int, total: int) -> float:
    return hits / total if total else 0.0


def call_metrics(trees: Sequence[RolloutTree], *, answer_format: str) -> dict[str, float]:
    """The statistics listed in the module docstring; trees need rewards for the reward-based ones."""
    first: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    replies: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    calls: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for tree in trees:
        for traj in tree.trajectories:
            acting = [t for t in traj.turns if t.purpose == "act"]
            if acting:
                first[traj.role][0] += int(any(c.valid for c in acting[0].calls))
                first[traj.role][1] += 1
            for turn in acting:
                replies[traj.role][0] += int(any(c.valid for c in turn.calls))
                replies[traj.role][1] += 1
                calls[traj.role][0] += sum(1 for c in turn.calls if c.valid)
                calls[traj.role][1] += len(turn.calls)
    out: dict[str, float] = {}
    for role in sorted(first):
        out[f"first_reply_valid_call/{role}"] = _share(*first[role])
        out[f"reply_valid_call/{role}"] = _share(*replies[role])
        out[f"call_validity/{role}"] = _share(*calls[role])
        out[f"trajectories/{role}"] = float(first[role][1])
    all_first = [sum(v[i] for v in first.values()) for i in (0, 1)]
    out["first_reply_valid_call"] = _share(*all_first)
    all_calls = [sum(v[i] for v in calls.values()) for i in (0, 1)]
    out["call_validity"] = _share(*all_calls)
    roots = [t for t in trees if t.trajectories]
    out["answer_in_format"] = _share(sum(final_answer(t, answer_format) is not None for t in roots), len(roots))
    scored = [t.reward for t in roots if t.reward is not None]
    out["accuracy"] = sum(r.accuracy for r in scored) / len(scored) if scored else 0.0
    out["reward"] = sum(r.total for r in scored) / len(scored) if scored else 0.0
    groups: dict[str, list[float]] = defaultdict(list)
    for t in roots:
        if t.reward is not None:
            groups[t.group_id].append(t.reward.total)
    varied = sum(1 for rs in groups.values() if len(rs) > 1 and max(rs) - min(rs) > 1e-12)
    out["group_variance_share"] = _share(varied, len(groups))
    out["root_rollouts"] = float(len(roots))
    return out
