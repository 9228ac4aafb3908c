"""A self-contained HTML page of a graph: the inline SVG drawing plus tables of roles, tools and edges."""

from __future__ import annotations

from html import escape

from matpo_graph.viz.graph_layout import GraphLayout
from matpo_graph.viz.graph_model import GraphView
from matpo_graph.viz.graph_svg import layout_to_svg

__all__ = ["graph_page"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Liberation Sans',sans-serif;margin:24px;color:#1f2328}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.muted{color:#57606a} .drawing{overflow:auto;border:1px solid #d0d7de;border-radius:6px;padding:8px;background:#fff}
.drawing svg{display:block;margin:0 auto}
table{border-collapse:collapse;margin:4px 0} th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.num{text-align:right;font-variant-numeric:tabular-nums} code{font-size:12px}
"""


_ROLE_HEAD = ["role", "description", "max_turns", "tok/turn", "context", "summary", "trained", "tools",
              "calls (tool name → role)"]


def _table(cls: str, head: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = []
    for row in rows:
        tds = "".join(
            f'<td class="num">{escape(v)}</td>' if i in numeric else f"<td>{escape(v)}</td>" for i, v in enumerate(row)
        )
        body.append(f"<tr>{tds}</tr>")
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def graph_page(view: GraphView, layout: GraphLayout) -> str:
    """One HTML document with no external references (styles and drawing inline)."""
    calls: dict[str, list[str]] = {r.name: [] for r in view.roles}
    for e in view.edges:
        calls.setdefault(e.parent, []).append(f"{e.name} → {e.child}")
    roles = [
        [
            r.name + (" (root)" if r.name == view.root else ""),
            r.description,
            str(r.max_turns),
            str(r.max_tokens_per_turn),
            "" if view.context_tokens is None else str(view.context_tokens),
            r.final_summary,
            "yes" if r.trainable else "no",
            ", ".join(r.tools),
            ", ".join(calls.get(r.name, [])),
        ]
        for r in view.roles
    ]
    tools = [
        [
            t.name,
            t.backend,
            t.description,
            "" if t.timeout_s is None else f"{t.timeout_s:g}",
            "" if t.retries is None else str(t.retries),
        ]
        for t in view.tools
    ]
    edges = [[e.parent, e.child, e.name, str(e.max_parallel), str(e.max_result_chars), e.description] for e in view.edges]
    facts = "".join(f'<div class="muted">{escape(x)}</div>' for x in view.summary_lines())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(view.name)} · matpo-graph</title>
<style>{_CSS}</style></head>
<body>
<h1>{escape(view.name)}</h1>
{f'<p>{escape(view.description)}</p>' if view.description else ''}{facts}
<h2>Drawing</h2>
<div class="drawing">{layout_to_svg(layout, standalone=False)}</div>
<h2>Roles</h2>
{_table("roles", _ROLE_HEAD, roles, {2, 3, 4})}
<h2>Tools</h2>
{_table("tools", ["tool", "backend", "description", "timeout s", "retries"], tools, {3, 4})}
<h2>Delegation edges</h2>
{_table("edges", ["from", "to", "tool name", "max_parallel", "max_result_chars", "description"], edges, {3, 4})}
</body></html>
"""
