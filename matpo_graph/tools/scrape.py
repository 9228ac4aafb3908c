"""Fetch one web page and return its title and clean text, refusing private addresses and binary bodies.

Redirects are followed by hand so that every hop is checked against the blocklist and the address
guard. Downloads are streamed and stop at config.max_bytes.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from matpo_graph.core.spec import ToolSpec
from matpo_graph.core.trust import TrustPolicy, active_trust
from matpo_graph.tools.cache import ResponseCache
from matpo_graph.tools.common import BaseTool, ToolConfigError, failure_for_status
from matpo_graph.tools.htmltext import html_to_text
from matpo_graph.tools.metrics import ToolFailure, ToolMetrics
from matpo_graph.tools.netguard import AddressGuard, Resolver
from matpo_graph.tools.search import EMBEDDED_PLACEHOLDER, blocklist_from_config
from matpo_graph.tools.transport import LoopLocalClient

__all__ = ["ScrapeTool", "normalise_url"]

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = ("text/plain", "text/markdown", "text/csv", "text/xml", "application/xml", "application/json")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_\-]+)""", re.IGNORECASE)
_REDIRECTS = (301, 302, 303, 307, 308)


def normalise_url(url: str) -> str:
    """Lower-case scheme and host, drop the fragment; used for cache keys."""
    parts = urlsplit(url.strip())
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, ""))


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    if not head:
        return False
    control = sum(1 for b in head if b < 9 or 13 < b < 32)
    return control / len(head) > 0.05


class ScrapeTool(BaseTool):
    """Arguments: `url` (or `link`); optional `format` ('text' or 'markdown') when the schema offers it."""

    backend = "scrape"

    def __init__(self, name: str, spec: ToolSpec, *, metrics: ToolMetrics | None = None,
                 cache: ResponseCache | None = None, embedded_url: str | None = None,
                 resolver: Resolver | None = None, trust: TrustPolicy | None = None) -> None:
        super().__init__(name, spec, metrics=metrics, cache=cache)
        trust = trust if trust is not None else active_trust()
        allow = list(self.settings["allow_hosts"])  # checked by the parser validate uses
        for entry in allow:  # the graph may ask for a private host; only the user can allow it
            problem = trust.host_entry_problem(entry)
            if problem:
                raise ToolConfigError(f"tool {name!r}: config.allow_hosts: {problem}")
        self.guard = AddressGuard([*allow, *trust.allow_hosts], resolver=resolver)
        endpoint = self.settings["endpoint"]
        if endpoint == "embedded" and not embedded_url:
            raise ToolConfigError(f"tool {name!r} uses endpoint: embedded, but no embedded web URL was given")
        self.embedded_url = embedded_url.rstrip("/") if embedded_url and endpoint in (None, "embedded") else None
        if self.embedded_url:
            self.guard.allow(self.embedded_url)
        self.format = self.settings["format"]
        self.max_bytes = self.settings["max_bytes"]
        self.max_redirects = self.settings["max_redirects"]
        self.user_agent = self.settings["user_agent"]
        self.blocklist = blocklist_from_config(self.settings)
        self._client = LoopLocalClient(guard=self.guard, trust_env=self.settings["trust_env"])

    def _args(self, args: dict[str, Any]) -> tuple[str, str]:
        url = args.get("url", args.get("link"))
        if not isinstance(url, str) or not url.strip():
            raise ToolFailure("invalid_args", "invalid arguments: give a 'url' string")
        fmt = args.get("format", self.format)
        if fmt not in ("text", "markdown"):
            fmt = self.format
        url = url.strip()
        if "://" not in url:
            url = "https://" + url
        return url, fmt

    def cache_material(self, args: dict[str, Any]) -> dict[str, Any] | None:
        url, fmt = self._args(args)
        return {"tool": self.name, "backend": self.backend, "url": self.portable(normalise_url(url)), "format": fmt,
                "max_bytes": self.max_bytes}

    def portable(self, text: str) -> str:
        return text.replace(self.embedded_url, EMBEDDED_PLACEHOLDER) if self.embedded_url else text

    def localise(self, text: str) -> str:
        return text.replace(EMBEDDED_PLACEHOLDER, self.embedded_url) if self.embedded_url else text

    async def _check(self, url: str) -> None:
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise ToolFailure("invalid_url", f"only http(s) URLs can be scraped, not {scheme or 'this'}:")
        if self.blocklist.blocks(url):
            raise ToolFailure("blocked", f"this URL is blocked: {url[:200]}")
        problem = await self.guard.check_url(url)
        if problem:
            raise ToolFailure("ssrf", f"refused: {problem}")

    async def _attempt(self, args: dict[str, Any]) -> str:
        url, fmt = self._args(args)
        client = self._client.get()
        for _ in range(self.max_redirects + 1):
            await self._check(url)
            request = client.build_request("GET", url, headers={"User-Agent": self.user_agent,
                                                                "Accept": "text/html,text/plain;q=0.9,*/*;q=0.1"},
                                           timeout=self.spec.timeout_s)
            response = await client.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    url = urljoin(str(response.url), location)
                    continue
                failure = failure_for_status(response)
                if failure is not None:
                    raise failure
                return await self._read(response, url, fmt)
            finally:
                await response.aclose()
        raise ToolFailure("redirects", f"too many redirects (more than {self.max_redirects})")

    async def _read(self, response: httpx.Response, url: str, fmt: str) -> str:
        ctype = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype and not (ctype in _HTML_TYPES or ctype in _TEXT_TYPES or ctype.startswith("text/")):
            raise ToolFailure("not_html", f"cannot read this page: content type {ctype} is not HTML or text")
        body = bytearray()
        truncated = False
        async for chunk in response.aiter_bytes():
            body.extend(chunk)
            if len(body) >= self.max_bytes:
                del body[self.max_bytes:]
                truncated = True
                break
        raw = bytes(body)
        if _looks_binary(raw[:4096]):
            raise ToolFailure("not_html", "cannot read this page: the body is binary, not HTML or text")
        encoding = response.charset_encoding
        if encoding is None:
            found = _META_CHARSET.search(raw[:4096])
            encoding = found.group(1).decode("ascii") if found else "utf-8"
        try:
            text = raw.decode(encoding, errors="replace")
        except LookupError:
            text = raw.decode("utf-8", errors="replace")
        is_html = ctype in _HTML_TYPES or (not ctype and "<html" in text[:2048].lower())
        if is_html:
            title, body_text = html_to_text(text, markdown=fmt == "markdown", base_url=url)
        else:
            title, body_text = "", text.strip()
        lines = []
        if title:
            lines.append(f"Title: {title}")
        lines.append(f"URL: {url}")
        if truncated:
            lines.append(f"(page cut at {self.max_bytes} bytes)")
        lines.append("")
        lines.append(body_text or "(the page has no readable text)")
        return "\n".join(lines)

    async def aclose(self) -> None:
        await self._client.aclose()
