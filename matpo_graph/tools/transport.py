"""HTTP clients for tools: one httpx client per event loop, optionally pinned to guard-checked addresses.

With a guard, the connection itself resolves the host through the guard and connects to the checked
address, so a name that resolves to a public address at check time and to a private one at connect time
(DNS rebinding) is still refused. Allowed hosts connect normally.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from matpo_graph.tools.netguard import AddressGuard

__all__ = ["GUARD_REFUSAL_PREFIX", "LoopLocalClient", "make_client"]

log = logging.getLogger(__name__)

GUARD_REFUSAL_PREFIX = "refused by address guard: "


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the guard accepts (the address checked is the address used)."""

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        problem, ips = await self._guard.check_host(host, port)
        if problem:
            raise httpcore.ConnectError(GUARD_REFUSAL_PREFIX + problem)
        last: Exception | None = None
        for target in ips or [host]:  # every address was checked; use the first that answers
            try:
                return await self._inner.connect_tcp(
                    target, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"cannot connect to {host}")

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise httpcore.ConnectError(GUARD_REFUSAL_PREFIX + "unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def make_client(*, guard: AddressGuard | None = None, trust_env: bool = False,
                max_connections: int = 64) -> httpx.AsyncClient:
    """A client that never follows redirects by itself (callers check every hop)."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    transport = httpx.AsyncHTTPTransport(trust_env=trust_env, limits=limits)
    if guard is not None:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore.AsyncConnectionPool) and hasattr(pool, "_network_backend"):
            pool._network_backend = _PinnedBackend(guard)
        else:  # pragma: no cover - depends on the httpx/httpcore version
            log.warning("connection-level address pinning unavailable; relying on per-hop checks")
    return httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=trust_env)


class LoopLocalClient:
    """Hands out one client per running event loop (an httpx client cannot move between loops)."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client = make_client(**self._kwargs)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()
