"""The graph.mmd that `compile` writes: the same Mermaid drawing as `matpo-graph viz -o graph.mmd`."""

from __future__ import annotations

from matpo_graph.core.spec import Graph

__all__ = ["to_mermaid"]


def to_mermaid(graph: Graph) -> str:
    """Mermaid flowchart text of a validated graph (roles as boxes, tools as stadiums, edges labelled)."""
    from matpo_graph.viz.graph_mermaid import view_to_mermaid
    from matpo_graph.viz.graph_model import view_from_graph

    return view_to_mermaid(view_from_graph(graph))
