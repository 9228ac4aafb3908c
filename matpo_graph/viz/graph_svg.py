"""SVG drawing of a graph layout: boxes, arrows and labels, written by hand (no graphviz)."""

from __future__ import annotations

from html import escape

from matpo_graph.viz.graph_layout import (
    CHAR_W,
    FONT_PX,
    HEADER_LINE_H,
    LINE_H,
    MARGIN,
    PAD_X,
    PAD_Y,
    TITLE_H,
    GraphLayout,
)

__all__ = ["COLORS", "FONT_FAMILY", "layout_to_svg"]

FONT_FAMILY = "DejaVu Sans Mono, Menlo, Consolas, Liberation Mono, monospace"

COLORS = {
    "role_fill": "#e8f0fe",
    "role_stroke": "#3a66c4",
    "root_fill": "#d2e3fc",
    "frozen_fill": "#f1f3f4",
    "tool_fill": "#fff4e0",
    "tool_stroke": "#b86e00",
    "missing_fill": "#fde8e8",
    "missing_stroke": "#c5221f",
    "child_edge": "#2b3a55",
    "tool_edge": "#8a8f98",
    "text": "#1f2328",
    "muted": "#57606a",
}


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _path(points: tuple[tuple[float, float], ...]) -> str:
    head, *rest = points
    return f"M{head[0]:.1f},{head[1]:.1f} " + " ".join(f"L{x:.1f},{y:.1f}" for x, y in rest)


def _marker(marker_id: str, size: int, colour: str) -> str:
    return (
        f'<marker id="{marker_id}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="{size}" markerHeight="{size}" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
    )


def layout_to_svg(layout: GraphLayout, *, standalone: bool = True) -> str:
    """Return an SVG document (or, with ``standalone=False``, an element to inline in HTML)."""
    c = COLORS
    w, h = layout.width, layout.height
    out: list[str] = []
    xmlns = ' xmlns="http://www.w3.org/2000/svg"'
    out.append(
        f'<svg{xmlns} class="matpo-graph" viewBox="0 0 {w:.0f} {h:.0f}" width="{w:.0f}" height="{h:.0f}" '
        f'font-family="{_attr(FONT_FAMILY)}" font-size="{FONT_PX}" role="img" aria-label="{_attr(layout.title)}">'
    )
    out.append(f"<title>{escape(layout.title)}</title>")
    out.append(
        "<defs>"
        f"{_marker('arrow-child', 8, c['child_edge'])}{_marker('arrow-tool', 7, c['tool_edge'])}"
        "</defs>"
    )
    out.append(f'<rect x="0" y="0" width="{w:.0f}" height="{h:.0f}" fill="#ffffff"/>')
    for i, line in enumerate(layout.header):
        size, weight, colour = (FONT_PX + 4, "bold", c["text"]) if i == 0 else (FONT_PX, "normal", c["muted"])
        y = MARGIN + i * HEADER_LINE_H + 10
        out.append(
            f'<text x="{MARGIN}" y="{y:.1f}" font-size="{size}" font-weight="{weight}" fill="{colour}">{escape(line)}</text>'
        )
    for e in layout.edges:
        colour = c["child_edge"] if e.kind == "child" else c["tool_edge"]
        dash = "" if e.kind == "child" else ' stroke-dasharray="5,4"'
        width = 1.8 if e.kind == "child" else 1.2
        out.append(
            f'<path class="edge edge-{e.kind}" data-source="{_attr(e.source)}" data-target="{_attr(e.target)}" '
            f'd="{_path(e.points)}" fill="none" stroke="{colour}" stroke-width="{width}"{dash} '
            f'marker-end="url(#arrow-{e.kind})"/>'
        )
    for e in layout.edges:
        if not e.label_xy:
            continue
        lx, ly = e.label_xy
        lw = len(e.label) * CHAR_W + 8
        out.append(
            f'<g class="edge-label" data-source="{_attr(e.source)}" data-target="{_attr(e.target)}">'
            f'<rect x="{lx - lw / 2:.1f}" y="{ly - 10:.1f}" width="{lw:.1f}" height="18" rx="4" fill="#ffffff" '
            f'stroke="{c["child_edge"]}" stroke-width="0.6"/>'
            f'<text x="{lx:.1f}" y="{ly + 3.5:.1f}" text-anchor="middle" fill="{c["child_edge"]}">{escape(e.label)}</text></g>'
        )
    for n in layout.nodes:
        if n.kind == "role":
            fill = c["root_fill"] if n.root else (c["frozen_fill"] if n.dim else c["role_fill"])
            stroke, rx, sw = c["role_stroke"], 6, (2.6 if n.root else 1.4)
        else:
            fill, stroke, rx, sw = c["tool_fill"], c["tool_stroke"], 14, 1.2
        if n.missing:
            fill, stroke = c["missing_fill"], c["missing_stroke"]
        dash = ' stroke-dasharray="4,3"' if n.missing else ""
        out.append(f'<g class="node node-{n.kind}" data-id="{_attr(n.id)}">')
        out.append(
            f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w:.1f}" height="{n.h:.1f}" rx="{rx}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{sw}"{dash}/>'
        )
        ty = n.y + PAD_Y + 13
        out.append(f'<text x="{n.x + PAD_X:.1f}" y="{ty:.1f}" font-weight="bold" fill="{c["text"]}">{escape(n.title)}</text>')
        for k, line in enumerate(n.lines):
            y = n.y + PAD_Y + TITLE_H + k * LINE_H + 11
            out.append(f'<text x="{n.x + PAD_X:.1f}" y="{y:.1f}" fill="{c["muted"]}">{escape(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    body = "\n".join(out)
    if standalone:
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
    return body
