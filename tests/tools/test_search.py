"""Search tool against a real Serper-shaped server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from matpo_graph.core.trust import SecretGrant, TrustPolicy
from matpo_graph.tools.common import ToolConfigError
from matpo_graph.tools.registry import build_tools
from matpo_graph.tools.search import SearchTool

from .conftest import serper_payload

SEARCH_PARAMS = {"type": "object", "properties": {"query": {"type": "string"}, "num_results": {"type": "integer"}},
                 "required": ["query"]}
KEY_ENV = "MATPO_TEST_SEARCH_KEY"

ORGANIC = [
    {"title": "Leaky dataset", "link": "https://huggingface.co/datasets/org/qa", "snippet": "the answers",
     "position": 1},
    {"title": "Quiet Harbour history", "link": "https://example.org/harbour", "snippet": "Built in  1821.",
     "position": 2},
    {"title": "A space", "link": "https://huggingface.co/spaces/x/y", "snippet": "demo", "position": 3},
    {"title": "Model card", "link": "https://huggingface.co/bert-base", "snippet": "a model", "position": 4},
    {"title": "Mirror", "link": "https://www.huggingface.co/datasets/org/qa/viewer", "snippet": "rows", "position": 5},
]


def make_search(endpoint: str, **overrides: Any) -> SearchTool:
    config = {"endpoint": endpoint, "api_key_env": KEY_ENV, **overrides.pop("config", {})}
    spec = {"backend": "search", "description": "web search", "parameters": SEARCH_PARAMS, "config": config,
            "timeout_s": overrides.pop("timeout_s", 5.0), "retries": overrides.pop("retries", 2)}
    # the user's grant for this local test server: the key may go to it, and 127.0.0.1 may be reached
    overrides.setdefault("trust", TrustPolicy(secrets=(SecretGrant(KEY_ENV, endpoint),), allow_hosts=("127.0.0.1",)))
    tool = build_tools({"search": spec}, **overrides)["search"]
    assert isinstance(tool, SearchTool)
    tool.backoff_s = 0.01
    return tool


@pytest.fixture
def serper(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-0123456789abcdef")

    @server.route("/search")
    def search(h, s):
        h.reply(200, serper_payload(ORGANIC), "application/json")

    return server


def test_search_formats_results_and_sends_key(serper):
    result = asyncio.run(make_search(f"{serper.url}/search").call({"query": "quiet harbour", "num_results": 5}))
    assert result.ok, result.text
    assert 'Search results for "quiet harbour"' in result.text
    assert "Quiet Harbour history\nURL: https://example.org/harbour\nBuilt in 1821." in result.text
    request = serper.requests[-1]
    assert request["method"] == "POST"
    assert json.loads(request["body"]) == {"q": "quiet harbour", "num": 5}
    assert request["headers"]["X-API-KEY"] == "sk-test-0123456789abcdef"


def test_search_removes_blocklisted_links(serper):
    result = asyncio.run(make_search(f"{serper.url}/search").call({"query": "q"}))
    assert "huggingface.co/datasets" not in result.text
    assert "huggingface.co/spaces" not in result.text
    assert "https://huggingface.co/bert-base" in result.text  # other huggingface pages stay
    assert result.text.count("URL: ") == 2


def test_search_extra_blocklist_and_params(serper):
    tool = make_search(f"{serper.url}/search", config={"blocklist": ["example.org"], "params": {"gl": "us"}})
    result = asyncio.run(tool.call({"query": "q"}))
    assert "example.org" not in result.text
    assert json.loads(serper.requests[-1]["body"])["gl"] == "us"


def test_search_missing_key_is_an_error_result(serper, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    result = asyncio.run(make_search(f"{serper.url}/search").call({"query": "q"}))
    assert not result.ok and result.error == "config"
    assert KEY_ENV in result.text
    assert serper.hits["/search"] == 0


def test_search_500_retried_then_error(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")
    tool = make_search(f"{server.url}/status500", retries=2)
    result = asyncio.run(tool.call({"query": "q"}))
    assert not result.ok and result.error == "http_5xx" and result.attempts == 3
    assert tool.metrics.snapshot()["tools/search/retries"] == 2


def test_search_429_retry_after_honoured(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")

    @server.route("/s429")
    def limited(h, s):
        if s.hits["/s429"] == 1:
            h.reply(429, b"{}", "application/json", {"Retry-After": "0.5"})
        else:
            h.reply(200, serper_payload(ORGANIC[1:2]), "application/json")

    tool = make_search(f"{server.url}/s429")
    delays: list[float] = []

    async def record(d: float) -> None:
        delays.append(d)
        await asyncio.sleep(d)

    tool.sleep = record
    result = asyncio.run(tool.call({"query": "q"}))
    assert result.ok and result.attempts == 2 and delays == [0.5]


def test_search_timeout_and_connection_refused(server, closed_port, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")
    slow = asyncio.run(make_search(f"{server.url}/slow", timeout_s=0.5, retries=1).call({"query": "q"}))
    assert slow.error == "timeout" and slow.attempts == 2
    refused = asyncio.run(make_search(f"http://127.0.0.1:{closed_port}/search").call({"query": "q"}))
    assert refused.error == "connect" and not refused.ok


def test_search_bad_json_and_bad_shape(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")
    server.routes["/html"] = lambda h, s: h.reply(200, b"<html>not json</html>")
    server.routes["/shape"] = lambda h, s: h.reply(200, b'{"organic": "nope"}', "application/json")
    assert asyncio.run(make_search(f"{server.url}/html").call({"query": "q"})).error == "bad_response"
    assert asyncio.run(make_search(f"{server.url}/shape").call({"query": "q"})).error == "bad_response"


def test_search_empty_results_say_so(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")
    server.routes["/empty"] = lambda h, s: h.reply(200, serper_payload([]), "application/json")
    result = asyncio.run(make_search(f"{server.url}/empty").call({"query": "nothing"}))
    assert result.ok and result.text == 'No results found for "nothing".'


def test_search_invalid_arguments():
    tool = make_search("http://127.0.0.1:9/search")
    result = asyncio.run(tool.call({"query": 3}))
    assert result.error == "invalid_args" and "query" in result.text
    assert asyncio.run(tool.call("not a dict")).error == "invalid_args"  # type: ignore[arg-type]


def test_search_embedded_needs_url():
    spec = {"backend": "search", "description": "d", "parameters": SEARCH_PARAMS, "config": {"endpoint": "embedded"}}
    with pytest.raises(ToolConfigError, match="embedded web URL"):
        build_tools({"web_search": spec})


def test_search_rejects_key_value_as_env_name():
    spec = {"backend": "search", "description": "d", "parameters": SEARCH_PARAMS,
            "config": {"endpoint": "http://127.0.0.1:9/s", "api_key_env": 123}}
    with pytest.raises(ToolConfigError, match="NAME of an environment variable"):
        build_tools({"s": spec})


def test_search_answer_box_shown_unless_blocklisted(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k-123456")
    boxes = {"/box": {"answer": "1821", "link": "https://example.org/a"},
             "/leaky-box": {"answer": "gold", "link": "https://huggingface.co/datasets/x/y"}}
    for path, box in boxes.items():
        body = json.dumps({"organic": ORGANIC[1:2], "answerBox": box}).encode()
        server.routes[path] = lambda h, s, body=body: h.reply(200, body, "application/json")
    shown = asyncio.run(make_search(f"{server.url}/box").call({"query": "q"}))
    hidden = asyncio.run(make_search(f"{server.url}/leaky-box").call({"query": "q"}))
    assert "Answer box: 1821" in shown.text
    assert "gold" not in hidden.text and "Answer box" not in hidden.text
