"""The `eval` verb: read the flags, run :func:`~matpo_graph.evaluation.evaluate.run_evaluation`, print the table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from matpo_graph.cli.overrides import OverrideError, override_values
from matpo_graph.core.rollout import write_trees
from matpo_graph.evaluation.evaluate import run_evaluation, run_folder_model
from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.run_folder import ExportError

__all__ = ["evaluate_command"]


def evaluate_command(args: argparse.Namespace) -> int:
    """`matpo-graph eval`: settings from the run folder and the flags, the evaluation, a table and one JSON line."""
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
        try:
            model_dir, weights = run_folder_model(target, cfg, getattr(args, "step", None))
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
