"""Reading what `viz` draws: a graph file or a compiled folder, as a view.

Kept apart from :mod:`matpo_graph.viz.graph_model` because it reads compiled folders through the compiler,
which itself draws with the view (compile writes graph.mmd).
"""

from __future__ import annotations

from pathlib import Path

from matpo_graph.viz.graph_model import GraphView, view_from_graph, view_from_program

__all__ = ["load_view"]


def load_view(path: str | Path) -> GraphView:
    """Load a graph YAML file (validated by the project's loader) or a compiled folder into a view.

    Raises:
        matpo_graph.core.errors.GraphError: the graph file or compiled folder is invalid.
        FileNotFoundError: nothing at ``path``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such graph file or compiled folder")
    if path.is_dir():
        from matpo_graph.compilers.local import load_program

        program, plan = load_program(path)
        return view_from_program(program, plan)
    from matpo_graph.core.loader import load_graph

    return view_from_graph(load_graph(path))
