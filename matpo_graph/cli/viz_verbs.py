"""`matpo-graph viz` (a picture of a graph) and `matpo-graph show` (a page to browse rollout trees)."""

from __future__ import annotations

import argparse
from pathlib import Path

from matpo_graph.cli.output import EXIT_USAGE, fail

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    viz = subparsers.add_parser(
        "viz",
        help="draw a graph: roles, tools and delegation edges",
        description="Draw a graph file (or a compiled folder) as .html (self-contained), .svg, .png or .mmd (mermaid).",
    )
    viz.add_argument("graph", type=Path, metavar="GRAPH", help="graph YAML file or compiled folder")
    viz.add_argument("-o", "--out", "--output", dest="output", type=Path, required=True, metavar="FILE", help="output file: .html, .svg, .png or .mmd")
    viz.set_defaults(func=_viz)

    show = subparsers.add_parser(
        "show",
        help="build an HTML page to browse rollout trees and their credit",
        description=(
            "Build one self-contained HTML page from a run folder (RUN_DIR/rollouts/step_XXXXXX.jsonl, "
            "metrics.jsonl, plots/*.png) or a rollout JSONL file: groups, rewards, advantages, trees, masks."
        ),
    )
    show.add_argument("source", type=Path, metavar="RUN_DIR_OR_JSONL")
    show.add_argument("--step", type=int, default=None, help="step of a run folder (default: the latest with rollouts)")
    show.add_argument("--graph", type=Path, default=None,
                      help="graph YAML or compiled folder whose credit plan computes advantages missing from the file")
    show.add_argument("-o", "--out", "--output", dest="output", type=Path, default=None, metavar="OUT.html",
                      help="page to write (default: next to the source, named after the step)")
    show.set_defaults(func=_show)


def _viz(args: argparse.Namespace) -> int:
    from matpo_graph.core.errors import GraphError
    from matpo_graph.viz.graph_load import load_view
    from matpo_graph.viz.graph_render import GRAPH_FORMATS, write_graph_picture

    if args.output.suffix.lower() not in GRAPH_FORMATS:
        return fail(f"error: {args.output}: the output must end in one of {', '.join(GRAPH_FORMATS)}", EXIT_USAGE)
    try:
        view = load_view(args.graph)
    except FileNotFoundError as exc:
        return fail(f"error: {exc}", EXIT_USAGE)
    except GraphError as exc:  # its messages name the file and line already
        return fail(f"error: {exc}")
    except ValueError as exc:  # a compiled folder that cannot be read
        return fail(f"error: {args.graph}: {exc}", EXIT_USAGE)
    out = write_graph_picture(view, args.output)
    print(f"wrote {out}")
    return 0


def _default_output(source: Path, step: int | None) -> Path:
    if source.is_dir():
        return source / (f"show_step_{step:06d}.html" if step is not None else "show.html")
    return source.with_suffix(".html")


def _show(args: argparse.Namespace) -> int:
    from matpo_graph.core.errors import GraphError
    from matpo_graph.viz.show_data import ShowInputError, collect_show_data
    from matpo_graph.viz.show_page import write_show_page

    if args.output is not None and args.output.suffix.lower() not in (".html", ".htm"):
        return fail(f"error: {args.output}: the page must end in .html", EXIT_USAGE)
    try:
        data = collect_show_data(args.source, step=args.step, graph=args.graph)
    except ShowInputError as exc:
        return fail(f"error: {exc}", EXIT_USAGE)
    except GraphError as exc:  # --graph missing (not run as asked) or invalid
        return fail(f"error: {exc}", EXIT_USAGE if args.graph is not None and not Path(args.graph).exists() else 1)
    except ValueError as exc:  # a rollout file that is not trees
        return fail(f"error: {exc}", EXIT_USAGE)
    out = write_show_page(data, args.output or _default_output(args.source, data.summary["step"]))
    s = data.summary
    print(f"wrote {out}: {len(s['trees'])} trees in {len(s['groups'])} groups; credit: {s['credit']['note']}")
    return 0
