"""The `credit` verb: show, per tree and per trajectory, the reward and the advantage credit gives it.

Rewards and advantages missing from the file are computed with the plan (``--plan`` JSON, or a
graph / compiled folder with ``--graph``, else the DSL defaults); ``--recompute`` redoes both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from matpo_graph.cli.output import EXIT_USAGE, fail

__all__ = ["register"]


def _load_plan(args: argparse.Namespace, trees: list[Any]) -> Any:
    from matpo_graph.core.program import CreditPlan

    if args.plan:
        return CreditPlan.model_validate_json(Path(args.plan).read_text(encoding="utf-8"))
    if args.graph:
        from matpo_graph.compilers.local import load_program

        return load_program(args.graph)[1]
    from matpo_graph.testing.shapes import GraphShape, make_plan

    roles = sorted({t.role for tree in trees for t in tree.trajectories})
    root = next((tree.root.role for tree in trees if tree.trajectories), "root")
    shape = GraphShape(root=root, roles=tuple(sorted(set(roles) | {root})), edges={}, tools={}, max_depth=16)
    print("note: no --plan or --graph given; using the DSL's default reward and credit settings", file=sys.stderr)
    return make_plan(shape, calling_roles=None)


def _score(trees: list[Any], plan: Any, *, recompute: bool, use_judge: bool) -> list[Any]:
    from matpo_graph.core.reward import score_tree, with_reward

    todo = [i for i, tree in enumerate(trees) if recompute or tree.reward is None]
    if not todo:
        return trees
    if use_judge and plan.accuracy_scorer == "judge":
        from matpo_graph.judge import score_trees_judged

        breakdowns = asyncio.run(score_trees_judged([trees[i] for i in todo], plan))
    else:
        breakdowns = [score_tree(trees[i], plan) for i in todo]
    out = list(trees)
    for i, b in zip(todo, breakdowns, strict=True):
        out[i] = with_reward(trees[i], b)
    return out


def _rows(trees: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for tree in trees:
        for t in tree.trajectories:
            calls = t.calls
            rows.append(
                {
                    "tree": tree.tree_id,
                    "group": tree.group_id,
                    "traj": t.traj_id,
                    "role": t.role,
                    "depth": t.depth,
                    "reward": tree.reward.total if (tree.reward is not None and t.parent_id is None) else None,
                    "accuracy": tree.reward.accuracy if (tree.reward is not None and t.parent_id is None) else None,
                    "format": t.format_score,
                    "advantage": t.advantage,
                    "trained_tokens": t.num_trained_tokens,
                    "calls_valid": sum(c.valid for c in calls),
                    "calls": len(calls),
                }
            )
    return rows


def _print_table(rows: list[dict[str, Any]], metrics: dict[str, float]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="credit per trajectory", show_lines=False)
    for name, justify in [
        ("tree", "left"), ("traj", "left"), ("role", "left"), ("depth", "right"), ("reward", "right"),
        ("acc", "right"), ("fmt", "right"), ("advantage", "right"), ("trained tok", "right"), ("calls ok", "right"),
    ]:  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    last_tree = None
    for row in rows:
        new_tree = row["tree"] != last_tree
        if new_tree and last_tree is not None:
            table.add_section()
        last_tree = row["tree"]
        indent = "  " * row["depth"]
        table.add_row(
            row["tree"] if new_tree else "",
            indent + row["traj"],
            indent + row["role"],
            str(row["depth"]),
            "" if row["reward"] is None else f"{row['reward']:.4f}",
            "" if row["accuracy"] is None else f"{row['accuracy']:.2f}",
            "-" if row["format"] is None else f"{row['format']:.2f}",
            "excluded" if row["advantage"] is None else f"{row['advantage']:+.4f}",
            str(row["trained_tokens"]),
            f"{row['calls_valid']}/{row['calls']}",
        )
    console = Console(width=None if sys.stdout.isatty() else 160)  # pipes and files get the whole table
    console.print(table)
    if metrics:
        summary = Table(title="credit metrics", show_header=False)
        summary.add_column("metric")
        summary.add_column("value", justify="right")
        for key, value in sorted(metrics.items()):
            summary.add_row(key, f"{value:.6g}")
        console.print(summary)


def _cmd_credit(args: argparse.Namespace) -> int:
    from matpo_graph.core.credit import CreditError, assign_credit
    from matpo_graph.core.rollout import read_trees, write_trees

    try:
        trees = read_trees(args.trees)
    except (OSError, ValueError) as exc:
        return fail(f"error: cannot read rollout trees from {args.trees}: {exc}", EXIT_USAGE)
    try:
        plan = _load_plan(args, trees)
    except Exception as exc:  # GraphError, validation errors, missing files: all reported the same way
        return fail(f"error: cannot load the credit plan: {exc}", EXIT_USAGE)
    if args.strategy:
        plan = plan.model_copy(update={"strategy": args.strategy})
    if ":" in plan.strategy and "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # custom strategies may live next to the user's files
    recompute_credit = args.recompute or bool(args.strategy)
    trees = _score(trees, plan, recompute=args.recompute, use_judge=args.judge)
    metrics: dict[str, float] = {}
    has_credit = any(t.advantage is not None for tree in trees for t in tree.trajectories)
    if recompute_credit or not has_credit:
        try:
            trees, metrics = assign_credit(trees, plan, warn=False, strategy=args.strategy or None)  # typed by the user
        except CreditError as exc:
            return fail(f"error: {exc}", EXIT_USAGE)
    rows = _rows(trees)
    if args.json:
        print(json.dumps({"rows": rows, "metrics": metrics}, indent=2))
    else:
        _print_table(rows, metrics)
    if args.output:
        write_trees(args.output, trees)
        print(f"wrote {len(trees)} trees with rewards and advantages to {args.output}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add `credit` to the `matpo-graph` parser."""
    p = subparsers.add_parser(
        "credit",
        help="show rewards and advantages of rollout trees",
        description="Print, per tree and per trajectory: role, depth, reward, advantage and trained-token count.\n"
        "Rewards and advantages missing from TREES are computed with the credit plan.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trees", metavar="TREES.jsonl", help="rollout trees (JSON lines)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--plan", metavar="PLAN.json", help="a compiled credit_plan.json")
    source.add_argument("--graph", metavar="G", help="a graph YAML file or a compiled folder")
    p.add_argument(
        "--strategy",
        help="override the plan's strategy: broadcast, root_only, role_normalized or module:function "
        "(imported from the current directory or PYTHONPATH)",
    )
    p.add_argument("--recompute", action="store_true", help="recompute rewards and advantages even when present")
    p.add_argument(
        "--judge", action="store_true", help="score with the plan's LLM judge (network) instead of its local fallback"
    )
    p.add_argument("--json", action="store_true", help="print JSON rows and metrics instead of tables")
    p.add_argument("-o", "--out", "--output", dest="output", metavar="OUT.jsonl", help="write the trees with rewards and advantages")
    p.set_defaults(func=_cmd_credit)
