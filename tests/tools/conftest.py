"""Real HTTP servers on 127.0.0.1 for tool tests (stdlib, threaded): pages, failures, redirects, a Serper stand-in."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

HTML_PAGE = (
    "<!DOCTYPE html><html><head><title>Quiet Harbour</title><style>p{color:red}</style></head>"
    "<body><nav>Home | About</nav><h1>Quiet Harbour</h1><p>The harbour was built in <b>1821</b>.</p>"
    "<ul><li>first item</li><li>second item</li></ul><script>secret_script()</script>"
    "<p>See <a href='/other'>the other page</a>.</p><footer>footer text</footer></body></html>"
)

Route = Callable[["Handler", "TestServer"], None]


class Handler(BaseHTTPRequestHandler):
    server: "TestServer._HTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _dispatch(self) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        with owner.lock:
            owner.hits[path] += 1
            owner.requests.append({"path": path, "method": self.command, "headers": dict(self.headers),
                                   "body": body, "t": time.monotonic()})
        route = owner.routes.get(path)
        if route is None:
            self.reply(404, b"not found", "text/plain")
            return
        route(self, owner)

    do_GET = _dispatch
    do_POST = _dispatch

    def reply(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def redirect(self, location: str, status: int = 302) -> None:
        self.reply(status, b"", "text/plain", {"Location": location})


class TestServer:
    """Routes are callables (handler, server); `hits` counts requests per path."""

    __test__ = False

    class _HTTPServer(ThreadingHTTPServer):
        daemon_threads = True
        block_on_close = False
        owner: "TestServer"

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = self._HTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.owner = self
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.host_port = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def route(self, path: str) -> Callable[[Route], Route]:
        def deco(fn: Route) -> Route:
            self.routes[path] = fn
            return fn
        return deco

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def install_standard_routes(srv: TestServer) -> None:
    """The routes most tests need."""
    srv.routes["/ok"] = lambda h, s: h.reply(200, HTML_PAGE.encode())
    srv.routes["/plain"] = lambda h, s: h.reply(200, b"just some plain text", "text/plain")
    srv.routes["/pdf"] = lambda h, s: h.reply(200, b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj", "application/pdf")
    srv.routes["/binary-as-html"] = lambda h, s: h.reply(200, b"\x00\x01\x02\x89PNG\r\n\x1a\n" * 64, "text/html")
    srv.routes["/status500"] = lambda h, s: h.reply(500, b"boom", "text/plain")
    srv.routes["/status404"] = lambda h, s: h.reply(404, b"nope", "text/plain")

    def slow(h: Handler, s: TestServer) -> None:
        time.sleep(3.0)
        h.reply(200, HTML_PAGE.encode())

    def flaky(h: Handler, s: TestServer) -> None:  # 503 twice, then fine
        if s.hits["/flaky"] <= 2:
            h.reply(503, b"busy", "text/plain")
        else:
            h.reply(200, HTML_PAGE.encode())

    def rate_limited(h: Handler, s: TestServer) -> None:  # 429 once, then fine
        if s.hits["/limited"] == 1:
            h.reply(429, b"slow down", "text/plain", {"Retry-After": "1"})
        else:
            h.reply(200, HTML_PAGE.encode())

    def big(h: Handler, s: TestServer) -> None:  # 10 MB of HTML, streamed
        chunk = ("<p>" + "filler words " * 80 + "</p>\n").encode()
        total = 10 * 1024 * 1024
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(total))
        h.end_headers()
        sent = 0
        try:
            head = b"<html><head><title>Huge</title></head><body>"
            h.wfile.write(head)
            sent += len(head)
            while sent < total:
                piece = chunk[: total - sent]
                h.wfile.write(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass

    srv.routes["/slow"] = slow
    srv.routes["/flaky"] = flaky
    srv.routes["/limited"] = rate_limited
    srv.routes["/big"] = big
    srv.routes["/r1"] = lambda h, s: h.redirect("/r2", 301)
    srv.routes["/r2"] = lambda h, s: h.redirect(f"{s.url}/r3", 302)
    srv.routes["/r3"] = lambda h, s: h.redirect("/ok", 307)
    srv.routes["/loop"] = lambda h, s: h.redirect("/loop")
    srv.routes["/to-private"] = lambda h, s: h.redirect("http://10.0.0.1/admin")
    srv.routes["/to-metadata"] = lambda h, s: h.redirect("http://169.254.169.254/latest/meta-data/")
    srv.routes["/to-localhost"] = lambda h, s: h.redirect(f"http://localhost:{s.port}/ok")
    srv.routes["/to-hf"] = lambda h, s: h.redirect("https://huggingface.co/datasets/someone/answers")


@pytest.fixture
def server() -> Iterator[TestServer]:
    srv = TestServer()
    install_standard_routes(srv)
    yield srv
    srv.stop()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connection refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def serper_payload(organic: list[dict[str, Any]]) -> bytes:
    return json.dumps({"searchParameters": {"q": "x"}, "organic": organic}).encode()
