"""Where a tool may go: URL blocklists and the scrape SSRF guard (checked on the resolved address).

The model chooses scrape URLs, so a URL is only fetched when every address its host resolves to is a
public unicast address, unless the host (or host:port) is explicitly allowed. Addresses are classified
by :mod:`matpo_graph.core.addresses`, the same rules ``validate`` applies. The guard is applied
before each request, again on every redirect hop, and once more inside the connection itself
(:mod:`matpo_graph.tools.transport`), so a name that re-resolves to a private address is still refused.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from matpo_graph.core.addresses import METADATA_HOSTS, address_problem, canonical_host, parse_ip
from matpo_graph.core.trust import split_host_entry

__all__ = [
    "DEFAULT_BLOCKLIST",
    "AddressGuard",
    "Resolver",
    "UrlBlocklist",
    "address_problem",
    "static_resolver",
    "system_resolver",
]

DEFAULT_BLOCKLIST: tuple[str, ...] = ("huggingface.co/datasets", "huggingface.co/spaces")

Resolver = Callable[[str], Awaitable[Sequence[str]]]
"""Maps a host name to the IP addresses a connection could use. Tests plug in a static table."""


async def system_resolver(host: str) -> list[str]:
    """Resolve with the operating system (getaddrinfo), without blocking the event loop."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for info in infos:
        seen.setdefault(str(info[4][0]).split("%", 1)[0], None)
    return list(seen)


def static_resolver(table: Mapping[str, Sequence[str]], *, fallback: Resolver | None = None) -> Resolver:
    """A resolver answering from `table` (host -> addresses); unknown hosts go to `fallback` or fail."""
    lowered = {k.lower(): list(v) for k, v in table.items()}

    async def resolve(host: str) -> Sequence[str]:
        if host.lower() in lowered:
            return lowered[host.lower()]
        if fallback is not None:
            return await fallback(host)
        raise OSError(f"cannot resolve {host!r}")

    return resolve


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and parts.scheme in ("http", "https"):
        port = 80 if parts.scheme == "http" else 443
    return host, port


class AddressGuard:
    """Refuses hosts that resolve to non-public addresses, except explicitly allowed hosts.

    Args:
        allow_hosts: entries 'host' (any port) or 'host:port'; IPv6 literals as '[::1]:8080'.
        resolver: name resolution hook; the system resolver by default.
    """

    def __init__(self, allow_hosts: Iterable[str] = (), *, resolver: Resolver | None = None) -> None:
        self._any_port: set[str] = set()
        self._with_port: set[tuple[str, int]] = set()
        for entry in allow_hosts:
            self.allow(entry)
        self.resolver: Resolver = resolver or system_resolver

    def allow(self, entry: str) -> None:
        """Add an allowed 'host' or 'host:port' (a full URL is accepted too), read as the trust policy
        reads it (:func:`~matpo_graph.core.trust.split_host_entry`)."""
        host, port = split_host_entry(entry)
        if not host:
            return
        if port is None:
            self._any_port.add(host)
        else:
            self._with_port.add((host, port))

    def is_allowed(self, host: str, port: int | None) -> bool:
        host = canonical_host(host)
        return host in self._any_port or (host, port or 0) in self._with_port

    async def check_host(self, host: str, port: int | None) -> tuple[str | None, list[str]]:
        """Return (problem, addresses): problem is None when the host may be contacted."""
        host = host.lower().rstrip(".").strip("[]")
        if not host:
            return "URL has no host", []
        if self.is_allowed(host, port):
            return None, []
        if host in METADATA_HOSTS:
            return f"{host} is a cloud metadata host", []
        literal = parse_ip(host)  # in any spelling the system resolver reads as an address
        if literal is not None:
            ips = [str(literal)]
        else:
            try:
                ips = list(await self.resolver(host))
            except (OSError, UnicodeError) as exc:
                return f"cannot resolve {host}: {type(exc).__name__}", []
        if not ips:
            return f"cannot resolve {host}", []
        for ip in ips:
            problem = address_problem(ip)
            if problem:
                return f"{host} resolves to a {problem} ({ip})", ips
        return None, ips

    async def check_url(self, url: str) -> str | None:
        """None when `url` may be fetched, else a short reason naming the refused address."""
        host, port = _host_port(url)
        problem, _ = await self.check_host(host, port)
        return problem


class UrlBlocklist:
    """Host + path-prefix patterns such as 'huggingface.co/datasets' (subdomains of the host match too)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns: list[tuple[str, str]] = []
        for pattern in patterns:
            text = pattern.strip().lower()
            if "://" in text:
                text = text.split("://", 1)[1]
            host, _, path = text.partition("/")
            if host:
                self.patterns.append((host.rstrip("."), "/" + path if path else ""))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def blocks(self, url: str) -> bool:
        """True when `url` falls under one of the patterns."""
        try:
            parts = urlsplit(url.strip() if "://" in url else "http://" + url.strip())
        except ValueError:
            return False
        host = (parts.hostname or "").lower().rstrip(".")
        path = (parts.path or "/").lower()
        for p_host, p_path in self.patterns:
            if host == p_host or host.endswith("." + p_host):
                if not p_path or path == p_path or path.startswith(p_path.rstrip("/") + "/"):
                    return True
        return False
