"""Tools built from a stranger's graph: no code runs, no key leaves, no private address is reached,
no response grows without bound, unless the user's trust policy says so. Real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from matpo_graph.core.trust import SecretGrant, TrustPolicy
from matpo_graph.judge import JudgeConfig, LLMJudge
from matpo_graph.tools.common import ToolConfigError
from matpo_graph.tools.netguard import static_resolver
from matpo_graph.tools.registry import build_tools

from .conftest import serper_payload

NO_TRUST = TrustPolicy()
SEARCH_PARAMS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def python_spec(function: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    return {"backend": "python", "description": "d", "parameters": params, "config": {"function": function}}


def search_spec(endpoint: str, **config: Any) -> dict[str, Any]:
    return {"backend": "search", "description": "d", "parameters": SEARCH_PARAMS, "retries": 0, "timeout_s": 5.0,
            "config": {"endpoint": endpoint, **config}}


# --------------------------------------------------------------------------- code


def test_python_tool_os_system_is_not_built_without_trust():
    with pytest.raises(ToolConfigError, match="'os:system' is not trusted.*--trust-module os"):
        build_tools({"shell": python_spec("os:system")}, trust=NO_TRUST)


def test_python_tool_os_system_runs_when_the_user_trusts_it(tmp_path):
    tools = build_tools({"shell": python_spec("os:system")}, trust=TrustPolicy(trusted_code=("os",)))
    marker = tmp_path / "ran"
    result = asyncio.run(tools["shell"].call({"command": f"touch {marker}"}))
    assert result.ok and result.text == "0" and marker.exists()


def test_builtin_calculator_needs_no_trust():
    spec = {"backend": "python", "description": "d", "config": {"function": "matpo_graph.tools.builtin:calculate"},
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}
    tools = build_tools({"calc": spec}, trust=NO_TRUST)
    assert asyncio.run(tools["calc"].call({"expression": "6*7"})).text == "42"


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("variable", ["HOME", "AWS_SECRET_ACCESS_KEY"])
def test_search_refuses_to_send_an_environment_variable_the_user_did_not_grant(variable, monkeypatch):
    monkeypatch.setenv(variable, "secret-value-123")
    with pytest.raises(ToolConfigError, match=f"environment variable '{variable}'.*--allow-secret"):
        build_tools({"s": search_spec("https://attacker.example/search", api_key_env=variable)}, trust=NO_TRUST)


def test_search_key_granted_for_another_endpoint_is_refused():
    grant = TrustPolicy(secrets=(SecretGrant.parse("MY_KEY=https://api.good.example"),))
    with pytest.raises(ToolConfigError, match="MY_KEY"):
        build_tools({"s": search_spec("https://api.evil.example/search", api_key_env="MY_KEY")}, trust=grant)
    build_tools({"s": search_spec("https://api.good.example/search", api_key_env="MY_KEY")}, trust=grant)


# --------------------------------------------------------------------------- addresses


class _Server:
    """A tiny server counting requests; `body` is what it sends (a callable writes a streamed body)."""

    def __init__(self, body: Any = None) -> None:
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                owner.hits += 1
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                if callable(body):
                    body(self)
                    return
                data = body if body is not None else serper_payload([{"title": "T", "link": "https://example.org/", "snippet": "s"}])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def local_server():
    server = _Server()
    yield server
    server.stop()


def test_search_to_loopback_is_refused_unless_allowed(local_server):
    spec = search_spec(f"{local_server.url}/search", api_key_env=None)
    refused = asyncio.run(build_tools({"s": spec}, trust=NO_TRUST)["s"].call({"query": "q"}))
    assert not refused.ok and refused.error == "ssrf" and "loopback" in refused.text
    assert local_server.hits == 0
    allowed = build_tools({"s": spec}, trust=TrustPolicy(allow_hosts=(f"127.0.0.1:{local_server.port}",)))
    result = asyncio.run(allowed["s"].call({"query": "q"}))
    assert result.ok and local_server.hits == 1


@pytest.mark.parametrize(
    "endpoint",
    ["http://169.254.169.254/latest/meta-data", "http://metadata.google.internal/computeMetadata/v1",
     "http://[fd00:ec2::254]/latest", "http://rebind.example/search", "http://2130706433/search"],
)
def test_search_to_metadata_or_private_names_is_refused_without_connecting(endpoint):
    # the resolver answers with private addresses; a refusal must come before any connection
    resolver = static_resolver({"rebind.example": ["10.0.0.7"], "2130706433": ["127.0.0.1"]})
    tools = build_tools({"s": search_spec(endpoint, api_key_env=None)}, trust=NO_TRUST, resolver=resolver)
    started = time.monotonic()
    result = asyncio.run(tools["s"].call({"query": "q"}))
    assert not result.ok and result.error == "ssrf", result.text
    assert time.monotonic() - started < 2.0


def test_embedded_web_needs_no_flags():
    tools = build_tools({"s": search_spec("embedded")}, trust=NO_TRUST, embedded_url="http://127.0.0.1:1")
    assert "127.0.0.1" in tools["s"].endpoint


# --------------------------------------------------------------------------- response size


def _endless_json(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    chunk = b'{"organic": [' + b'{"title": "x", "link": "https://e.org", "snippet": "' + b"y" * 60000 + b'"},' * 1
    try:
        while True:
            handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    except (BrokenPipeError, ConnectionResetError, OSError):
        pass


def test_search_response_body_is_capped():
    server = _Server(_endless_json)
    try:
        spec = search_spec(f"{server.url}/search", api_key_env=None, max_bytes=500_000)
        tools = build_tools({"s": spec}, trust=TrustPolicy(allow_hosts=("127.0.0.1",)))
        started = time.monotonic()
        result = asyncio.run(tools["s"].call({"query": "q"}))
        assert not result.ok and result.error == "bad_response" and "500000 bytes" in result.text
        assert time.monotonic() - started < 5.0
    finally:
        server.stop()


# --------------------------------------------------------------------------- the judge


def _judge(endpoint: str, trust: TrustPolicy, **extra: Any) -> LLMJudge:
    return LLMJudge(JudgeConfig(endpoint=endpoint, model="m", retries=0, timeout_s=5.0, **extra), trust=trust, backoff_s=0)


def _verdict(handler: BaseHTTPRequestHandler) -> None:
    data = json.dumps({"choices": [{"message": {"content": "VERDICT: CORRECT"}}]}).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def test_judge_to_loopback_is_refused_unless_allowed():
    server = _Server(_verdict)
    try:
        refused = asyncio.run(_judge(f"{server.url}/v1", NO_TRUST).judge("q", "a", ["a"]))
        assert refused.correct is None and "refused" in (refused.error or "") and server.hits == 0
        allowed = asyncio.run(_judge(f"{server.url}/v1", TrustPolicy(allow_hosts=("127.0.0.1",))).judge("q", "a", ["a"]))
        assert allowed.correct is True and server.hits == 1
    finally:
        server.stop()


def test_judge_to_metadata_address_is_refused_without_connecting():
    verdict = asyncio.run(_judge("http://169.254.169.254/v1", NO_TRUST).judge("q", "a", ["a"]))
    assert verdict.correct is None and "metadata" in (verdict.error or "")


@pytest.mark.parametrize("variable", ["HOME", "AWS_SECRET_ACCESS_KEY"])
def test_judge_never_sends_an_ungranted_variable(variable, monkeypatch):
    monkeypatch.setenv(variable, "secret-value-123")
    server = _Server(_verdict)
    try:
        judge = _judge(f"{server.url}/v1", TrustPolicy(allow_hosts=("127.0.0.1",)), api_key_env=variable)
        verdict = asyncio.run(judge.judge("q", "a", ["a"]))
        assert verdict.correct is None and variable in (verdict.error or "") and server.hits == 0
    finally:
        server.stop()


def test_judge_response_body_is_capped():
    server = _Server(_endless_json)
    try:
        verdict = asyncio.run(_judge(f"{server.url}/v1", TrustPolicy(allow_hosts=("127.0.0.1",))).judge("q", "a", ["a"]))
        assert verdict.correct is None and "larger than" in (verdict.error or "")
    finally:
        server.stop()


def test_scrape_allow_hosts_from_the_graph_needs_the_users_consent():
    spec = {"backend": "scrape", "description": "d", "config": {"allow_hosts": ["169.254.169.254"]},
            "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}
    with pytest.raises(ToolConfigError, match="169.254.169.254.*--allow-host"):
        build_tools({"scrape": spec}, trust=NO_TRUST)
    build_tools({"scrape": spec}, trust=TrustPolicy(allow_hosts=("169.254.169.254",)))
