"""Hand-made programs and small local tools for runtime tests."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from matpo_graph.core.program import CallableView, Program, RoleProgram, TemplateSource
from matpo_graph.core.templates import DEFAULT_CHILD_USER, DEFAULT_ROOT_USER, DEFAULT_SUMMARY
from matpo_graph.tools.base import ToolResult

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
    "additionalProperties": False,
}
SUBTASK_SCHEMA = {"type": "object", "properties": {"subtask": {"type": "string"}}, "required": ["subtask"]}


def tpl(source: str, origin: str = "inline") -> TemplateSource:
    return TemplateSource(source=source, origin=origin, sha256=hashlib.sha256(source.encode()).hexdigest())


def search_callable(name: str = "web_search", **kw: Any) -> CallableView:
    return CallableView(
        name=name, description="Search the web.", parameters=SEARCH_SCHEMA, kind="tool", target=name, **kw
    )


def child_callable(name: str = "ask_worker", target: str = "worker", **kw: Any) -> CallableView:
    return CallableView(
        name=name, description="Delegate a lookup.", parameters=SUBTASK_SCHEMA, kind="child", target=target, **kw
    )


def role(name: str, callables: list[CallableView] = (), **kw: Any) -> RoleProgram:
    base: dict[str, Any] = {
        "name": name,
        "system": tpl(
            "You are the {{ role }} at depth {{ depth }}.\n{{ tool_instructions }}\n{{ answer_instructions }}"
        ),
        "user": tpl(DEFAULT_ROOT_USER if kw.pop("root", False) else DEFAULT_CHILD_USER),
        "summary": tpl(DEFAULT_SUMMARY),
        "callables": list(callables),
        "max_turns": 4,
        "max_tokens_per_turn": 256,
        "final_summary": "never",
    }
    base.update(kw)
    return RoleProgram(**base)


def program(roles: dict[str, RoleProgram], *, root: str = "planner", fmt: str = "hermes", **kw: Any) -> Program:
    base: dict[str, Any] = {
        "graph_name": "test_graph",
        "graph_sha256": "0" * 64,
        "root": root,
        "tool_call_format": fmt,
        "answer_format": "boxed",
        "roles": roles,
        "tools": {},
        "max_depth": 2,
        "context_tokens": 4096,
        "summary_reserve": 128,
        "max_concurrency": 16,
    }
    base.update(kw)
    return Program(**base)


def planner_worker(**limits: Any) -> Program:
    """planner -(ask_worker, max_parallel 4)-> worker -(web_search)-> tool."""
    worker_kw = limits.pop("worker", {})
    planner_kw = limits.pop("planner", {})
    edge_kw = limits.pop("edge", {})
    return program(
        {
            "planner": role(
                "planner",
                [child_callable(max_parallel=edge_kw.pop("max_parallel", 4), **edge_kw)],
                root=True,
                **planner_kw,
            ),
            "worker": role("worker", [search_callable()], **worker_kw),
        },
        **limits,
    )


class EchoSearch:
    """A small local tool: echoes the query, optionally after a delay; counts calls and concurrency."""

    def __init__(
        self, name: str = "web_search", *, latency_s: float = 0.0, text: str | None = None, fail: bool = False
    ) -> None:
        self.name = name
        self.latency_s = latency_s
        self.text = text
        self.fail = fail
        self.calls: list[dict[str, Any]] = []
        self.active = 0
        self.max_active = 0

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append(arguments)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if self.fail:
                raise RuntimeError("backend exploded")
            return ToolResult(text=self.text if self.text is not None else f"result for {arguments.get('query')}")
        finally:
            self.active -= 1
