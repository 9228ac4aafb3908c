"""Run a Python function named in the graph ('module:function') as a tool.

Arguments are checked against the tool's JSON schema before the call; sync functions run in a worker
thread, async ones are awaited; both under the tool's timeout. Exceptions become error results.
Python tools are not retried (a failing function fails the same way again) and not cached unless
config.cache is true.

The function is named by the graph, so it is imported only when the user's trust policy allows it
(:mod:`matpo_graph.core.trust`); otherwise building the tool fails with the way to trust it.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from collections.abc import Callable
from typing import Any

from matpo_graph.core.spec import ToolSpec
from matpo_graph.core.trust import TrustPolicy, active_trust, code_ref_problem
from matpo_graph.tools.cache import ResponseCache
from matpo_graph.tools.common import BaseTool, ToolConfigError
from matpo_graph.tools.metrics import ToolFailure, ToolMetrics

__all__ = ["PythonTool", "import_function"]


def import_function(path: str, *, trust: TrustPolicy | None = None) -> Callable[..., Any]:
    """Import 'package.module:function' when `trust` (default: the active policy) allows it;
    raises ToolConfigError naming what is missing or how to trust it."""
    if code_ref_problem(path):
        raise ToolConfigError(f"python tool function must look like 'package.module:function', got {path!r}")
    module_name, _, attr = path.partition(":")
    problem = (trust if trust is not None else active_trust()).code_problem(path)
    if problem:
        raise ToolConfigError(f"python tool: {problem}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolConfigError(f"cannot import module {module_name!r} for python tool {path!r}: {exc}") from None
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise ToolConfigError(f"module {module_name!r} has no callable {attr!r} (python tool {path!r})")
    return fn


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class PythonTool(BaseTool):
    """Calls config.function with the validated arguments as keyword arguments."""

    backend = "python"
    cache_by_default = False

    def __init__(self, name: str, spec: ToolSpec, *, metrics: ToolMetrics | None = None,
                 cache: ResponseCache | None = None, trust: TrustPolicy | None = None) -> None:
        super().__init__(name, spec, metrics=metrics, cache=cache)
        self.function_path = str(self.settings["function"])
        self.function = import_function(self.function_path, trust=trust)
        self.is_async = inspect.iscoroutinefunction(self.function)

    def cache_material(self, args: dict[str, Any]) -> dict[str, Any] | None:
        material = super().cache_material(args)
        return {**material, "function": self.function_path} if material else None

    def retryable(self, failure: ToolFailure) -> bool:
        return False

    async def _attempt(self, args: dict[str, Any]) -> str:
        try:
            if self.is_async:
                value = await self.function(**args)
            else:
                value = await asyncio.to_thread(self.function, **args)
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as exc:
            message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise ToolFailure("exception", f"{type(exc).__name__}: {message}".rstrip(": ")) from None
        return _to_text(value)
