"""The one retry rule of every HTTP client: exponential backoff with jitter, Retry-After, a total deadline."""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from matpo_graph.retry import (
    RetryableError,
    RetryExhausted,
    RetryPolicy,
    is_retryable_status,
    parse_retry_after,
    retry_async,
)


def run(coro):
    return asyncio.run(coro)


class Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def failing(times: int, *, retry_after: float | None = None, result: str = "ok"):
    calls: list[int] = []

    async def attempt(n: int) -> str:
        calls.append(n)
        if len(calls) <= times:
            raise RetryableError(f"HTTP 503 #{n}", retry_after=retry_after)
        return result

    return attempt, calls


def test_backoff_doubles_up_to_the_cap_without_jitter():
    sleep = Recorder()
    attempt, calls = failing(4)
    policy = RetryPolicy(retries=4, backoff_s=1.0, max_backoff_s=3.0, jitter=0.0, deadline_s=None)
    assert run(retry_async(attempt, policy, sleep=sleep)) == "ok"
    assert calls == [1, 2, 3, 4, 5] and sleep.delays == [1.0, 2.0, 3.0, 3.0]


def test_jitter_spreads_waits_within_bounds():
    sleep = Recorder()
    draws = iter([0.0, 0.5, 0.999])
    attempt, _ = failing(3)
    policy = RetryPolicy(retries=3, backoff_s=1.0, max_backoff_s=100.0, jitter=0.5, deadline_s=None)
    run(retry_async(attempt, policy, sleep=sleep, rng=lambda: next(draws)))
    assert sleep.delays == pytest.approx([1.0, 2.0 * 0.75, 4.0 * (1 - 0.5 * 0.999)])
    # with the real generator: every wait within [w/2, w]
    sleep = Recorder()
    attempt, _ = failing(3)
    run(retry_async(attempt, policy, sleep=sleep))
    for wait, base in zip(sleep.delays, (1.0, 2.0, 4.0), strict=True):
        assert base / 2 <= wait <= base


def test_retry_after_is_a_floor_and_too_long_stops():
    sleep = Recorder()
    attempt, _ = failing(1, retry_after=2.5)
    policy = RetryPolicy(retries=2, backoff_s=0.1, deadline_s=None)
    run(retry_async(attempt, policy, sleep=sleep))
    assert sleep.delays == [2.5]
    attempt, calls = failing(1, retry_after=3600.0)
    with pytest.raises(RetryExhausted, match=r"HTTP 503 #1 \(server asks to wait 3600s\)") as info:
        run(retry_async(attempt, policy, sleep=Recorder()))
    assert info.value.reason == "retry_after" and calls == [1]


def test_retries_exhausted_names_attempts_and_last_error():
    attempt, calls = failing(10)
    with pytest.raises(RetryExhausted, match=r"HTTP 503 #3 \(after 3 attempts\)") as info:
        run(retry_async(attempt, RetryPolicy(retries=2, backoff_s=0.0), sleep=Recorder()))
    assert info.value.attempts == 3 and info.value.reason == "retries" and calls == [1, 2, 3]


def test_non_retryable_errors_pass_through_at_once():
    calls: list[int] = []

    async def attempt(n: int) -> str:
        calls.append(n)
        raise PermissionError("HTTP 401")

    with pytest.raises(PermissionError, match="401"):
        run(retry_async(attempt, RetryPolicy(retries=5), sleep=Recorder()))
    assert calls == [1]


def test_deadline_stops_a_wait_that_would_pass_it():
    now = [0.0]

    async def fake_sleep(delay: float) -> None:
        now[0] += delay

    attempt, calls = failing(10)
    policy = RetryPolicy(retries=10, backoff_s=1.0, max_backoff_s=100.0, jitter=0.0, deadline_s=5.0)
    with pytest.raises(RetryExhausted, match="would pass the 5s deadline") as info:
        run(retry_async(attempt, policy, sleep=fake_sleep, clock=lambda: now[0]))
    assert calls == [1, 2, 3] and now[0] == 3.0  # waited 1 + 2; the next 4 s wait would end at 7 s
    assert info.value.reason == "deadline"


def test_deadline_cancels_a_slow_attempt():
    async def slow(n: int) -> str:
        await asyncio.sleep(5.0)
        return "late"

    started = time.monotonic()
    with pytest.raises(RetryExhausted, match=r"the 0\.2s deadline passed"):
        run(retry_async(slow, RetryPolicy(retries=3, deadline_s=0.2)))
    assert time.monotonic() - started < 2.0


def test_retry_after_header_forms_and_statuses():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0.5 ") == 0.5
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 27 <= parse_retry_after(when) <= 31
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert [is_retryable_status(s) for s in (200, 400, 401, 404, 429, 500, 503)] == [
        False, False, False, False, True, True, True]


def test_policy_settings_are_checked():
    with pytest.raises(ValueError, match="retries must be >= 0"):
        RetryPolicy(retries=-1)
    with pytest.raises(ValueError, match="jitter must be within"):
        RetryPolicy(jitter=2.0)


# ---------------------------------------------------------------- the OpenAI policy against a real server

class _Flaky(BaseHTTPRequestHandler):
    script: list[tuple[int, dict[str, str]]] = []
    seen = 0

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen += 1
        status, headers = type(self).script.pop(0) if type(self).script else (200, {})
        body = b"{}" if status != 200 else json.dumps({"choices": [{"text": "x", "finish_reason": "stop", "logprobs": {
            "tokens": ["token_id:5"], "token_logprobs": [-0.25]}}]}).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def flaky_server():
    _Flaky.script, _Flaky.seen = [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_policy_waits_between_retries_and_honours_retry_after(flaky_server):
    from matpo_graph.runtime.policies.openai import OpenAIPolicy
    from matpo_graph.runtime.policy import SamplingParams

    _Flaky.script = [(503, {}), (429, {"Retry-After": "0.3"})]
    delays: list[float] = []

    async def go():
        policy = OpenAIPolicy(flaky_server, model="m", retries=3, backoff_s=0.05)

        async def record(delay: float) -> None:
            delays.append(delay)
            await asyncio.sleep(delay)

        policy.sleep = record
        try:
            return await policy.generate([1, 2], SamplingParams(max_tokens=1))
        finally:
            await policy.aclose()

    gen = run(go())
    assert gen.token_ids == [5] and _Flaky.seen == 3
    assert 0.025 <= delays[0] <= 0.05  # backed off (it used to retry at once), with jitter
    assert delays[1] == pytest.approx(0.3)  # the server's Retry-After


def test_openai_policy_gives_up_at_its_deadline(flaky_server):
    from matpo_graph.runtime.policies.openai import OpenAIPolicy
    from matpo_graph.runtime.policy import PolicyError, SamplingParams

    _Flaky.script = [(503, {"Retry-After": "1"})] * 20

    async def go():
        policy = OpenAIPolicy(flaky_server, model="m", retries=20, backoff_s=0.01, deadline_s=1.5)
        try:
            await policy.generate([1], SamplingParams(max_tokens=1))
        finally:
            await policy.aclose()

    started = time.monotonic()
    with pytest.raises(PolicyError, match="would pass the 1.5s deadline"):
        run(go())
    assert time.monotonic() - started < 3.0 and _Flaky.seen == 2
