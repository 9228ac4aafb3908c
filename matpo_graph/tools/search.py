"""Web search over a Serper-compatible endpoint (Serper itself, or the embedded web), as short text.

Request: POST {q, num, **config.params} with header X-API-KEY (read from the environment variable
named by config.api_key_env at call time). Response: {"organic": [{title, link, snippet, position}]}.
Blocklisted links are removed before the model sees them.

The endpoint and the key's variable come from the graph, so the key is sent only when the user's
trust policy granted that variable for that endpoint (over https, or to the embedded web), the
endpoint passes the scrape tool's address guard (private, loopback, link-local and metadata
addresses only when the user allowed the host), and the response body is read up to
config.max_bytes (2 MB by default) and no further.
"""

from __future__ import annotations

import json
import os
from typing import Any

from matpo_graph.core.spec import ToolSpec
from matpo_graph.core.toolconfig import SERPER_ENDPOINT
from matpo_graph.core.trust import TrustPolicy, active_trust
from matpo_graph.tools.cache import ResponseCache, normalise_args
from matpo_graph.tools.common import BaseTool, ToolConfigError, failure_for_status
from matpo_graph.tools.metrics import ToolFailure, ToolMetrics
from matpo_graph.tools.netguard import DEFAULT_BLOCKLIST, AddressGuard, Resolver, UrlBlocklist
from matpo_graph.tools.transport import LoopLocalClient

__all__ = ["SERPER_ENDPOINT", "EMBEDDED_PLACEHOLDER", "SearchTool", "blocklist_from_config", "format_results"]

EMBEDDED_PLACEHOLDER = "http://embedded-web.invalid"
_MAX_NUM = 20


def blocklist_from_config(config: dict[str, Any]) -> UrlBlocklist:
    """Default patterns plus config.blocklist; config.blocklist_defaults=false drops the defaults."""
    extra = config.get("blocklist") or []
    if isinstance(extra, str):
        extra = [extra]
    if not isinstance(extra, (list, tuple)) or not all(isinstance(p, str) for p in extra):
        raise ToolConfigError("config.blocklist must be a list of 'host/path' patterns")
    defaults = DEFAULT_BLOCKLIST if config.get("blocklist_defaults", True) else ()
    return UrlBlocklist([*defaults, *extra])


def format_results(query: str, results: list[dict[str, Any]], answer: str | None = None) -> str:
    """The text the model reads: numbered results with title, URL and snippet."""
    if not results and not answer:
        return f'No results found for "{query}".'
    lines = [f'Search results for "{query}":']
    if answer:
        lines.append(f"Answer box: {answer}")
    for i, item in enumerate(results, 1):
        lines.append("")
        lines.append(f"[{i}] {item['title']}")
        lines.append(f"URL: {item['link']}")
        if item.get("snippet"):
            lines.append(item["snippet"])
    return "\n".join(lines)


class SearchTool(BaseTool):
    """Serper-style search. Arguments: `query` (or `q`), optional `num_results` (or `num`)."""

    backend = "search"

    def __init__(self, name: str, spec: ToolSpec, *, metrics: ToolMetrics | None = None,
                 cache: ResponseCache | None = None, embedded_url: str | None = None,
                 resolver: Resolver | None = None, trust: TrustPolicy | None = None) -> None:
        super().__init__(name, spec, metrics=metrics, cache=cache)
        trust = trust if trust is not None else active_trust()
        endpoint = self.settings["endpoint"]  # checked by the parser validate uses
        self.embedded = endpoint == "embedded"
        self.embedded_url = embedded_url.rstrip("/") if embedded_url else None
        if self.embedded:
            if not self.embedded_url:
                raise ToolConfigError(f"tool {name!r} uses endpoint: embedded, but no embedded web URL was given")
            endpoint = self.embedded_url + "/search"
        self.endpoint = endpoint
        key_env = self.settings["api_key_env"]
        if key_env is not None:
            problem = trust.secret_problem(key_env, "embedded" if self.embedded else endpoint)
            if problem:
                raise ToolConfigError(f"tool {name!r}: {problem}")
        self.api_key_env: str | None = key_env
        self.max_bytes = self.settings["max_bytes"]
        self.guard = AddressGuard(trust.allow_hosts, resolver=resolver)
        if self.embedded_url:
            self.guard.allow(self.embedded_url)
        self.num_results = self.settings["num_results"]
        self.params: dict[str, Any] = self.settings["params"]
        self.blocklist = blocklist_from_config(self.settings)
        self._client = LoopLocalClient(guard=self.guard, trust_env=self.settings["trust_env"])

    def secrets(self) -> list[str]:
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return [key] if key else []

    def cache_material(self, args: dict[str, Any]) -> dict[str, Any] | None:
        query, num = self._query(args)
        endpoint = "embedded" if self.embedded else self.endpoint
        return {"tool": self.name, "backend": self.backend, "endpoint": endpoint, "q": normalise_args(query),
                "num": num, "params": normalise_args(self.params),
                "blocklist": sorted(map("".join, self.blocklist.patterns))}

    def portable(self, text: str) -> str:
        return text.replace(self.embedded_url, EMBEDDED_PLACEHOLDER) if self.embedded_url else text

    def localise(self, text: str) -> str:
        return text.replace(EMBEDDED_PLACEHOLDER, self.embedded_url) if self.embedded_url else text

    def _query(self, args: dict[str, Any]) -> tuple[str, int]:
        query = args.get("query", args.get("q"))
        if not isinstance(query, str) or not query.strip():
            raise ToolFailure("invalid_args", "invalid arguments: give a non-empty 'query' string")
        num = args.get("num_results", args.get("num", self.num_results))
        try:
            num = max(1, min(_MAX_NUM, int(num)))
        except (TypeError, ValueError):
            num = self.num_results
        return query.strip(), num

    async def _attempt(self, args: dict[str, Any]) -> str:
        query, num = self._query(args)
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ToolFailure("config", f"search API key missing: set the environment variable {self.api_key_env}")
            headers["X-API-KEY"] = key
        payload = {**self.params, "q": query, "num": num}
        problem = await self.guard.check_url(self.endpoint)
        if problem:
            raise ToolFailure("ssrf", f"refused: {problem}")
        client = self._client.get()
        request = client.build_request("POST", self.endpoint, json=payload, headers=headers, timeout=self.spec.timeout_s)
        response = await client.send(request, stream=True)
        try:
            failure = failure_for_status(response)
            if failure is not None:
                raise failure
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > self.max_bytes:
                    raise ToolFailure("bad_response", f"search response larger than {self.max_bytes} bytes (config.max_bytes)")
        finally:
            await response.aclose()
        try:
            data = json.loads(bytes(body))
        except ValueError:
            raise ToolFailure("bad_response", "search endpoint returned invalid JSON") from None
        if not isinstance(data, dict) or not isinstance(data.get("organic", []), list):
            raise ToolFailure("bad_response", "search endpoint returned an unexpected shape (no 'organic' list)")
        results = []
        for item in data.get("organic", []):
            if not isinstance(item, dict) or not isinstance(item.get("link"), str):
                continue
            if self.blocklist.blocks(item["link"]):
                continue
            results.append({"title": str(item.get("title", "")).strip() or item["link"], "link": item["link"],
                            "snippet": " ".join(str(item.get("snippet", "")).split())})
        answer = None
        box = data.get("answerBox")
        if isinstance(box, dict) and not self.blocklist.blocks(str(box.get("link", ""))):
            answer = box.get("answer") or box.get("snippet")
            answer = " ".join(str(answer).split()) if answer else None
        return format_results(query, results[:num], answer)

    async def aclose(self) -> None:
        await self._client.aclose()
