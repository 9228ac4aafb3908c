"""`matpo-graph eval`: greedy and sampled accuracy of a run's latest weights (or a model) on a QA file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from matpo_graph.core.rollout import write_trees
from matpo_graph.train.config import TrainConfig
from matpo_graph.train.rollout_metrics import rollout_metrics

__all__ = ["evaluate_cli", "run_evaluation"]


def _run_folder_model(run_dir: Path, cfg: TrainConfig, step: int | None = None) -> tuple[Path, Any]:
    """(engine start folder, what to serve) for a run folder: a checkpoint's weights with LoRA merged (a state
    dict), None (the start folder itself), or, for a graph with several policies, a
    :class:`~matpo_graph.train.policy_export.PerRolePolicies` that serves each of them.

    `step` None takes the latest checkpoint, 0 the model RL started from (its warm-up), N the checkpoint of step N.
    """
    from matpo_graph.train.export import checkpoint_base, merged_state_dict
    from matpo_graph.train.policy_export import PerRolePolicies, run_policies

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
    from matpo_graph.train.session import RolloutSession

    with RolloutSession(program, cfg, model_dir=model_dir, plan=plan) as session:
        if hasattr(weights, "serve"):
            weights.serve(session)
        elif weights is not None:
            if isinstance(weights, Path):
                from safetensors.torch import load_file

                weights = load_file(str(weights))
            session.load_weights(weights)
        items = session.eval_questions()[:n]
        greedy = session.score(session.rollout_groups(items, group_size=1, step=0, temperature=0.0, tag="eg",
                                                      label="eval greedy"), plan)
        sampled = session.score(session.rollout_groups(items, group_size=samples, step=0, tag="es",
                                                       label="eval sampled"), plan) if samples else []
    metrics: dict[str, float] = {"questions": float(len(items))}
    for name, trees in (("greedy", greedy), ("sampled", sampled)):
        if trees:
            m = rollout_metrics(trees)
            for key in ("accuracy", "reward_mean", "format_score", "answered", "invalid_call_rate", "subtasks_per_root"):
                metrics[f"{name}/{key}"] = m[key]
    return metrics, greedy + sampled


def evaluate_cli(args: argparse.Namespace) -> int:
    from matpo_graph.compilers.local import load_program
    from matpo_graph.runtime.models import resolve_model

    target = Path(args.target)
    is_run = (target / "train_config.json").exists()
    values: dict[str, Any] = json.loads((target / "train_config.json").read_text()) if is_run else {}
    if args.data:
        values["eval_data"] = args.data
    if getattr(args, "columns", None):
        from matpo_graph.data.qa import parse_columns

        values["data_columns"] = parse_columns(args.columns)
    values["tool_cache"] = args.tool_cache
    if args.cache_dir:
        values["tool_cache_dir"] = str(args.cache_dir)
    elif is_run:
        values["tool_cache_dir"] = str(target / "tool_cache")
    values["policy"] = args.policy
    if getattr(args, "temperature", None) is not None:
        values["temperature"] = args.temperature
    from matpo_graph.cli.overrides import OverrideError, override_values

    try:
        values.update(override_values(getattr(args, "overrides", []) or [], known=TrainConfig.model_fields))
        cfg = TrainConfig.model_validate(values)
    except (OverrideError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    graph_src = Path(args.graph) if args.graph else (target if is_run else None)
    if graph_src is None:
        print("error: --graph is needed when evaluating a model rather than a run folder", file=sys.stderr)
        return 2
    program, plan = load_program(graph_src)
    if is_run:
        from matpo_graph.train.export import ExportError

        try:
            model_dir, weights = _run_folder_model(target, cfg, getattr(args, "step", None))
        except ExportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if hasattr(weights, "serve") and weights.program.policies != program.policies:
            print(f"error: {target} trains the policies of its own graph; --graph {args.graph} declares other ones "
                  "(evaluate with the run's graph)", file=sys.stderr)
            return 2
    elif getattr(args, "step", None) is not None:
        print("error: --step needs a run folder", file=sys.stderr)
        return 2
    else:
        model_dir, weights = resolve_model(args.target), None
    metrics, trees = run_evaluation(program, plan, cfg, model_dir=model_dir, weights=weights, n=args.n, samples=args.samples)
    if args.output:
        write_trees(args.output, trees)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"evaluation of {target}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in metrics.items():
        table.add_row(k, f"{v:.4f}")
    Console().print(table)
    print(json.dumps(metrics, sort_keys=True))
    return 0
