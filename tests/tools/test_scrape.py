"""Scrape tool against real servers on 127.0.0.1: text extraction, failures, size limits, redirects, blocklist."""

from __future__ import annotations

import asyncio
from typing import Any

from matpo_graph.core.trust import TrustPolicy
from matpo_graph.tools.registry import build_tools
from matpo_graph.tools.scrape import ScrapeTool

SCRAPE_PARAMS = {"type": "object", "properties": {"url": {"type": "string"}, "format": {"type": "string"}},
                 "required": ["url"]}


def make_scrape(allow: list[str] | None = None, **overrides: Any) -> ScrapeTool:
    config = {"allow_hosts": allow or [], **overrides.pop("config", {})}
    spec = {"backend": "scrape", "description": "read a page", "parameters": SCRAPE_PARAMS, "config": config,
            "timeout_s": overrides.pop("timeout_s", 5.0), "retries": overrides.pop("retries", 2),
            "max_output_chars": overrides.pop("max_output_chars", 4000)}
    # the graph's allow_hosts only asks for these hosts; the user allows them (as --allow-host would)
    overrides.setdefault("trust", TrustPolicy(allow_hosts=tuple(allow or ())))
    tool = build_tools({"scrape": spec}, **overrides)["scrape"]
    assert isinstance(tool, ScrapeTool)
    tool.backoff_s = 0.01
    tool.jitter = 0.0  # exact waits, so tests can check the exponential schedule
    return tool


def run(tool: ScrapeTool, url: str, **extra: Any):
    return asyncio.run(tool.call({"url": url, **extra}))


def test_scrape_extracts_title_and_clean_text(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/ok")
    assert result.ok, result.text
    assert "Title: Quiet Harbour" in result.text
    assert "The harbour was built in 1821." in result.text
    assert "- first item" in result.text
    for dropped in ("secret_script", "color:red", "Home | About", "footer text"):
        assert dropped not in result.text


def test_scrape_markdown_on_request(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/ok", format="markdown")
    assert "# Quiet Harbour" in result.text
    assert "**1821**" in result.text
    assert f"[the other page]({server.url}/other)" in result.text


def test_scrape_plain_text_is_returned_as_is(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/plain")
    assert result.ok and result.text.endswith("just some plain text")


def test_scrape_refuses_non_html_content_type(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/pdf")
    assert not result.ok and result.error == "not_html"
    assert "application/pdf" in result.text
    assert result.attempts == 1


def test_scrape_refuses_binary_body_labelled_html(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/binary-as-html")
    assert not result.ok and result.error == "not_html"
    assert "binary" in result.text


def test_scrape_stops_download_at_size_limit(server):
    tool = make_scrape([server.host_port], config={"max_bytes": 200_000}, max_output_chars=1_000_000)
    result = run(tool, f"{server.url}/big")
    assert result.ok, result.text
    assert "Title: Huge" in result.text
    assert "(page cut at 200000 bytes)" in result.text
    assert len(result.text) < 200_000


def test_scrape_output_truncated_to_max_output_chars(server):
    tool = make_scrape([server.host_port], config={"max_bytes": 100_000}, max_output_chars=500)
    result = run(tool, f"{server.url}/big")
    assert result.ok
    assert len(result.text) <= 500
    assert result.text.endswith("[... truncated]")


def test_scrape_timeout_is_retried_then_reported(server):
    tool = make_scrape([server.host_port], timeout_s=0.5, retries=1)
    result = run(tool, f"{server.url}/slow")
    assert not result.ok and result.error == "timeout"
    assert result.attempts == 2
    assert "timed out after 0.5s (after 2 attempts)" in result.text
    assert tool.metrics.retries["scrape"] == 1
    assert tool.metrics.errors[("scrape", "timeout")] == 1


def test_scrape_500_is_retried_with_backoff(server):
    tool = make_scrape([server.host_port], retries=2)
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    tool.sleep = record
    result = run(tool, f"{server.url}/status500")
    assert not result.ok and result.error == "http_5xx"
    assert "HTTP 500" in result.text
    assert server.hits["/status500"] == 3
    assert delays == [0.01, 0.02]  # exponential


def test_scrape_recovers_after_transient_503(server):
    result = run(make_scrape([server.host_port], retries=3), f"{server.url}/flaky")
    assert result.ok and result.attempts == 3


def test_scrape_honours_retry_after_on_429(server):
    tool = make_scrape([server.host_port])
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)
        await asyncio.sleep(delay)

    tool.sleep = record
    result = run(tool, f"{server.url}/limited")
    assert result.ok, result.text
    assert result.attempts == 2
    assert delays == [1.0]
    first, second = [r["t"] for r in server.requests if r["path"] == "/limited"]
    assert second - first >= 0.99


def test_scrape_gives_up_when_retry_after_is_too_long(server):
    @server.route("/long-limit")
    def long_limit(h, s):
        h.reply(429, b"", "text/plain", {"Retry-After": "3600"})

    result = run(make_scrape([server.host_port]), f"{server.url}/long-limit")
    assert not result.ok and result.error == "rate_limited"
    assert "3600" in result.text and server.hits["/long-limit"] == 1


def test_scrape_404_is_not_retried(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/status404")
    assert not result.ok and result.error == "http_4xx" and server.hits["/status404"] == 1


def test_scrape_connection_refused_is_an_error_result(closed_port):
    result = run(make_scrape([f"127.0.0.1:{closed_port}"]), f"http://127.0.0.1:{closed_port}/")
    assert not result.ok and result.error == "connect"


def test_scrape_follows_redirect_chain(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/r1")
    assert result.ok, result.text
    assert f"URL: {server.url}/ok" in result.text
    assert [server.hits[p] for p in ("/r1", "/r2", "/r3", "/ok")] == [1, 1, 1, 1]


def test_scrape_stops_redirect_loops(server):
    result = run(make_scrape([server.host_port], config={"max_redirects": 3}), f"{server.url}/loop")
    assert not result.ok and result.error == "redirects"
    assert server.hits["/loop"] == 4


def test_scrape_refuses_blocklisted_urls_without_fetching():
    tool = make_scrape()
    for url in ("https://huggingface.co/datasets/org/name", "https://huggingface.co/spaces/a/b",
                "huggingface.co/datasets/x", "https://www.huggingface.co/datasets/x/y"):
        result = run(tool, url)
        assert not result.ok and result.error == "blocked", url


def test_scrape_refuses_redirect_into_blocklist(server):
    result = run(make_scrape([server.host_port]), f"{server.url}/to-hf")
    assert not result.ok and result.error == "blocked"


def test_scrape_custom_blocklist_extends_defaults(server):
    tool = make_scrape([server.host_port], config={"blocklist": ["127.0.0.1/ok"]})
    assert run(tool, f"{server.url}/ok").error == "blocked"
    assert run(tool, "https://huggingface.co/spaces/a").error == "blocked"
    assert run(tool, f"{server.url}/plain").ok


def test_scrape_rejects_missing_url_and_bad_scheme():
    tool = make_scrape()
    assert asyncio.run(tool.call({})).error == "invalid_args"
    assert run(tool, "file:///etc/passwd").error == "invalid_url"
    assert run(tool, "ftp://example.org/x").error == "invalid_url"
