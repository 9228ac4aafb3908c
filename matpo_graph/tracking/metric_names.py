"""One vocabulary of training metrics, shared with veRL, so curves of both engines overlay in one plot.

The local trainer logs what veRL logs under veRL's names (``actor/pg_loss``, ``actor/pg_clipfrac``,
``actor/ppo_kl``, ``actor/entropy``, ``actor/grad_norm``, ``critic/score/mean``,
``critic/advantages/mean``, ``response_length/mean``, ``timing_s/gen``, ``timing_s/update_actor``,
``timing_s/step``, ...) and everything veRL has no name for under ``matpo/``. :func:`canonical_row`
renames a row written with the names runs used before (``reward_mean``, ``loss``, ``rollout_seconds``,
...), so the report reads old runs too. :func:`verl_batch_metrics` computes veRL's per-batch statistics
from rollout trees the way veRL computes them over its rows: one row per trajectory (a tree's reward
copied to each of its trajectories, as veRL's V1 trainer does), token-level advantage means.

No torch and no I/O here.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from matpo_graph.core.rollout import RolloutTree

__all__ = ["CANONICAL_PREFIXES", "LEGACY_NAMES", "canonical_name", "canonical_row", "verl_batch_metrics"]

# Namespaces that are already canonical: veRL's own, and matpo-graph's.
CANONICAL_PREFIXES: tuple[str, ...] = (
    "actor/", "critic/", "response_length/", "prompt_length/", "timing_s/", "timing_per_token_ms/", "perf/",
    "training/", "val-core/", "val-aux/", "matpo/",
    "policy/",  # per-role policies: policy/<name>/loss, policy/<name>/grad_norm, ...
    # more of veRL's own namespaces, read back from a veRL log unchanged
    "rollout_corr/", "global_seqlen/", "num_turns/", "response/", "response_length_non_aborted/",
)

# Names written by runs before the shared vocabulary -> their name now. Anything else without a
# canonical prefix moves under matpo/ as is (tokens/planner -> matpo/tokens/planner).
LEGACY_NAMES: dict[str, str] = {
    # optimisation (veRL's actor/*)
    "pg_loss": "actor/pg_loss",
    "clip_fraction": "actor/pg_clipfrac",
    "ppo_kl": "actor/ppo_kl",
    "entropy": "actor/entropy",
    "grad_norm": "actor/grad_norm",
    "kl_ref": "actor/kl_loss",
    "loss": "matpo/loss/total",
    "kl": "matpo/loss/approx_kl_k3",
    # timings (veRL's timing_s/*)
    "rollout_seconds": "timing_s/gen",
    "credit_seconds": "timing_s/adv",
    "train_seconds": "timing_s/update_actor",
    "sync_seconds": "timing_s/update_weights",
    "step_seconds": "timing_s/step",
    "eval_seconds": "timing_s/testing",
    "pack_seconds": "matpo/timing_s/pack",
    # rewards of root rollouts (veRL's critic/score/* is per trajectory row: see verl_batch_metrics)
    "reward_mean": "matpo/reward/mean",
    "reward_std": "matpo/reward/std",
    "accuracy": "matpo/reward/accuracy",
    "format_score": "matpo/reward/format",
    "answered": "matpo/reward/answered",
}


def canonical_name(key: str) -> str:
    """The shared-vocabulary name of a metric key (old names map through LEGACY_NAMES)."""
    if key == "step" or key.startswith(CANONICAL_PREFIXES):
        return key
    return LEGACY_NAMES.get(key, "matpo/" + key)


def canonical_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A new row with every key in the shared vocabulary; a canonical key wins over its legacy alias."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = canonical_name(key)
        if name in out and name != key:
            continue  # the row already carries the canonical key itself
        out[name] = value
    return out


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"{prefix}/mean": float(statistics.fmean(values)), f"{prefix}/max": float(max(values)),
            f"{prefix}/min": float(min(values))}


def verl_batch_metrics(trees: Iterable[RolloutTree]) -> dict[str, float]:
    """veRL's batch statistics (critic/score, critic/rewards, critic/advantages, response_length,
    prompt_length) over the step's trajectories, computed as veRL computes them over its rows.

    Each trajectory is a row whose score is its tree's root reward; advantages are averaged over the
    trained tokens of trajectories that have one (token-level, as veRL's masked mean).
    """
    scores: list[float] = []
    responses: list[float] = []
    prompts: list[float] = []
    adv_sum = 0.0
    adv_tokens = 0
    adv_values: list[float] = []
    for tree in trees:
        reward = tree.reward.total if tree.reward is not None else None
        for traj in tree.trajectories:
            if reward is not None:
                scores.append(float(reward))
            responses.append(float(max(0, len(traj.token_ids) - traj.prompt_length)))
            prompts.append(float(traj.prompt_length))
            if traj.advantage is not None:
                n = int(sum(traj.loss_mask))
                if n:
                    adv_sum += traj.advantage * n
                    adv_tokens += n
                    adv_values.append(float(traj.advantage))
    out: dict[str, float] = {}
    out.update(_stats("critic/score", scores))
    out.update(_stats("critic/rewards", scores))  # no KL-in-reward here: rewards equal scores, as in veRL then
    if adv_tokens:
        out["critic/advantages/mean"] = adv_sum / adv_tokens
        out["critic/advantages/max"] = max(adv_values)
        out["critic/advantages/min"] = min(adv_values)
    out.update(_stats("response_length", responses))
    out.update(_stats("prompt_length", prompts))
    return out
