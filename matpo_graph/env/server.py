"""The embedded web as a real HTTP server on 127.0.0.1 (a small ASGI app served by uvicorn).

Routes: `POST /search` (Serper shape: {q, num} -> {organic: [...]}; `GET /search?q=&num=` too),
`GET /page/<slug>`, `GET /health`, `GET /`. Noise (errors, delays, empty or polluted results, cut pages)
is applied per request when configured.
"""

from __future__ import annotations

import asyncio
import html
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from matpo_graph.env.noise import NoiseConfig, NoiseSource
from matpo_graph.env.search_index import SearchIndex
from matpo_graph.env.world import DEFAULT_ENTITIES, DEFAULT_QUESTIONS, World, build_world

__all__ = ["EmbeddedWeb", "EmbeddedWebHandle", "serve_forever", "serve_in_thread"]

_MAX_BODY = 1_000_000
_MAX_NUM = 50

Scope = dict[str, Any]


class EmbeddedWeb:
    """The ASGI application: routes requests to the world's search index and pages."""

    def __init__(self, world: World, noise: NoiseConfig | None = None) -> None:
        self.world = world
        self.index = SearchIndex(world.pages)
        self.noise = NoiseSource(noise or NoiseConfig(), world.seed)
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        method, path = scope["method"], scope["path"]
        try:
            if path == "/health":
                await self._json(send, 200, {"status": "ok", "seed": self.world.seed, "pages": len(self.index),
                                             "noise": self.noise.config.active})
            elif path == "/search" and method in ("GET", "POST"):
                await self._search(scope, receive, send)
            elif path.startswith("/page/") and method == "GET":
                await self._page(scope, send, unquote(path[len("/page/"):]).strip("/"))
            elif path == "/" and method == "GET":
                await self._send(send, 200, self._home().encode("utf-8"), "text/html; charset=utf-8")
            else:
                await self._json(send, 404, {"error": "not found"})
        except _BadRequest as exc:
            await self._json(send, 400, {"error": str(exc)})

    # -- routes ------------------------------------------------------------------------------------
    async def _search(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["method"] == "POST":
            body = await _read_body(receive)
            try:
                payload = json.loads(body or b"{}")
            except ValueError:
                raise _BadRequest("body must be JSON like {\"q\": \"...\", \"num\": 10}") from None
            if not isinstance(payload, dict):
                raise _BadRequest("body must be a JSON object")
        else:
            payload = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        query = payload.get("q", payload.get("query"))
        if not isinstance(query, str) or not query.strip():
            raise _BadRequest("missing 'q'")
        try:
            num = max(1, min(_MAX_NUM, int(payload.get("num", 10))))
        except (TypeError, ValueError):
            raise _BadRequest("'num' must be an integer") from None
        decision = self.noise.decide("search", f"{' '.join(query.split())}|{num}")
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if decision.status != 200:
            await self._error(send, decision.status, decision.retry_after_s)
            return
        base = _base_url(scope)
        organic: list[dict[str, Any]] = []
        if not decision.empty:
            hits = self.index.search(query, num)
            organic = self.index.organic(hits, base)
            for slot, page_i in self.noise.irrelevant_slots(decision, len(organic), len(self.index)).items():
                page = self.index.page_at(page_i)
                organic[slot] = {"title": page.title, "link": f"{base}/page/{page.slug}",
                                 "snippet": " ".join(page.sentences[:2])[:240], "position": slot + 1}
        await self._json(send, 200, {"searchParameters": {"q": query, "num": num, "engine": "embedded"},
                                     "organic": organic})

    async def _page(self, scope: Scope, send: Any, slug: str) -> None:
        if slug not in self.world.pages:
            missing = b"<html><body><h1>Page not found</h1></body></html>"
            await self._send(send, 404, missing, "text/html; charset=utf-8")
            return
        decision = self.noise.decide("page", slug)
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if decision.status != 200:
            await self._error(send, decision.status, decision.retry_after_s)
            return
        document = self.world.page_html(slug)
        if decision.truncate_at is not None:
            document = document[: int(len(document) * decision.truncate_at)]
        await self._send(send, 200, document.encode("utf-8"), "text/html; charset=utf-8")

    def _home(self) -> str:
        return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Embedded Encyclopedia</title></head>"
                f"<body><h1>Embedded Encyclopedia</h1><p>{len(self.index)} pages, seed {self.world.seed}. "
                "Search with POST /search {\"q\": ...}; pages live under /page/&lt;slug&gt;.</p>"
                f"<p>Example: <a href=\"/page/{html.escape(self.world.entities[0].slug)}\">"
                f"{html.escape(self.world.entities[0].name)}</a></p></body></html>")

    # -- plumbing ----------------------------------------------------------------------------------
    async def _error(self, send: Any, status: int, retry_after: float | None) -> None:
        headers = [(b"retry-after", f"{retry_after:g}".encode())] if retry_after is not None else []
        await self._send(send, status, json.dumps({"error": "simulated failure"}).encode(), "application/json", headers)

    async def _json(self, send: Any, status: int, data: Any) -> None:
        await self._send(send, status, json.dumps(data, ensure_ascii=False).encode("utf-8"), "application/json")

    @staticmethod
    async def _send(send: Any, status: int, body: bytes, ctype: str,
                    extra: list[tuple[bytes, bytes]] | None = None) -> None:
        headers = [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode()), *(extra or [])]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _BadRequest(Exception):
    pass


async def _read_body(receive: Any) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            raise _BadRequest("request body too large")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _base_url(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"host":
            return f"http://{value.decode('latin-1')}"
    host, port = scope.get("server") or ("127.0.0.1", 80)
    return f"http://{host}:{port}"


@dataclass
class EmbeddedWebHandle:
    """A running server: `url` (no trailing slash), `world`, `app`, and `stop()`; usable as a context manager."""

    url: str
    world: World
    app: EmbeddedWeb
    _server: Any
    _thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> "EmbeddedWebHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _prepare(world: World | None, seed: int, n_entities: int, n_questions: int,
             noise: NoiseConfig | str | None, host: str, port: int) -> tuple[EmbeddedWeb, socket.socket, Any]:
    import uvicorn

    if world is None:
        world = build_world(seed, n_entities=n_entities, n_questions=n_questions)
    config_noise = NoiseConfig.parse(noise) if isinstance(noise, str) or noise is None else noise
    app = EmbeddedWeb(world, config_noise)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30,
                            backlog=1024)
    return app, sock, uvicorn.Server(config)


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_in_thread(seed: int = 0, port: int = 0, n_entities: int = DEFAULT_ENTITIES,
                    noise: NoiseConfig | str | None = None, *, world: World | None = None,
                    n_questions: int = DEFAULT_QUESTIONS, host: str = "127.0.0.1",
                    startup_timeout_s: float = 30.0) -> EmbeddedWebHandle:
    """Build the world of `seed` (or serve `world`) and serve it from a background thread.

    Returns once the server accepts connections. Port 0 picks a free port (see `handle.url`).
    """
    app, sock, server = _prepare(world, seed, n_entities, n_questions, noise, host, port)
    url = _url(sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="embedded-web", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("embedded web server failed to start")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"embedded web server did not start within {startup_timeout_s}s")
        time.sleep(0.01)
    return EmbeddedWebHandle(url, app.world, app, server, thread)


def serve_forever(seed: int = 0, port: int = 8765, n_entities: int = DEFAULT_ENTITIES,
                  noise: NoiseConfig | str | None = None, *, n_questions: int = DEFAULT_QUESTIONS,
                  host: str = "127.0.0.1", on_ready: Any = None) -> None:
    """Serve in the foreground until interrupted; `on_ready(url)` is called before serving."""
    app, sock, server = _prepare(None, seed, n_entities, n_questions, noise, host, port)
    if on_ready is not None:
        on_ready(_url(sock))
    server.run(sockets=[sock])
