"""What a graph allows a rollout tree to look like: roles, who may call whom, how deep, how wide.

A :class:`GraphShape` is read from a DSL :class:`~matpo_graph.core.spec.Graph` or a compiled
:class:`~matpo_graph.core.program.Program`, and drives the tree generators of
:mod:`matpo_graph.testing.strategies`. :func:`make_plan` builds a :class:`CreditPlan` with the DSL's
defaults for a shape, for tests and for tools that have trees but no compiled plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.policies import role_policies
from matpo_graph.core.spec import DEFAULT_POLICY, CreditSpec, Graph, RewardSpec

__all__ = ["EdgeShape", "GraphShape", "make_plan", "shape_of"]


@dataclass(frozen=True)
class EdgeShape:
    """A delegation edge as the parent sees it: the call name, the child role and its fan-out cap per turn."""

    name: str
    child: str
    max_parallel: int = 1


@dataclass(frozen=True)
class GraphShape:
    """The structural limits of rollout trees of one graph."""

    root: str
    roles: tuple[str, ...]
    edges: Mapping[str, tuple[EdgeShape, ...]]
    """Outgoing edges by parent role."""
    tools: Mapping[str, tuple[str, ...]]
    """Tool names by role."""
    max_depth: int
    """Deepest nesting level (the root is depth 0)."""
    policies: Mapping[str, str] = field(default_factory=dict)
    """Policy by role (see :mod:`matpo_graph.core.policies`); a role not listed is on ``shared``."""

    def __post_init__(self) -> None:
        if self.root not in self.roles:
            raise ValueError(f"root {self.root!r} is not among the roles {list(self.roles)}")
        for parent, edges in self.edges.items():
            for edge in edges:
                if parent not in self.roles or edge.child not in self.roles:
                    raise ValueError(f"edge {parent!r} -> {edge.child!r} names an unknown role")
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")

    @classmethod
    def from_graph(cls, graph: Graph) -> "GraphShape":
        return cls(
            root=graph.root,
            roles=tuple(graph.roles),
            edges={r: tuple(EdgeShape(e.as_, e.to, e.max_parallel) for e in graph.edges_from(r)) for r in graph.roles},
            tools={r: tuple(role.tools) for r, role in graph.roles.items()},
            max_depth=graph.limits.max_depth,
            policies=role_policies(graph.roles, graph.policies),
        )

    @classmethod
    def from_program(cls, program: Program) -> "GraphShape":
        return cls(
            root=program.root,
            roles=tuple(program.roles),
            edges={
                r: tuple(EdgeShape(c.name, c.target, c.max_parallel) for c in role.callables if c.kind == "child")
                for r, role in program.roles.items()
            },
            tools={r: tuple(c.name for c in role.callables if c.kind == "tool") for r, role in program.roles.items()},
            max_depth=program.max_depth,
            policies=program.role_policies(),
        )

    def policy_of(self, role: str) -> str:
        """The policy that plays `role`."""
        return self.policies.get(role, DEFAULT_POLICY)

    def calling_roles(self) -> list[str]:
        """Roles with at least one tool or edge."""
        return [r for r in self.roles if self.tools.get(r) or self.edges.get(r)]

    def edges_at(self, role: str, depth: int) -> tuple[EdgeShape, ...]:
        """Edges a trajectory of `role` at `depth` may still follow (its children must fit max_depth)."""
        return self.edges.get(role, ()) if depth + 1 <= self.max_depth else ()


def shape_of(source: Graph | Program | GraphShape) -> GraphShape:
    """The shape of a Graph, a Program, or a shape itself."""
    if isinstance(source, GraphShape):
        return source
    if isinstance(source, Graph):
        return GraphShape.from_graph(source)
    if isinstance(source, Program):
        return GraphShape.from_program(source)
    raise TypeError(f"expected a Graph, Program or GraphShape, got {type(source).__name__}")


def make_plan(source: Graph | Program | GraphShape, **overrides: Any) -> CreditPlan:
    """A CreditPlan with the DSL's default reward and credit settings for this shape.

    Any CreditPlan field can be overridden by keyword (e.g. ``strategy="root_only"``).
    """
    shape = shape_of(source)
    credit, reward = CreditSpec(), RewardSpec()
    fields: dict[str, Any] = {
        "root": shape.root,
        "group_size": credit.group_size,
        "strategy": credit.strategy,
        "normalization": credit.normalization,
        "epsilon": credit.epsilon,
        "single_member": credit.single_member,
        "loss_agg": credit.loss_agg,
        "clip_ratio_low": credit.clip_ratio_low,
        "clip_ratio_high": credit.clip_ratio_high,
        "dual_clip": credit.dual_clip,
        "kl_coef": credit.kl.coef,
        "kl_estimator": credit.kl.estimator,
        "answer_format": reward.answer_format,
        "accuracy_scorer": reward.accuracy.scorer,
        "accuracy_weight": reward.accuracy.weight,
        "format_weight": reward.format.weight,
        "no_call_score": reward.format.no_call_score,
        "numeric_tolerance": reward.accuracy.numeric_tolerance,
        "calling_roles": shape.calling_roles(),
        "trained_roles": list(shape.roles),
        "role_policies": {r: shape.policy_of(r) for r in sorted(shape.roles)},
    }
    unknown = set(overrides) - set(CreditPlan.model_fields)
    if unknown:
        raise TypeError(f"unknown CreditPlan fields {sorted(unknown)}")
    fields.update(overrides)
    return CreditPlan(**fields)
