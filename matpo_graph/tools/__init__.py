"""Tools a graph's roles call: web search, page scraping and Python functions (imported lazily)."""

from __future__ import annotations

from typing import Any

__all__ = ["Tool", "ToolResult", "ToolMetrics", "ResponseCache", "build_tools"]

_LAZY = {
    "Tool": "matpo_graph.tools.base",
    "ToolResult": "matpo_graph.tools.base",
    "ToolMetrics": "matpo_graph.tools.metrics",
    "ResponseCache": "matpo_graph.tools.cache",
    "build_tools": "matpo_graph.tools.registry",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'matpo_graph.tools' has no attribute {name!r}")
