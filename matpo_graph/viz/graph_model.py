"""A drawing-oriented view of a graph, built from a Graph (YAML) or a compiled Program.

Renderers (SVG, PNG, HTML, mermaid) read only this view, so they work the same whether the user
points `matpo-graph viz` at a graph file or at a compiled folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matpo_graph.core.program import CreditPlan, Program
    from matpo_graph.core.spec import Graph

__all__ = ["EdgeView", "GraphView", "RoleView", "ToolView", "view_from_graph", "view_from_program"]


@dataclass(frozen=True)
class RoleView:
    name: str
    description: str
    max_turns: int
    max_tokens_per_turn: int
    final_summary: str
    trainable: bool
    temperature: float | None
    tools: tuple[str, ...]
    """Plain tools this role may call (delegation edges are in GraphView.edges)."""


@dataclass(frozen=True)
class ToolView:
    name: str
    backend: str
    description: str
    timeout_s: float | None = None
    retries: int | None = None
    missing: bool = False
    """True when a role names a tool the graph does not define (drawn in red)."""


@dataclass(frozen=True)
class EdgeView:
    parent: str
    child: str
    name: str
    """The tool name the parent sees."""
    max_parallel: int
    max_result_chars: int
    description: str


@dataclass(frozen=True)
class GraphView:
    name: str
    description: str
    root: str
    roles: tuple[RoleView, ...]
    tools: tuple[ToolView, ...]
    edges: tuple[EdgeView, ...]
    tool_call_format: str = ""
    answer_format: str = ""
    max_depth: int | None = None
    context_tokens: int | None = None
    summary_reserve: int | None = None
    credit: dict[str, Any] = field(default_factory=dict)

    def role(self, name: str) -> RoleView | None:
        return next((r for r in self.roles if r.name == name), None)

    def summary_lines(self) -> list[str]:
        """One-line facts about the whole graph, shown under the title."""
        parts = []
        if self.tool_call_format:
            parts.append(f"tool calls: {self.tool_call_format}")
        if self.answer_format:
            parts.append(f"answer: {self.answer_format}")
        if self.max_depth is not None:
            parts.append(f"max depth {self.max_depth}")
        if self.context_tokens is not None:
            parts.append(f"context {self.context_tokens} tok (summary reserve {self.summary_reserve})")
        lines = [" · ".join(parts)] if parts else []
        if self.credit:
            lines.append(" · ".join(f"{k} {v}" for k, v in self.credit.items()))
        return lines


def _tool_views(declared: dict[str, dict[str, Any]], used: list[str]) -> tuple[ToolView, ...]:
    out = [
        ToolView(
            name=name,
            backend=str(spec.get("backend", "?")),
            description=str(spec.get("description", "")),
            timeout_s=spec.get("timeout_s"),
            retries=spec.get("retries"),
        )
        for name, spec in declared.items()
    ]
    for name in used:
        if name not in declared:
            out.append(ToolView(name=name, backend="undefined", description="not defined in tools:", missing=True))
    return tuple(out)


def _reward_text(acc_weight: float, scorer: str, fmt_weight: float) -> str:
    return f"{acc_weight:g}·{scorer} + {fmt_weight:g}·format"


def view_from_graph(graph: "Graph") -> GraphView:
    """The view of a validated Graph. Role `tools:` entries that name an edge are shown as that edge only."""
    roles: list[RoleView] = []
    used: list[str] = []
    for name, role in graph.roles.items():
        edge_names = {e.as_ for e in graph.edges_from(name)}
        plain = tuple(t for t in role.tools if t not in edge_names)
        used.extend(t for t in plain if t not in used)
        roles.append(
            RoleView(
                name=name,
                description=role.description,
                max_turns=role.max_turns,
                max_tokens_per_turn=role.max_tokens_per_turn,
                final_summary=role.final_summary,
                trainable=role.trainable,
                temperature=role.temperature,
                tools=plain,
            )
        )
    edges = tuple(
        EdgeView(e.from_, e.to, e.as_, e.max_parallel, e.max_result_chars, e.description) for e in graph.edges
    )
    c = graph.credit
    return GraphView(
        name=graph.name,
        description=graph.description,
        root=graph.root,
        roles=tuple(roles),
        tools=_tool_views({k: v.model_dump() for k, v in graph.tools.items()}, used),
        edges=edges,
        tool_call_format=graph.tool_call_format,
        answer_format=graph.reward.answer_format,
        max_depth=graph.limits.max_depth,
        context_tokens=graph.limits.context_tokens,
        summary_reserve=graph.limits.summary_reserve,
        credit={
            "credit": f"{c.strategy}/{c.normalization}",
            "G": c.group_size,
            "loss": c.loss_agg,
            "reward": _reward_text(graph.reward.accuracy.weight, graph.reward.accuracy.scorer, graph.reward.format.weight),
        },
    )


def view_from_program(program: "Program", plan: "CreditPlan | None" = None) -> GraphView:
    """The view of a compiled Program (edges are recovered from each role's `child` callables)."""
    roles: list[RoleView] = []
    edges: list[EdgeView] = []
    used: list[str] = []
    for name, role in program.roles.items():
        plain = tuple(c.target for c in role.callables if c.kind == "tool")
        used.extend(t for t in plain if t not in used)
        for c in role.callables:
            if c.kind == "child":
                edges.append(EdgeView(name, c.target, c.name, c.max_parallel, c.max_result_chars, c.description))
        roles.append(
            RoleView(
                name=name,
                description=role.description,
                max_turns=role.max_turns,
                max_tokens_per_turn=role.max_tokens_per_turn,
                final_summary=role.final_summary,
                trainable=role.trainable,
                temperature=role.temperature,
                tools=plain,
            )
        )
    credit: dict[str, Any] = {}
    if plan is not None:
        credit = {
            "credit": f"{plan.strategy}/{plan.normalization}",
            "G": plan.group_size,
            "loss": plan.loss_agg,
            "reward": _reward_text(plan.accuracy_weight, plan.accuracy_scorer, plan.format_weight),
        }
    return GraphView(
        name=program.graph_name,
        description="",
        root=program.root,
        roles=tuple(roles),
        tools=_tool_views(dict(program.tools), used),
        edges=tuple(edges),
        tool_call_format=program.tool_call_format,
        answer_format=program.answer_format,
        max_depth=program.max_depth,
        context_tokens=program.context_tokens,
        summary_reserve=program.summary_reserve,
        credit=credit,
    )
