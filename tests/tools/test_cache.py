"""Response cache: replay gives identical outputs with the server gone; API keys never reach the disk."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from matpo_graph.core.trust import SecretGrant, TrustPolicy
from matpo_graph.tools.cache import ResponseCache, normalise_args
from matpo_graph.tools.registry import build_tools

from .conftest import TestServer, install_standard_routes, serper_payload
from .test_scrape import SCRAPE_PARAMS
from .test_search import KEY_ENV, SEARCH_PARAMS

SECRET = "sk-live-SECRET-7f3a9c1e5b"


def _specs(url: str, host_port: str) -> dict:
    return {
        "search": {"backend": "search", "description": "d", "parameters": SEARCH_PARAMS, "retries": 0,
                   "config": {"endpoint": f"{url}/search", "api_key_env": KEY_ENV}},
        "scrape": {"backend": "scrape", "description": "d", "parameters": SCRAPE_PARAMS, "retries": 0,
                   "config": {"allow_hosts": [host_port]}},
    }


def _trust(url: str) -> TrustPolicy:
    """The user's grant: this test server may receive the key, and 127.0.0.1 may be reached."""
    return TrustPolicy(secrets=(SecretGrant(KEY_ENV, f"{url}/search"),), allow_hosts=("127.0.0.1",))


def _calls(url: str) -> list[tuple[str, dict]]:
    return [("search", {"query": "quiet harbour"}), ("search", {"query": "echo key"}),
            ("scrape", {"url": f"{url}/ok"}), ("scrape", {"url": f"{url}/plain"}), ("scrape", {"url": f"{url}/pdf"})]


def _echoing_server() -> TestServer:
    """A Serper stand-in that (badly) echoes the API key back in a snippet."""
    srv = TestServer()
    install_standard_routes(srv)

    @srv.route("/search")
    def search(h, s):
        key = h.headers.get("X-API-KEY", "")
        organic = [{"title": "Echo", "link": "https://example.org/e", "snippet": f"your key is {key}", "position": 1}]
        h.reply(200, serper_payload(organic), "application/json")

    return srv


async def _run_all(tools, calls):
    return [await tools[name].call(args) for name, args in calls]


def test_cache_replay_identical_with_server_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    srv = _echoing_server()
    try:
        recorder = build_tools(_specs(srv.url, srv.host_port), trust=_trust(srv.url), cache=ResponseCache(tmp_path, "record"))
        recorded = asyncio.run(_run_all(recorder, _calls(srv.url)))
    finally:
        srv.stop()
    assert [r.ok for r in recorded] == [True, True, True, True, False]
    player = build_tools(_specs(srv.url, srv.host_port), trust=_trust(srv.url), cache=ResponseCache(tmp_path, "replay"))
    replayed = asyncio.run(_run_all(player, _calls(srv.url)))
    assert [(r.text, r.ok, r.error) for r in replayed] == [(r.text, r.ok, r.error) for r in recorded]
    assert all(r.cached for r in replayed)
    assert player.metrics.snapshot()["tools/total/cache_hits"] == 5


def test_cache_replay_miss_is_an_error(tmp_path):
    player = build_tools(_specs("http://127.0.0.1:9", "127.0.0.1:9"), trust=_trust("http://127.0.0.1:9"), cache=ResponseCache(tmp_path, "replay"))
    result = asyncio.run(player["scrape"].call({"url": "http://127.0.0.1:9/never"}))
    assert not result.ok and result.error == "cache_miss"


def test_cache_keys_normalise_arguments(tmp_path, server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")
    server.routes["/search"] = lambda h, s: h.reply(200, serper_payload([]), "application/json")
    tools = build_tools(_specs(server.url, server.host_port), trust=_trust(server.url), cache=tmp_path)  # a folder means readwrite
    first = asyncio.run(tools["search"].call({"query": "quiet   harbour "}))
    second = asyncio.run(tools["search"].call({"query": "quiet harbour"}))
    assert not first.cached and second.cached
    assert server.hits["/search"] == 1
    assert normalise_args({"b": " x  y ", "a": None, "c": [1, " z"]}) == {"b": "x y", "c": [1, "z"]}


def test_cache_readwrite_does_not_store_errors(tmp_path, server):
    tools = build_tools(_specs(server.url, server.host_port), trust=_trust(server.url), cache=ResponseCache(tmp_path, "readwrite"))
    asyncio.run(tools["scrape"].call({"url": f"{server.url}/status404"}))
    asyncio.run(tools["scrape"].call({"url": f"{server.url}/status404"}))
    assert server.hits["/status404"] == 2


def test_cache_unknown_mode_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown cache mode"):
        ResponseCache(tmp_path, "sometimes")  # type: ignore[arg-type]


def test_api_key_never_in_results_logs_or_cache(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    srv = _echoing_server()
    try:
        tools = build_tools(_specs(srv.url, srv.host_port), trust=_trust(srv.url), cache=ResponseCache(tmp_path, "record"))
        results = asyncio.run(_run_all(tools, _calls(srv.url)))
        assert srv.requests[0]["headers"]["X-API-KEY"] == SECRET  # the key was really sent
        # an error path too: the endpoint fails after the key was used
        srv.routes["/search"] = lambda h, s: h.reply(500, f"bad key {SECRET}".encode(), "text/plain")
        results.append(asyncio.run(tools["search"].call({"query": "fail"})))
    finally:
        srv.stop()
    assert "[redacted]" in results[1].text
    for result in results:
        assert SECRET not in result.model_dump_json()
    assert SECRET not in caplog.text
    files = list(Path(tmp_path).rglob("*.json"))
    assert files
    for path in files:
        assert SECRET not in path.read_text(encoding="utf-8")
