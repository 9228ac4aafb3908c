"""Draw a graph as a Mermaid flowchart: roles as boxes, tools as parallelograms, edges labelled by call name."""

from __future__ import annotations

from matpo_graph.core.spec import Graph

__all__ = ["to_mermaid"]


def _label(text: str) -> str:
    return '"' + text.replace('"', "#quot;").replace("\n", " ") + '"'


def to_mermaid(graph: Graph) -> str:
    """Mermaid `flowchart LR` text; node ids are positional, so any role or tool name is safe."""
    role_id = {name: f"r{i}" for i, name in enumerate(graph.roles)}
    used = [t for t in graph.tools if any(t in r.tools for r in graph.roles.values())]
    tool_id = {name: f"t{i}" for i, name in enumerate(used)}
    lines = ["flowchart LR", f"  %% graph: {graph.name}"]
    for name, role in graph.roles.items():
        text = f"{name} (root)" if name == graph.root else name
        text += f"<br/>max_turns={role.max_turns}, summary={role.final_summary}"
        shape = ("([", "])") if name == graph.root else ("[", "]")
        lines.append(f"  {role_id[name]}{shape[0]}{_label(text)}{shape[1]}")
    for name in used:
        lines.append(f"  {tool_id[name]}[/{_label(f'{name}: {graph.tools[name].backend}')}/]")
    for edge in graph.edges:
        if edge.from_ in role_id and edge.to in role_id:
            lines.append(f"  {role_id[edge.from_]} -->|{_label(edge.as_)}| {role_id[edge.to]}")
    for name, role in graph.roles.items():
        for tool in role.tools:
            if tool in tool_id:
                lines.append(f"  {role_id[name]} -.-> {tool_id[tool]}")
    lines += ["  classDef tool fill:#f6f6f6,stroke:#999;", f"  class {','.join(tool_id.values())} tool;"] if tool_id else []
    return "\n".join(lines) + "\n"
