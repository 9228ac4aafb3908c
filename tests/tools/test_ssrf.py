"""The scrape tool refuses private, loopback, link-local, metadata and reserved addresses, also after redirects."""

from __future__ import annotations

import asyncio

import pytest

from matpo_graph.tools.netguard import AddressGuard, UrlBlocklist, address_problem, static_resolver, system_resolver
from matpo_graph.tools.registry import build_tools

from .test_scrape import SCRAPE_PARAMS, make_scrape, run


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/",
    "http://10.0.0.1/",
    "http://192.168.1.20:8080/x",
    "http://172.16.5.4/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/",
    "http://[fe80::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://0.0.0.0/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://100.64.0.1/",
    "http://metadata.google.internal/computeMetadata/v1/",
])
def test_ssrf_private_and_special_addresses_refused(url):
    result = run(make_scrape(), url)
    assert not result.ok
    assert result.error == "ssrf", result.text
    assert result.attempts == 1


def test_ssrf_loopback_server_refused_unless_allowed(server):
    assert run(make_scrape(), f"{server.url}/ok").error == "ssrf"
    assert server.hits["/ok"] == 0
    assert run(make_scrape([server.host_port]), f"{server.url}/ok").ok
    assert run(make_scrape(["127.0.0.1"]), f"{server.url}/ok").ok
    assert run(make_scrape(["127.0.0.1:1"]), f"{server.url}/ok").error == "ssrf"  # other port


def test_ssrf_hostname_resolving_to_private_address_refused(server):
    resolver = static_resolver({"intranet.example": ["192.168.7.7"], "public.example": ["93.184.216.34"],
                                "mixed.example": ["93.184.216.34", "10.1.2.3"]})
    spec = {"backend": "scrape", "description": "d", "parameters": SCRAPE_PARAMS, "retries": 0}
    tool = build_tools({"scrape": spec}, resolver=resolver)["scrape"]
    for host in ("intranet.example", "mixed.example"):
        result = asyncio.run(tool.call({"url": f"http://{host}/"}))
        assert result.error == "ssrf" and host in result.text


def test_ssrf_localhost_name_refused_with_system_resolver(server):
    result = run(make_scrape(), f"http://localhost:{server.port}/ok")
    assert result.error == "ssrf"
    assert server.hits["/ok"] == 0


def test_ssrf_decimal_ip_literal_refused(server):
    result = run(make_scrape(), f"http://2130706433:{server.port}/ok")  # 127.0.0.1 as one number
    assert result.error == "ssrf"
    assert server.hits["/ok"] == 0


@pytest.mark.parametrize("route", ["/to-private", "/to-metadata", "/to-localhost"])
def test_ssrf_redirect_to_private_address_refused(server, route):
    result = run(make_scrape([server.host_port]), f"{server.url}{route}")
    assert result.error == "ssrf", result.text
    assert server.hits["/ok"] == 0


def test_ssrf_rebinding_caught_at_connection_time(server):
    answers = iter([["93.184.216.34"], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"]])

    async def rebinding(host: str) -> list[str]:
        return next(answers)

    spec = {"backend": "scrape", "description": "d", "parameters": SCRAPE_PARAMS, "retries": 0}
    tool = build_tools({"scrape": spec}, resolver=rebinding)["scrape"]
    result = asyncio.run(tool.call({"url": f"http://rebind.example:{server.port}/ok"}))
    assert result.error == "ssrf", result.text
    assert server.hits["/ok"] == 0


def test_ssrf_embedded_web_host_allowed_only_on_its_port(server):
    spec = {"backend": "scrape", "description": "d", "parameters": SCRAPE_PARAMS, "retries": 0}
    tool = build_tools({"scrape": spec}, embedded_url=server.url)["scrape"]
    assert asyncio.run(tool.call({"url": f"{server.url}/ok"})).ok
    assert asyncio.run(tool.call({"url": "http://127.0.0.1:1/"})).error == "ssrf"


def test_address_problem_classifies():
    assert address_problem("8.8.8.8") is None
    assert address_problem("2606:4700:4700::1111") is None
    assert address_problem("127.0.0.1") == "loopback address"
    assert address_problem("169.254.169.254") == "cloud metadata address"
    assert address_problem("10.0.0.1") == "private address"
    assert address_problem("::1") == "loopback address"
    assert address_problem("::ffff:10.0.0.1") == "private address"
    assert address_problem("not-an-ip") == "unparsable address"


def test_guard_allow_entries_parse():
    guard = AddressGuard(["example.org", "127.0.0.1:8080", "[::1]:9000", "http://localhost:7000"],
                         resolver=system_resolver)
    assert guard.is_allowed("EXAMPLE.org.", 443)
    assert guard.is_allowed("127.0.0.1", 8080) and not guard.is_allowed("127.0.0.1", 8081)
    assert guard.is_allowed("::1", 9000)
    assert guard.is_allowed("localhost", 7000)


def test_blocklist_matches_host_and_path_prefix():
    bl = UrlBlocklist(["huggingface.co/datasets", "example.com"])
    assert bl.blocks("https://huggingface.co/datasets/a/b")
    assert bl.blocks("https://hub.huggingface.co/datasets")
    assert not bl.blocks("https://huggingface.co/models/x")
    assert not bl.blocks("https://huggingface.co/datasetsfoo")
    assert not bl.blocks("https://nothuggingface.co/datasets/x")
    assert bl.blocks("http://example.com/anything")
