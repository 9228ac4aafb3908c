"""Write a picture of a graph, choosing the format by the output file's suffix."""

from __future__ import annotations

from pathlib import Path

from matpo_graph.viz.graph_model import GraphView

__all__ = ["GRAPH_FORMATS", "write_graph_picture"]

GRAPH_FORMATS: tuple[str, ...] = (".html", ".svg", ".png", ".mmd")


def write_graph_picture(view: GraphView, out: str | Path) -> Path:
    """Write ``view`` to ``out`` as .html, .svg, .png or .mmd.

    Raises:
        ValueError: the suffix is none of GRAPH_FORMATS.
    """
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in GRAPH_FORMATS:
        raise ValueError(f"{out}: unknown picture format {suffix or '(none)'!r}; use one of {', '.join(GRAPH_FORMATS)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".mmd":
        from matpo_graph.viz.graph_mermaid import view_to_mermaid

        out.write_text(view_to_mermaid(view), encoding="utf-8")
        return out
    from matpo_graph.viz.graph_layout import layout_graph

    layout = layout_graph(view, header=suffix != ".html")
    if suffix == ".svg":
        from matpo_graph.viz.graph_svg import layout_to_svg

        out.write_text(layout_to_svg(layout), encoding="utf-8")
    elif suffix == ".html":
        from matpo_graph.viz.graph_html import graph_page

        out.write_text(graph_page(view, layout), encoding="utf-8")
    else:
        from matpo_graph.viz.graph_png import write_png

        write_png(layout, out)
    return out
