"""PNG drawing of a graph layout with matplotlib: the same boxes and arrows as the SVG."""

from __future__ import annotations

from pathlib import Path

from matpo_graph.viz.graph_layout import FONT_PX, HEADER_LINE_H, LINE_H, MARGIN, PAD_X, PAD_Y, TITLE_H, GraphLayout
from matpo_graph.viz.graph_svg import COLORS

__all__ = ["write_png"]

_PX_PER_IN = 100.0
_PT_PER_PX = 72.0 / _PX_PER_IN


def write_png(layout: GraphLayout, path: str | Path, *, scale: float = 2.0) -> Path:
    """Draw ``layout`` into a PNG at ``scale`` times its pixel size (2 keeps text crisp)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    c = COLORS
    w, h = layout.width, layout.height
    fig = plt.figure(figsize=(w / _PX_PER_IN, h / _PX_PER_IN), dpi=_PX_PER_IN * scale)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.axis("off")
    font = {"family": "monospace", "fontsize": FONT_PX * _PT_PER_PX}

    for i, line in enumerate(layout.header):
        y = MARGIN + i * HEADER_LINE_H + 10
        if i == 0:
            ax.text(MARGIN, y, line, va="baseline", color=c["text"], family="monospace",
                    fontsize=(FONT_PX + 4) * _PT_PER_PX, fontweight="bold")
        else:
            ax.text(MARGIN, y, line, va="baseline", color=c["muted"], **font)

    for e in layout.edges:
        colour = c["child_edge"] if e.kind == "child" else c["tool_edge"]
        style = "-" if e.kind == "child" else (0, (5, 4))
        lw = (1.8 if e.kind == "child" else 1.2) * _PT_PER_PX
        pts = list(e.points)
        if len(pts) > 2:
            xs, ys = zip(*pts[:-1])
            ax.plot(xs, ys, color=colour, lw=lw, linestyle=style, solid_capstyle="butt")
        arrow = FancyArrowPatch(pts[-2], pts[-1], arrowstyle="-|>", mutation_scale=12, color=colour, lw=lw,
                                linestyle=style, shrinkA=0, shrinkB=0)
        ax.add_patch(arrow)
    for e in layout.edges:
        if e.label_xy:
            ax.text(*e.label_xy, e.label, ha="center", va="center", color=c["child_edge"], zorder=5,
                    bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": c["child_edge"], "lw": 0.5}, **font)

    for n in layout.nodes:
        if n.kind == "role":
            fill = c["root_fill"] if n.root else (c["frozen_fill"] if n.dim else c["role_fill"])
            stroke, rad, lw = c["role_stroke"], 6, (2.6 if n.root else 1.4)
        else:
            fill, stroke, rad, lw = c["tool_fill"], c["tool_stroke"], 12, 1.2
        if n.missing:
            fill, stroke = c["missing_fill"], c["missing_stroke"]
        box = FancyBboxPatch((n.x, n.y), n.w, n.h, boxstyle=f"round,pad=0,rounding_size={rad}", fc=fill, ec=stroke,
                             lw=lw * _PT_PER_PX, linestyle="--" if n.missing else "-", zorder=3)
        ax.add_patch(box)
        ax.text(n.x + PAD_X, n.y + PAD_Y + 13, n.title, va="baseline", color=c["text"], fontweight="bold", zorder=4,
                **font)
        for k, line in enumerate(n.lines):
            ax.text(n.x + PAD_X, n.y + PAD_Y + TITLE_H + k * LINE_H + 11, line, va="baseline", color=c["muted"],
                    zorder=4, **font)
    out = Path(path)
    fig.savefig(out, dpi=_PX_PER_IN * scale, facecolor="white")
    plt.close(fig)
    return out
