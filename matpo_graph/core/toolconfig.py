"""A tool's ``config`` read once, the same way by ``validate`` and by the tools that run it.

Each backend's settings (endpoint, key variable, hosts, sizes, retries) are checked here for type and
range and returned normalised; :mod:`matpo_graph.tools` builds its tools from the result, and
``validate`` reports a :class:`ToolConfigProblem` at ``tools.NAME.config.KEY``, so a config that
validates also builds. Keys a backend does not read are left alone. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from matpo_graph.core.addresses import http_url_problem
from matpo_graph.core.trust import code_ref_problem

__all__ = ["SERPER_ENDPOINT", "ToolConfigProblem", "parse_tool_config"]

SERPER_ENDPOINT = "https://google.serper.dev/search"


class ToolConfigProblem(ValueError):
    """A config value a backend cannot use; `key` is its path inside ``config``."""

    def __init__(self, key: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:
        where = "config." + ".".join(str(k) for k in self.key) if self.key else "config"
        return f"{where}: {self.args[0]}"


def _number(config: Mapping[str, Any], key: str, default: float, *, low: float, high: float, integer: bool = False) -> Any:
    value = config.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (isinstance(value, float) and not math.isfinite(value)):
        raise ToolConfigProblem((key,), f"must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not low <= value <= high:
        raise ToolConfigProblem((key,), f"must be between {low:g} and {high:g}, got {value!r}")
    return int(value) if integer else float(value)


def _flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ToolConfigProblem((key,), f"must be true or false, got {value!r}")
    return value


def _strings(config: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    value = config.get(key, [])
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ToolConfigProblem((key,), f"must be a list of {what}, got {type(value).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            loc = (key,) if isinstance(value, str) else (key, i)
            raise ToolConfigProblem(loc, f"must be a list of {what}; got {item!r}")
    return tuple(items)


def _common(config: Mapping[str, Any], timeout_s: float, cache_default: bool) -> dict[str, Any]:
    return {
        "cache": _flag(config, "cache", cache_default),
        "backoff_s": _number(config, "backoff_s", 0.5, low=0, high=600),
        "max_backoff_s": _number(config, "max_backoff_s", 8.0, low=0, high=3600),
        "max_retry_after_s": _number(config, "max_retry_after_s", 30.0, low=0, high=3600),
        "jitter": _number(config, "jitter", 0.5, low=0, high=1),
        "deadline_s": _number(config, "deadline_s", max(60.0, 2.0 * timeout_s), low=0.001, high=86_400),
    }


def _blocklist(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"blocklist": _strings(config, "blocklist", "'host/path' patterns"),
            "blocklist_defaults": _flag(config, "blocklist_defaults", True)}


def _search(config: Mapping[str, Any]) -> dict[str, Any]:
    endpoint = config.get("endpoint", SERPER_ENDPOINT)
    if endpoint != "embedded":
        problem = http_url_problem(endpoint)
        if problem:
            raise ToolConfigProblem(("endpoint",), f"{problem} (or 'embedded')")
        endpoint = endpoint.strip()
    key_env = config.get("api_key_env", None if endpoint == "embedded" else "SERPER_API_KEY")
    if key_env is not None and (not isinstance(key_env, str) or not key_env.strip()):
        raise ToolConfigProblem(("api_key_env",), f"must be the NAME of an environment variable, got {key_env!r}")
    params = config.get("params", {})
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ToolConfigProblem(("params",), "must be a mapping of request fields (e.g. {gl: us, hl: en})")
    return {
        "endpoint": endpoint,
        "api_key_env": key_env,
        "max_bytes": _number(config, "max_bytes", 2_000_000, low=1, high=50_000_000, integer=True),
        "num_results": _number(config, "num_results", 10, low=1, high=100, integer=True),
        "params": params,
        "trust_env": _flag(config, "trust_env", False),
        **_blocklist(config),
    }


def _scrape(config: Mapping[str, Any]) -> dict[str, Any]:
    endpoint = config.get("endpoint")
    if endpoint not in (None, "embedded"):
        raise ToolConfigProblem(("endpoint",), f"a scrape tool's endpoint is 'embedded' or left out, got {endpoint!r}")
    fmt = config.get("format", "text")
    if fmt not in ("text", "markdown"):
        raise ToolConfigProblem(("format",), f"must be 'text' or 'markdown', got {fmt!r}")
    agent = config.get("user_agent", "matpo-graph-scraper/0.1")
    if not isinstance(agent, str) or not agent.strip() or len(agent) > 200 or not agent.isprintable():
        raise ToolConfigProblem(("user_agent",), "must be one line of printable text (at most 200 characters)")
    return {
        "allow_hosts": tuple(h.strip() for h in _strings(config, "allow_hosts", "'host' or 'host:port'")),
        "endpoint": endpoint,
        "format": fmt,
        "max_bytes": _number(config, "max_bytes", 2_000_000, low=1, high=50_000_000, integer=True),
        "max_redirects": _number(config, "max_redirects", 5, low=0, high=20, integer=True),
        "user_agent": agent,
        "trust_env": _flag(config, "trust_env", False),
        **_blocklist(config),
    }


def _python(config: Mapping[str, Any]) -> dict[str, Any]:
    function = config.get("function")
    problem = code_ref_problem(function)
    if problem:
        raise ToolConfigProblem(("function",), problem)
    return {"function": function}


def parse_tool_config(backend: str, config: Any, *, timeout_s: float = 20.0) -> dict[str, Any]:
    """The settings of one tool: the backend's keys and the shared retry and cache keys, normalised.

    Raises:
        ToolConfigProblem: the first value that cannot be used, with its key.
    """
    if not isinstance(config, Mapping):
        raise ToolConfigProblem((), f"must be a mapping, got {type(config).__name__}")
    own = {"search": _search, "scrape": _scrape, "python": _python}.get(backend)
    if own is None:
        raise ToolConfigProblem((), f"unknown backend {backend!r}")
    return {**_common(config, timeout_s, cache_default=backend != "python"), **own(config)}
