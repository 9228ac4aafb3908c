"""Which part each role of a graph plays in an expert demonstration, decided before any rollout.

The demonstrator knows two ways to settle a lookup: a *browsing* role searches and reads a page itself
(it needs a search tool and a scrape tool), a *delegating* role hands each lookup to a child role along
an edge whose subtree can browse. A graph whose root cannot reach a browsing role this way cannot be
demonstrated; :func:`plan_expert` says which role fails and why, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from matpo_graph.core.program import CallableView, Program, RoleProgram

__all__ = ["ExpertUnsupported", "RoleStrategy", "plan_expert"]


class ExpertUnsupported(ValueError):
    """The expert demonstrator cannot play a role of this graph."""

    def __init__(self, role: str, reason: str) -> None:
        super().__init__(f"the expert demonstrator cannot play role {role!r}: {reason}")
        self.role = role
        self.reason = reason


@dataclass(frozen=True)
class RoleStrategy:
    """How the demonstrator plays one role."""

    role: str
    kind: Literal["browse", "delegate"]
    search: str | None = None
    """Browse: the search callable's name and its query argument."""
    search_arg: str | None = None
    scrape: str | None = None
    """Browse: the scrape callable's name and its URL argument."""
    scrape_arg: str | None = None
    child: str | None = None
    """Delegate: the edge (callable) name and the string argument that carries the lookup."""
    child_arg: str | None = None
    child_role: str | None = None


def _string_arg(c: CallableView, preferred: tuple[str, ...]) -> str | None:
    """The one string argument a call needs (a preferred name first); None if the schema wants more."""
    props: dict[str, Any] = c.parameters.get("properties") or {}
    required = list(c.parameters.get("required") or [])
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    if any(r not in strings for r in required) or len(required) > 1:
        return None
    if required:
        return required[0]
    for name in preferred:
        if name in strings:
            return name
    return strings[0] if strings else None


def _tools_of(program: Program, role: RoleProgram, backend: str) -> list[CallableView]:
    return [c for c in role.callables if c.kind == "tool" and program.tools.get(c.target, {}).get("backend") == backend]


def _browse(program: Program, role: RoleProgram) -> RoleStrategy | str:
    searches, scrapes = _tools_of(program, role, "search"), _tools_of(program, role, "scrape")
    if not searches or not scrapes:
        return "it has no search tool" if not searches else "it can search but has no scrape tool to read pages"
    search, scrape = searches[0], scrapes[0]
    q = _string_arg(search, ("query", "q"))
    u = _string_arg(scrape, ("url",))
    if q is None or u is None:
        bad = search.name if q is None else scrape.name
        return f"the arguments of {bad!r} are not one string the expert can fill"
    return RoleStrategy(role.name, "browse", search=search.name, search_arg=q, scrape=scrape.name, scrape_arg=u)


def plan_expert(program: Program) -> dict[str, RoleStrategy]:
    """A strategy for every role the demonstrator will play, starting from the root.

    A role with delegation edges delegates along the first edge whose child can (transitively) browse;
    otherwise it must browse itself. Roles the demonstrator never reaches get no strategy.

    Raises:
        ExpertUnsupported: the root, or a role on the chosen path, can neither browse nor delegate to
            a role that browses; the message names the role and the reason.
    """
    memo: dict[tuple[str, int], RoleStrategy | str] = {}

    def solve(name: str, trail: tuple[str, ...]) -> RoleStrategy | str:
        key = (name, len(trail))
        if key in memo:
            return memo[key]
        if name in trail:
            return "its delegation edges only lead back to roles on the same path"
        role = program.roles[name]
        reasons: list[str] = []
        for c in (c for c in role.callables if c.kind == "child"):
            if len(trail) + 1 > program.max_depth:
                reasons.append(f"edge {c.name!r} goes beyond max_depth {program.max_depth}")
                continue
            arg = _string_arg(c, ("subtask", "task", "question", "query"))
            if arg is None:
                reasons.append(f"edge {c.name!r} needs arguments other than one lookup string")
                continue
            below = solve(c.target, (*trail, name))
            if isinstance(below, RoleStrategy):
                memo[key] = RoleStrategy(name, "delegate", child=c.name, child_arg=arg, child_role=c.target)
                return memo[key]
            reasons.append(f"edge {c.name!r} leads to {c.target!r}, which cannot look facts up ({below})")
        browse = _browse(program, role)
        if isinstance(browse, RoleStrategy):
            memo[key] = browse
        else:
            memo[key] = f"{'; '.join(reasons)}; and it cannot browse itself ({browse})" if reasons else browse
        return memo[key]

    root = solve(program.root, ())
    if not isinstance(root, RoleStrategy):
        raise ExpertUnsupported(program.root, f"{root}. The expert needs a role with search and scrape tools, "
                                "reachable from the root through delegation edges that take one lookup string")
    out: dict[str, RoleStrategy] = {}
    strategy: RoleStrategy | str = root
    depth = 0
    while isinstance(strategy, RoleStrategy) and strategy.role not in out:
        out[strategy.role] = strategy
        depth += 1
        strategy = memo.get((strategy.child_role, depth), "") if strategy.child_role else ""
    return out
