"""A scored rollout tree -> veRL ``AgentLoopOutput`` rows: descendants first, the root LAST.

veRL's V1 trainer reads the reward of the last output of a session, copies it to the others, runs GRPO
over the last rows of a question's sessions and broadcasts each result times every row's own response
mask: MATPO's credit rule, provided the root is last and has trained tokens. Each row is one
trajectory, split into veRL's prompt (the context before the first generation, at most
``prompt_length`` tokens) and response (everything after, mask 1 exactly on sampled tokens, sampling
logprobs there). A response longer than ``response_length`` loses only untrained tail tokens; a
trained token is never dropped: that is an error naming the trajectory and the length it needs (the
compiled bundle sets the response length to the whole context budget, so it does not happen there).
Token ids are the executor's, never re-tokenised.

Rows that could not take part in the loss are left out: trajectories of untrained roles and
descendants without a trained token (a worker whose policy call failed). Leaving them out changes
no loss term and no advantage.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

from matpo_graph.core.rollout import RewardBreakdown, RolloutTree, Trajectory
from matpo_graph.verl_target.policy import GenerationStats
from matpo_graph.verl_target.reward import LOOP_REWARD_KEY

__all__ = ["RowSplit", "TrainedTokensCut", "split_trajectory", "tree_outputs"]


@dataclass(frozen=True)
class RowSplit:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    truncated: int  # untrained response tokens cut off at response_length


class TrainedTokensCut(ValueError):
    """A trajectory's response does not fit veRL's response length without dropping trained tokens."""


def split_trajectory(traj: Trajectory, *, prompt_length: int, response_length: int, trained: bool = True) -> RowSplit:
    """Cut one trajectory into veRL's prompt and response parts.

    A prompt longer than ``prompt_length`` keeps its head in the prompt and the rest in the response
    with mask 0; the response always holds at least one token (veRL writes the reward on its last one).

    Raises:
        TrainedTokensCut: the response is longer than ``response_length`` and the part past it holds
            trained tokens (they would silently leave the loss, typically the final answer).
    """
    ids, mask, lps = traj.token_ids, traj.loss_mask, traj.logprobs
    if len(ids) < 2:
        raise ValueError(f"trajectory {traj.traj_id!r} has {len(ids)} tokens; a prompt and a response need at least 2")
    split = max(1, min(traj.prompt_length, prompt_length, len(ids) - 1))
    resp_ids, resp_mask, resp_lps = ids[split:], mask[split:], lps[split:]
    if not trained:
        resp_mask = [0] * len(resp_mask)
    cut = max(0, len(resp_ids) - response_length)
    if cut:
        lost = sum(1 for m in resp_mask[response_length:] if m)
        if lost:
            raise TrainedTokensCut(
                f"trajectory {traj.traj_id!r} (role {traj.role!r}) has a {len(resp_ids)}-token response but veRL's "
                f"response length is {response_length}: {lost} trained tokens would be dropped; set "
                f"data.max_response_length >= {len(resp_ids)} (the graph's limits.context_tokens is always enough)"
            )
        resp_ids, resp_mask, resp_lps = resp_ids[:response_length], resp_mask[:response_length], resp_lps[:response_length]
    logprobs = [float(lp) if m else 0.0 for lp, m in zip(resp_lps, resp_mask, strict=True)]
    return RowSplit(list(ids[:split]), list(resp_ids), [int(m) for m in resp_mask], logprobs, cut)


def _reward_info(breakdown: RewardBreakdown) -> dict[str, Any]:
    return {
        "acc": float(breakdown.accuracy),
        "format": float(breakdown.format),
        "answered": breakdown.answer is not None,
        "judge_fallback": bool(breakdown.judge_fallback),
    }


def tree_outputs(
    tree: RolloutTree,
    breakdown: RewardBreakdown,
    *,
    prompt_length: int,
    response_length: int,
    trained_roles: Collection[str],
    stats: GenerationStats | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[AgentLoopOutput]:
    """veRL outputs for one scored tree, descendants in creation order, then the root.

    Args:
        tree: the executor's tree (root first); format scores are read from its trajectories.
        breakdown: the tree's reward; its total is every row's ``reward_score``.
        prompt_length, response_length: veRL's ``rollout.prompt_length`` / ``response_length``.
        trained_roles: roles whose tokens enter the loss (the credit plan's ``trained_roles``).
        stats: generation times per trajectory (for veRL's metrics and staleness tags).
        extra: more entries for every row's ``extra_fields``.

    Raises:
        ValueError: the tree has no trajectories, or a trajectory is too short to split.
    """
    if not tree.trajectories:
        raise ValueError(f"tree {tree.tree_id!r} has no trajectories")
    stats = stats or GenerationStats()
    info = _reward_info(breakdown)
    loop_reward = {"score": float(breakdown.total), "acc": info["acc"], "format": info["format"]}
    ordered = list(tree.descendants) + [tree.root]
    outputs: list[AgentLoopOutput] = []
    for traj in ordered:
        is_root = traj is tree.root
        row = split_trajectory(
            traj, prompt_length=prompt_length, response_length=response_length, trained=traj.role in trained_roles
        )
        if not is_root and not any(row.response_mask):
            continue
        tool_seconds = sum(c.seconds for t in traj.turns for c in t.calls if c.kind == "tool")
        fields: dict[str, Any] = {
            "matpo_tree_id": tree.tree_id,
            "matpo_traj_id": traj.traj_id,
            "matpo_parent": traj.parent_id or "",
            "matpo_role": traj.role,
            "matpo_depth": traj.depth,
            "matpo_is_root": is_root,
            "matpo_termination": traj.termination,
            "matpo_format_score": traj.format_score,
            "matpo_truncated_tokens": row.truncated,
            "matpo_num_calls": sum(len(t.calls) for t in traj.turns),
            "reward_extra_info": dict(info),
            "turn_scores": [],
            "tool_rewards": [],
            "min_global_steps": stats.min_global_steps,
            "max_global_steps": stats.max_global_steps,
            **dict(extra or {}),
        }
        if is_root:
            fields[LOOP_REWARD_KEY] = loop_reward
        outputs.append(
            AgentLoopOutput(
                prompt_ids=row.prompt_ids,
                response_ids=row.response_ids,
                response_mask=row.response_mask,
                response_logprobs=row.response_logprobs,
                reward_score=float(breakdown.total),
                num_turns=len(traj.messages),
                metrics=AgentLoopMetrics(
                    generate_sequences=stats.seconds.get(traj.traj_id, 0.0),
                    tool_calls=tool_seconds,
                    num_preempted=stats.num_preempted,
                ),
                extra_fields=fields,
            )
        )
    return outputs
