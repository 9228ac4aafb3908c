"""Pictures of graphs (`matpo-graph viz`) and a browser page for rollout trees and their credit (`matpo-graph show`).

Modules: graph_model (the view drawn), graph_layout (layered layout), graph_svg / graph_png / graph_html /
graph_mermaid (renderers), graph_render (pick one by suffix), show_data + show_page (the rollout page),
chromium (headless chromium over DevTools, for checks and benchmarks).
"""

from __future__ import annotations

from matpo_graph.viz.graph_load import load_view
from matpo_graph.viz.graph_model import GraphView, view_from_graph, view_from_program
from matpo_graph.viz.graph_render import GRAPH_FORMATS, write_graph_picture
from matpo_graph.viz.show_data import ShowData, ShowInputError, collect_show_data
from matpo_graph.viz.show_page import show_page, write_show_page

__all__ = [
    "GRAPH_FORMATS",
    "GraphView",
    "ShowData",
    "ShowInputError",
    "collect_show_data",
    "load_view",
    "show_page",
    "view_from_graph",
    "view_from_program",
    "write_graph_picture",
    "write_show_page",
]
