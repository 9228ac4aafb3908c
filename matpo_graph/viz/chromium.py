"""Drive headless chromium over the DevTools protocol: load a page, run JS, take screenshots, and
collect console errors and network requests. Used to check and time the generated pages.

Needs the `websockets` package and a chromium binary (Debian: `apt-get install chromium`).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "CHROMIUM_FLAGS", "Chromium", "ChromiumError", "dump_dom"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


class ChromiumError(RuntimeError):
    """Chromium did not start, or a DevTools command failed or timed out."""


def dump_dom(page: str | Path, *, budget_ms: int = 3000, binary: str = CHROMIUM, timeout_s: float = 60) -> str:
    """The DOM after the page's scripts ran, via `chromium --dump-dom` (no DevTools needed)."""
    with tempfile.TemporaryDirectory(prefix="matpo-chromium-") as profile:
        cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
               "--dump-dom", Path(page).resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise ChromiumError(f"chromium --dump-dom exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


class Chromium:
    """One headless chromium with one page, driven over DevTools; use as a context manager."""

    def __init__(self, *, binary: str = CHROMIUM, width: int = 1400, height: int = 1000, timeout_s: float = 30) -> None:
        self.binary, self.width, self.height, self.timeout_s = binary, width, height, timeout_s
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile: str | None = None
        self._ws: Any = None

    # ---- lifecycle ----
    def __enter__(self) -> "Chromium":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        from websockets.sync.client import connect

        self._profile = tempfile.mkdtemp(prefix="matpo-chromium-")
        cmd = [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-port=0",
               f"--window-size={self.width},{self.height}", "about:blank"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise ChromiumError(f"chromium did not open a DevTools port ({self.binary})")
            time.sleep(0.05)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout_s) as resp:
            targets = json.loads(resp.read())
        page = next((t for t in targets if t.get("type") == "page"), None)
        if page is None:
            self.close()
            raise ChromiumError("chromium has no page target")
        self._ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=self.timeout_s)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        # The window size includes browser chrome; pin the viewport itself.
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            except Exception:  # noqa: BLE001 - closing a dead socket is fine
                pass
            self._ws = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
            self._proc = None
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    # ---- protocol ----
    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Send one DevTools command and return its result, recording events that arrive meanwhile."""
        if self._ws is None:
            raise ChromiumError("chromium is not running")
        self._next_id += 1
        my_id = self._next_id
        self._ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError(f"{method}: no answer within {timeout_s or self.timeout_s} s")
            msg = json.loads(self._ws.recv(timeout=left))
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise ChromiumError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._record(msg)

    def _record(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method is None:
            return
        self._events.append(msg)
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.console_errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            self.console_errors.append(p["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            self.requests.append(p.get("request", {}).get("url", ""))

    def _wait_event(self, method: str, timeout_s: float) -> None:
        start = len(self._events)
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self._events[start:]):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError(f"no {method} within {timeout_s} s")
            self._record(json.loads(self._ws.recv(timeout=left)))

    # ---- page helpers ----
    def open(self, page: str | Path, *, timeout_s: float | None = None) -> float:
        """Navigate to a file (or URL) and wait for its load event; returns the seconds it took.

        Console errors and requests recorded so far are cleared: they then belong to this page.
        """
        url = page if isinstance(page, str) and "://" in page else Path(page).resolve().as_uri()
        self._events.clear()
        self.console_errors.clear()
        self.requests.clear()
        t0 = time.perf_counter()
        self.send("Page.navigate", {"url": url})
        self._wait_event("Page.loadEventFired", timeout_s or self.timeout_s)
        return time.perf_counter() - t0

    def eval(self, expression: str) -> Any:
        """Evaluate JS in the page and return its JSON value; a thrown error raises ChromiumError."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise ChromiumError(f"JS error: {d.get('exception', {}).get('description') or d.get('text')}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, *, timeout_s: float | None = None) -> float:
        """Poll a JS expression until it is truthy; returns the seconds waited."""
        t0 = time.perf_counter()
        deadline = t0 + (timeout_s or self.timeout_s)
        while not self.eval(expression):
            if time.perf_counter() > deadline:
                raise ChromiumError(f"still false after {timeout_s or self.timeout_s} s: {expression}")
            time.sleep(0.02)
        return time.perf_counter() - t0

    def screenshot(self, path: str | Path, *, full_page: bool = True) -> Path:
        """Save a PNG of the page (the whole scrollable page when ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m.get("contentSize")
            h = min(int(size["height"]), 12000)
            params.update({"captureBeyondViewport": True,
                           "clip": {"x": 0, "y": 0, "width": max(int(size["width"]), self.width), "height": h, "scale": 1}})
        data = self.send("Page.captureScreenshot", params)["data"]
        out = Path(path)
        out.write_bytes(base64.b64decode(data))
        return out
