"""The LLM judge against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from matpo_graph.core.trust import ENV_ALLOW_HOSTS, ENV_ALLOW_SECRETS
from matpo_graph.judge import JudgeConfig, LLMJudge, parse_verdict, score_trees_judged

from credit_helpers import ONE_ROLE, plan, traj, tree

SECRET = "sk-test-do-not-leak-4242"


class FakeJudgeServer:
    """A tiny chat-completions server whose behaviour is scripted per request."""

    def __init__(self) -> None:
        self.script: list[str] = []  # behaviours consumed in order; the last one repeats
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                mode = server.script.pop(0) if len(server.script) > 1 else server.script[0]
                if mode == "slow":
                    time.sleep(1.5)
                    mode = "correct"
                if mode == "retry_after":  # 429 with the server's wish to wait 0.3 s
                    self._send(429, b'{"error": "slow down"}', {"Retry-After": "0.3"})
                elif mode.startswith("http"):
                    self._send(int(mode[4:]), b'{"error": "nope"}')
                elif mode == "not_json":
                    self._send(200, b"<html>surprise</html>")
                else:
                    content = {"correct": "The meaning matches.\nVERDICT: CORRECT", "incorrect": "VERDICT: INCORRECT",
                               "garbage": "I think it is probably fine?"}[mode]  # fmt: skip
                    payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                    self._send(200, json.dumps(payload).encode())

            def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def _loopback_allowed(monkeypatch) -> None:
    # the user's grant: the judge may reach the local test servers on 127.0.0.1 (refused otherwise)
    monkeypatch.setenv(ENV_ALLOW_HOSTS, "127.0.0.1")


@pytest.fixture
def server(monkeypatch) -> Iterator[FakeJudgeServer]:
    s = FakeJudgeServer()
    monkeypatch.setenv(ENV_ALLOW_SECRETS, f"JUDGE_KEY={s.url}")  # and JUDGE_KEY may be sent to this one
    yield s
    s.stop()


def judge_plan(server: FakeJudgeServer, **judge: Any):
    config = {"endpoint": server.url, "model": "judge-mini", "api_key_env": "JUDGE_KEY", "retries": 2,
              "timeout_s": 5.0, "fallback": "contains", **judge}  # fmt: skip
    return plan(ONE_ROLE, accuracy_scorer="judge", judge=config)


def answered(answer: str = "The Gold Medal", tree_id: str = "t"):
    solver = traj("0", role="solver", final_text=f"\\boxed{{{answer}}}")
    return tree(tree_id, "g", None, [solver], answers=["gold medal"])


def run(judge: LLMJudge, t, p):
    async def go():
        async with judge:
            return await judge.score_tree(t, p)

    return asyncio.run(go())


def test_judge_correct_verdict_scores_one_and_sends_key_and_prompt(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["correct"]
    p = judge_plan(server)
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered(), p)
    assert b.accuracy == 1.0 and not b.judge_fallback and b.details["scorer"] == "judge"
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert req["body"]["model"] == "judge-mini"
    user = req["body"]["messages"][-1]["content"]
    assert "q?" in user and "gold medal" in user and "The Gold Medal" in user


def test_judge_incorrect_verdict_scores_zero(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["incorrect"]
    p = judge_plan(server)
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered(), p)
    assert b.accuracy == 0.0 and not b.judge_fallback


def test_judge_retries_a_500_then_succeeds(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["http500", "correct"]
    p = judge_plan(server)
    judge = LLMJudge.from_plan(p, backoff_s=0)
    b = run(judge, answered(), p)
    assert b.accuracy == 1.0 and not b.judge_fallback and b.details["judge_attempts"] == 2
    assert judge.stats.failures == 0 and judge.stats.attempts == 2


@pytest.mark.parametrize("mode", ["http500", "http429", "garbage", "not_json"])
def test_judge_persistent_failure_falls_back_to_local_scorer(server, monkeypatch, mode: str) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = [mode]
    p = judge_plan(server, retries=2)
    judge = LLMJudge.from_plan(p, backoff_s=0)
    b = run(judge, answered("the gold medal, of course"), p)
    assert len(server.requests) == 3  # one try and two retries
    assert b.judge_fallback and b.details["scorer"] == "contains" and b.accuracy == 1.0
    assert judge.stats.fallbacks == 1 and judge.stats.failures == 1
    assert judge.stats.as_metrics()["matpo/judge/fallbacks"] == 1.0


def test_judge_client_error_is_not_retried(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["http401"]
    p = judge_plan(server, retries=3)
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered("silver"), p)
    assert len(server.requests) == 1
    assert b.judge_fallback and b.accuracy == 0.0 and "401" in b.details["judge_error"]


def test_judge_timeout_falls_back(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["slow"]
    p = judge_plan(server, retries=1, timeout_s=0.2)
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered(), p)
    assert b.judge_fallback and "timeout" in b.details["judge_error"]
    assert b.details["judge_attempts"] == 2


def test_judge_missing_key_variable_falls_back_without_a_request(server, monkeypatch) -> None:
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    server.script = ["correct"]
    p = judge_plan(server)
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered(), p)
    assert server.requests == [] and b.judge_fallback and "JUDGE_KEY" in b.details["judge_error"]


def test_judge_unreachable_endpoint_falls_back() -> None:
    p = plan(ONE_ROLE, accuracy_scorer="judge", judge={"endpoint": "http://127.0.0.1:9/v1", "model": "m", "retries": 1})
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered(), p)
    assert b.judge_fallback and "transport" in b.details["judge_error"]


def test_judge_no_answer_scores_zero_without_calling(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["correct"]
    p = judge_plan(server)
    t = tree("t", "g", None, [traj("0", role="solver", final_text="I could not find it")])
    b = run(LLMJudge.from_plan(p, backoff_s=0), t, p)
    assert server.requests == [] and b.accuracy == 0.0 and not b.judge_fallback


def test_judge_never_logs_or_records_the_key(server, monkeypatch, caplog) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["http500", "garbage", "correct"]
    caplog.set_level(logging.DEBUG)
    p = judge_plan(server, retries=1)
    b = run(LLMJudge.from_plan(p, backoff_s=0), answered(), p)
    assert caplog.records  # the failures were logged ...
    assert SECRET not in caplog.text  # ... without the key
    assert SECRET not in b.model_dump_json()


def test_score_trees_judged_keeps_order_under_concurrency(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["correct"]
    p = judge_plan(server)
    silent = [tree(f"t{i}", "g", None, [traj("0", role="solver")]) for i in range(6)]
    trees = [answered(tree_id=f"t{i}") if i % 2 == 0 else silent[i] for i in range(6)]
    out = asyncio.run(score_trees_judged(trees, p, judge=LLMJudge.from_plan(p, backoff_s=0), max_concurrency=3))
    assert [b.accuracy for b in out] == [1.0, 0.0] * 3
    assert len(server.requests) == 3


def test_parse_verdict_and_config_validation() -> None:
    assert parse_verdict("blah\nVERDICT: CORRECT") is True
    assert parse_verdict("VERDICT: CORRECT ... on reflection VERDICT: **incorrect**") is False
    assert parse_verdict("correct") is None
    with pytest.raises(ValueError, match="not a local scorer"):
        JudgeConfig.from_mapping({"endpoint": "http://x", "model": "m", "fallback": "judge"})
    assert JudgeConfig(endpoint="http://h/v1/", model="m").url == "http://h/v1/chat/completions"


def test_score_trees_with_judge_returns_trees_with_rewards(server, monkeypatch) -> None:
    from matpo_graph.judge import score_trees_with_judge

    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["http500"]
    p = judge_plan(server, retries=0)
    trees = [answered(tree_id="a"), answered("wrong", tree_id="b")]
    out = asyncio.run(score_trees_with_judge(trees, p, judge=LLMJudge.from_plan(p, backoff_s=0)))
    assert [t.reward.accuracy for t in out] == [1.0, 0.0]
    assert all(t.reward.judge_fallback for t in out) and all(t.reward is None for t in trees)


def test_judge_honours_retry_after_on_429(server, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    server.script = ["retry_after", "correct"]
    p = judge_plan(server)
    judge = LLMJudge.from_plan(p, backoff_s=0.01)
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)
        await asyncio.sleep(delay)

    judge.sleep = record
    b = run(judge, answered(), p)
    assert b.accuracy == 1.0 and b.details["judge_attempts"] == 2
    assert delays == [0.3]  # the server's wait, not the 0.01 s backoff
