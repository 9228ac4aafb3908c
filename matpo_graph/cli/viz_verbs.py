"""`matpo-graph viz` (a picture of a graph) and `matpo-graph show` (a page to browse rollout trees)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _viz(args: argparse.Namespace) -> int:
    from matpo_graph.core.errors import GraphError
    from matpo_graph.viz.graph_load import load_view
    from matpo_graph.viz.graph_render import GRAPH_FORMATS, write_graph_picture

    if args.output.suffix.lower() not in GRAPH_FORMATS:
        return _fail(f"{args.output}: the output must end in one of {', '.join(GRAPH_FORMATS)}")
    try:
        view = load_view(args.graph)
    except (FileNotFoundError, GraphError) as exc:  # GraphError messages name the file and line already
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(f"{args.graph}: {exc}")
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
        return _fail(f"{args.output}: the page must end in .html")
    try:
        data = collect_show_data(args.source, step=args.step, graph=args.graph)
    except ShowInputError as exc:
        return _fail(str(exc))
    except (GraphError, ValueError) as exc:
        return _fail(str(exc))
    out = write_show_page(data, args.output or _default_output(args.source, data.summary["step"]))
    s = data.summary
    print(f"wrote {out}: {len(s['trees'])} trees in {len(s['groups'])} groups; credit: {s['credit']['note']}")
    return 0
