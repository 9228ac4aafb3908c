"""Mermaid flowchart text of a graph view: `viz -o graph.mmd` and the graph.mmd that `compile` writes.

Node ids come from names made safe for mermaid, and made unique again when two names map to the same id,
so no role or tool name can merge two nodes or break the syntax.
"""

from __future__ import annotations

import re

from matpo_graph.viz.graph_model import GraphView

__all__ = ["view_to_mermaid"]


def _node_ids(view: GraphView) -> dict[tuple[str, str], str]:
    """(kind, name) -> a mermaid node id, readable and unique."""
    ids: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for kind, names in (("role", [r.name for r in view.roles]), ("tool", [t.name for t in view.tools])):
        for name in names:
            base = f"{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
            node, n = base, 2
            while node in taken:
                node, n = f"{base}_{n}", n + 1
            taken.add(node)
            ids[(kind, name)] = node
    return ids


def _label(*lines: str) -> str:
    """A quoted mermaid label; quotes and angle brackets become entities so text cannot break the syntax."""
    safe = [ln.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") for ln in lines]
    return '"' + "<br/>".join(safe) + '"'


def view_to_mermaid(view: GraphView) -> str:
    """Roles as boxes, tools as stadium shapes, delegation edges labelled `tool name ×max_parallel`."""
    ids = _node_ids(view)

    def _id(kind: str, name: str) -> str:
        return ids.get((kind, name)) or f"{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"

    lines = ["---", f"title: {_label(view.name)[1:-1]}", "---", "flowchart TD"]
    for r in view.roles:
        head = f"{r.name} (root)" if r.name == view.root else r.name
        facts = [f"max_turns {r.max_turns} · {r.max_tokens_per_turn} tok/turn"]
        if view.context_tokens is not None:
            facts.append(f"context {view.context_tokens} tok")
        facts.append(f"summary: {r.final_summary}")
        if not r.trainable:
            facts.append("frozen")
        lines.append(f"    {_id('role', r.name)}[{_label(head, *facts)}]")
    for t in view.tools:
        lines.append(f"    {_id('tool', t.name)}([{_label(t.name, f'backend: {t.backend}')}])")
    for e in view.edges:
        lines.append(f"    {_id('role', e.parent)} -->|{_label(f'{e.name} ×{e.max_parallel}')}| {_id('role', e.child)}")
    for r in view.roles:
        for t in r.tools:
            lines.append(f"    {_id('role', r.name)} -.-> {_id('tool', t)}")
    lines.append("    classDef role fill:#e8f0fe,stroke:#3a66c4")
    lines.append("    classDef tool fill:#fff4e0,stroke:#b86e00")
    lines.append("    classDef missing fill:#fde8e8,stroke:#c5221f,stroke-dasharray:4 3")
    if view.roles:
        lines.append("    class " + ",".join(_id("role", r.name) for r in view.roles) + " role")
    ok = [t for t in view.tools if not t.missing]
    if ok:
        lines.append("    class " + ",".join(_id("tool", t.name) for t in ok) + " tool")
    bad = [t for t in view.tools if t.missing]
    if bad:
        lines.append("    class " + ",".join(_id("tool", t.name) for t in bad) + " missing")
    return "\n".join(lines) + "\n"
