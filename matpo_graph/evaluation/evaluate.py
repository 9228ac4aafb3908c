"""Greedy and sampled accuracy of a run's weights (or a model) on held-out questions, through the real engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matpo_graph.rl.config import TrainConfig
from matpo_graph.tracking.rollout_metrics import rollout_metrics

__all__ = ["run_evaluation", "run_folder_model"]


def run_folder_model(run_dir: Path, cfg: TrainConfig, step: int | None = None) -> tuple[Path, Any]:
    """(engine start folder, what to serve) for a run folder: a checkpoint's weights with LoRA merged (a state
    dict), None (the start folder itself), or, for a graph with several policies, a
    :class:`~matpo_graph.rl.policy_export.PerRolePolicies` that serves each of them.

    `step` None takes the latest checkpoint, 0 the model RL started from (its warm-up), N the checkpoint of step N.
    """
    from matpo_graph.rl.export import merged_state_dict
    from matpo_graph.rl.policy_export import PerRolePolicies
    from matpo_graph.rl.run_folder import checkpoint_base, run_policies

    if run_policies(run_dir) is not None:
        return checkpoint_base(run_dir), PerRolePolicies(run_dir, step=step)
    if step == 0:
        return checkpoint_base(run_dir), None
    return checkpoint_base(run_dir), merged_state_dict(run_dir, step=step)


def run_evaluation(
    program: Any, plan: Any, cfg: TrainConfig, *, model_dir: Path, weights: Any, n: int, samples: int,
) -> tuple[dict[str, float], list[Any]]:
    """Evaluate and return (metrics, all evaluated trees). `weights` are served first: a safetensors file or a
    state dict in the model's own names, or anything with ``serve(session)`` (a run's several policies)."""
    from matpo_graph.rl.rollouts import RolloutSession

    with RolloutSession(program, cfg, model_dir=model_dir, plan=plan) as session:
        if hasattr(weights, "serve"):
            weights.serve(session)
        elif weights is not None:
            if isinstance(weights, Path):
                from safetensors.torch import load_file

                weights = load_file(str(weights))
            session.load_weights(weights)
        items = session.eval_questions()[:n]
        # paired: the same seeds as a training run's evaluations, so any two checkpoints compare sample by sample
        greedy = session.score(session.rollout_groups(items, group_size=1, step=0, temperature=0.0, tag="eg",
                                                      label="eval greedy", paired=True), plan)
        sampled = session.score(session.rollout_groups(items, group_size=samples, step=0, tag="es",
                                                       label="eval sampled", paired=True), plan) if samples else []
    metrics: dict[str, float] = {"questions": float(len(items))}
    for name, trees in (("greedy", greedy), ("sampled", sampled)):
        if trees:
            m = rollout_metrics(trees)
            for key in ("accuracy", "reward_mean", "format_score", "answered", "invalid_call_rate", "subtasks_per_root"):
                metrics[f"{name}/{key}"] = m[key]
    return metrics, greedy + sampled
