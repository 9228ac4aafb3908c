"""A layered layout of a graph view: roles by depth from the root, tools below their users.

Pure python (networkx for the distances), so SVG and PNG come out the same without graphviz.
Coordinates are pixels with y growing downwards; text widths assume a monospace font.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from matpo_graph.viz.graph_model import GraphView, RoleView, ToolView

__all__ = ["CHAR_W", "FONT_PX", "LINE_H", "GraphLayout", "LaidEdge", "LaidNode", "layout_graph"]

FONT_PX = 12
CHAR_W = FONT_PX * 0.6  # monospace advance width
LINE_H = 16
TITLE_H = 20
PAD_X = 10
PAD_Y = 8
GAP_X = 48
GAP_Y = 96
LOOP_W = 30
MARGIN = 24
HEADER_LINE_H = 18


@dataclass(frozen=True)
class LaidNode:
    id: str
    kind: str  # "role" | "tool"
    title: str
    lines: tuple[str, ...]
    layer: int
    x: float  # left
    y: float  # top
    w: float
    h: float
    root: bool = False
    missing: bool = False
    dim: bool = False  # frozen (not trained) role

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def bottom(self) -> float:
        return self.y + self.h


@dataclass(frozen=True)
class LaidEdge:
    source: str
    target: str
    kind: str  # "child" | "tool"
    label: str
    points: tuple[tuple[float, float], ...]
    label_xy: tuple[float, float] | None


@dataclass(frozen=True)
class GraphLayout:
    title: str
    header: tuple[str, ...]
    nodes: tuple[LaidNode, ...]
    edges: tuple[LaidEdge, ...]
    width: float
    height: float

    def node(self, node_id: str) -> LaidNode:
        return next(n for n in self.nodes if n.id == node_id)


def _role_lines(role: RoleView, view: GraphView) -> tuple[str, ...]:
    lines = [f"max_turns {role.max_turns} · {role.max_tokens_per_turn} tok/turn"]
    if view.context_tokens is not None:
        lines.append(f"context {view.context_tokens} tok")
    lines.append(f"summary: {role.final_summary}")
    extra = []
    if not role.trainable:
        extra.append("frozen")
    if role.temperature is not None:
        extra.append(f"T={role.temperature:g}")
    if extra:
        lines.append(" · ".join(extra))
    return tuple(lines)


def _tool_lines(tool: ToolView) -> tuple[str, ...]:
    lines = [f"backend: {tool.backend}"]
    if tool.timeout_s is not None:
        lines.append(f"timeout {tool.timeout_s:g}s · retries {tool.retries}")
    return tuple(lines)


def _box_size(title: str, lines: tuple[str, ...]) -> tuple[float, float]:
    longest = max([len(title)] + [len(x) for x in lines])
    return longest * CHAR_W + 2 * PAD_X, TITLE_H + len(lines) * LINE_H + 2 * PAD_Y


def _layers(view: GraphView) -> dict[str, int]:
    g = nx.MultiDiGraph()
    g.add_nodes_from(f"role:{r.name}" for r in view.roles)
    for e in view.edges:
        g.add_edge(f"role:{e.parent}", f"role:{e.child}")
    root = f"role:{view.root}"
    depth = dict(nx.single_source_shortest_path_length(g, root)) if root in g else {}
    deepest = max(depth.values(), default=-1)
    for r in view.roles:  # unreachable roles go below the reachable ones
        depth.setdefault(f"role:{r.name}", deepest + 1)
    role_deepest = max(depth.values(), default=0)
    for r in view.roles:
        for t in r.tools:
            key = f"tool:{t}"
            depth[key] = max(depth.get(key, 0), depth[f"role:{r.name}"] + 1)
    for t in view.tools:
        depth.setdefault(f"tool:{t.name}", role_deepest + 1)
    return depth


def _order(layers: dict[str, int], links: list[tuple[str, str]], initial: list[str]) -> list[list[str]]:
    """Rows of node ids, ordered by a few barycenter sweeps to reduce crossings."""
    n_rows = max(layers.values(), default=-1) + 1
    rows: list[list[str]] = [[n for n in initial if layers[n] == i] for i in range(n_rows)]
    nbrs: dict[str, set[str]] = {n: set() for n in initial}
    for a, b in links:
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    for sweep in range(4):
        order = range(1, n_rows) if sweep % 2 == 0 else range(n_rows - 2, -1, -1)
        for i in order:
            ref = rows[i - 1] if sweep % 2 == 0 else rows[i + 1]
            pos = {n: k for k, n in enumerate(ref)}

            def key(n: str, pos: dict[str, int] = pos, row: list[str] = rows[i]) -> float:
                near = [pos[m] for m in nbrs[n] if m in pos]
                return sum(near) / len(near) if near else float(row.index(n))

            rows[i] = sorted(rows[i], key=key)
    return rows


def layout_graph(view: GraphView, *, header: bool = True) -> GraphLayout:
    """Place role and tool boxes in rows by depth and route the edges between them.

    With ``header=False`` the title lines are left out (an HTML page shows them as text instead).
    """
    depth = _layers(view)
    specs: dict[str, tuple[str, str, tuple[str, ...], bool, bool, bool]] = {}
    for r in view.roles:
        title = f"{r.name} [root]" if r.name == view.root else r.name
        specs[f"role:{r.name}"] = ("role", title, _role_lines(r, view), r.name == view.root, False, not r.trainable)
    for t in view.tools:
        specs[f"tool:{t.name}"] = ("tool", t.name, _tool_lines(t), False, t.missing, False)
    links = [(f"role:{e.parent}", f"role:{e.child}") for e in view.edges]
    links += [(f"role:{r.name}", f"tool:{t}") for r in view.roles for t in r.tools]
    rows = _order(depth, links, list(specs))

    heading = ((view.name,) + tuple(view.summary_lines())) if header else ()
    top = MARGIN + (len(heading) * HEADER_LINE_H + 12 if heading else 0)
    sizes = {n: _box_size(specs[n][1], specs[n][2]) for n in specs}
    # A role that calls itself gets room on its right for the loop and its label.
    room = {n: 0.0 for n in specs}
    for e in view.edges:
        if e.parent == e.child:
            room[f"role:{e.parent}"] += LOOP_W + (len(e.name) + 3) * CHAR_W + 12
    row_widths = [sum(sizes[n][0] + room[n] for n in row) + GAP_X * max(len(row) - 1, 0) for row in rows]
    header_w = max((len(s) for s in heading), default=0) * (CHAR_W + 0.6)
    base_w = max(row_widths + [header_w]) + 2 * MARGIN
    nodes: dict[str, LaidNode] = {}
    y = top
    for row, row_w in zip(rows, row_widths):
        row_h = max((sizes[n][1] for n in row), default=0)
        x = MARGIN + (base_w - 2 * MARGIN - row_w) / 2
        for n in row:
            w, h = sizes[n]
            kind, title, lines, root, missing, dim = specs[n]
            nodes[n] = LaidNode(n, kind, title, lines, depth[n], x, y + (row_h - h) / 2, w, h, root, missing, dim)
            x += w + room[n] + GAP_X
        y += row_h + GAP_Y
    height = y - GAP_Y + MARGIN
    edges = _route(view, nodes)
    right = [x for e in edges for x, _ in e.points]
    right += [e.label_xy[0] + len(e.label) * CHAR_W / 2 + 6 for e in edges if e.label_xy]
    width = max([base_w] + [x + MARGIN for x in right])
    return GraphLayout(view.name, heading, tuple(nodes[n] for n in specs), edges, width, height)


def _spread(n: int, left: float, w: float) -> list[float]:
    return [left + w * (k + 1) / (n + 1) for k in range(n)]


def _route(view: GraphView, nodes: dict[str, LaidNode]) -> tuple[LaidEdge, ...]:
    pairs: list[tuple[str, str, str, str]] = [
        (f"role:{e.parent}", f"role:{e.child}", "child", f"{e.name} ×{e.max_parallel}") for e in view.edges
    ]
    pairs += [(f"role:{r.name}", f"tool:{t}", "tool", "") for r in view.roles for t in r.tools]
    down = [p for p in pairs if nodes[p[1]].layer > nodes[p[0]].layer]
    # Exit and entry points spread along each box edge, ordered by the other end's x.
    exits: dict[tuple[str, str, str], float] = {}
    entries: dict[tuple[str, str, str], float] = {}
    for node_id, node in nodes.items():
        out = sorted((p for p in down if p[0] == node_id), key=lambda p: nodes[p[1]].cx)
        for p, x in zip(out, _spread(len(out), node.x, node.w)):
            exits[p[:3]] = x
        inc = sorted((p for p in down if p[1] == node_id), key=lambda p: nodes[p[0]].cx)
        for p, x in zip(inc, _spread(len(inc), node.x, node.w)):
            entries[p[:3]] = x
    edges: list[LaidEdge] = []
    detour = 0
    labelled_from: dict[str, int] = {}
    loop_count: dict[str, int] = {}
    for src, dst, kind, label in pairs:
        a, b = nodes[src], nodes[dst]
        if b.layer > a.layer:
            x0, x1 = exits[(src, dst, kind)], entries[(src, dst, kind)]
            pts = ((x0, a.bottom), (x1, b.y))
            k = labelled_from[src] = labelled_from.get(src, -1) + (1 if label else 0)
            frac = (0.38 + 0.24 * (k % 2)) * GAP_Y / max(b.y - a.bottom, 1.0)  # stagger sibling labels
            lxy = (x0 + (x1 - x0) * frac, a.bottom + (b.y - a.bottom) * frac)
        elif src == dst:
            r = a.x + a.w
            loops = loop_count[src] = loop_count.get(src, -1) + 1
            ym = a.y + a.h / 2 + 26 * loops - 13 * (sum(1 for p in pairs if p[0] == p[1] == src) - 1)
            pts = ((r, ym - 8), (r + LOOP_W - 6, ym - 8), (r + LOOP_W - 6, ym + 8), (r, ym + 8))
            lxy = (r + LOOP_W + len(label) * CHAR_W / 2 + 4, ym)
        else:  # back or sideways edge: route around the right of both boxes
            detour += 1
            xr = max(a.x + a.w, b.x + b.w) + 24 + 14 * detour
            ya, yb = a.y + a.h * 0.65, b.y + b.h * 0.35
            pts = ((a.x + a.w, ya), (xr, ya), (xr, yb), (b.x + b.w, yb))
            lxy = (xr, (ya + yb) / 2)
        edges.append(LaidEdge(src, dst, kind, label, pts, lxy if label else None))
    return tuple(edges)
