"""Build the tools of a graph from their ToolSpecs: one shared metrics counter and cache per registry."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from matpo_graph.core.spec import ToolSpec
from matpo_graph.core.trust import TrustPolicy, active_trust
from matpo_graph.tools.base import Tool
from matpo_graph.tools.cache import ResponseCache
from matpo_graph.tools.common import BaseTool, ToolConfigError
from matpo_graph.tools.metrics import ToolMetrics
from matpo_graph.tools.netguard import Resolver

__all__ = ["BACKENDS", "ToolRegistry", "build_tools"]

BACKENDS: tuple[str, ...] = ("search", "scrape", "python")


class ToolRegistry(dict[str, Tool]):
    """The built tools by name (a plain dict), plus their shared `metrics` and `aclose()`."""

    def __init__(self, tools: Mapping[str, Tool], metrics: ToolMetrics, cache: ResponseCache | None) -> None:
        super().__init__(tools)
        self.metrics = metrics
        self.cache = cache

    async def aclose(self) -> None:
        """Close HTTP clients opened in the current event loop."""
        for tool in self.values():
            closer = getattr(tool, "aclose", None)
            if closer is not None:
                await closer()


def _as_spec(name: str, spec: ToolSpec | Mapping[str, Any]) -> ToolSpec:
    if isinstance(spec, ToolSpec):
        return spec
    try:
        return ToolSpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise ToolConfigError(f"tool {name!r}: invalid spec: {exc.errors()[0]['msg']}") from None


def _as_cache(cache: ResponseCache | str | os.PathLike[str] | None) -> ResponseCache | None:
    if cache is None or isinstance(cache, ResponseCache):
        return cache
    return ResponseCache(Path(cache), mode="readwrite")


def build_tools(
    tool_specs: Mapping[str, ToolSpec | Mapping[str, Any]],
    *,
    embedded_url: str | None = None,
    cache: ResponseCache | str | os.PathLike[str] | None = None,
    resolver: Resolver | None = None,
    metrics: ToolMetrics | None = None,
    trust: TrustPolicy | None = None,
) -> ToolRegistry:
    """Turn tool specs into callable tools.

    Args:
        tool_specs: name -> ToolSpec (or its dict form), e.g. `program.tools`.
        embedded_url: base URL of a running embedded web; search tools with `endpoint: embedded` use it,
            and scrape tools may fetch from exactly that host:port.
        cache: a ResponseCache, or a folder (readwrite mode); None disables caching.
        resolver: host-name resolution hook for the scrape address guard (the system resolver by default).
        metrics: counters to share with other registries; a fresh one by default.
        trust: what the user allows the specs to do (python functions to import, API keys to send and
            where, non-public hosts to reach); by default the active policy
            (:func:`matpo_graph.core.trust.active_trust`).

    Raises:
        ToolConfigError: a spec is invalid, names an unknown backend, untrusted code or an API key not
            allowed for its endpoint, or a python function cannot be imported.
    """
    from matpo_graph.tools.python_tool import PythonTool
    from matpo_graph.tools.scrape import ScrapeTool
    from matpo_graph.tools.search import SearchTool

    metrics = metrics if metrics is not None else ToolMetrics()
    trust = trust if trust is not None else active_trust()
    response_cache = _as_cache(cache)
    tools: dict[str, BaseTool] = {}
    for name, raw in tool_specs.items():
        spec = _as_spec(name, raw)
        if spec.backend == "search":
            tools[name] = SearchTool(name, spec, metrics=metrics, cache=response_cache, embedded_url=embedded_url,
                                     resolver=resolver, trust=trust)
        elif spec.backend == "scrape":
            tools[name] = ScrapeTool(name, spec, metrics=metrics, cache=response_cache,
                                     embedded_url=embedded_url, resolver=resolver, trust=trust)
        elif spec.backend == "python":
            tools[name] = PythonTool(name, spec, metrics=metrics, cache=response_cache, trust=trust)
        else:  # pragma: no cover - ToolSpec already restricts the backend
            raise ToolConfigError(f"tool {name!r}: unknown backend {spec.backend!r}; known: {', '.join(BACKENDS)}")
    return ToolRegistry(tools, metrics, response_cache)
