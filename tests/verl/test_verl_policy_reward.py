"""The policy adapter over veRL's server protocol, and the bundle's reward function as veRL loads it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

from matpo_graph.runtime.gen_context import GENERATION_CONTEXT, GenerationContext  # noqa: E402
from matpo_graph.runtime.policy import PolicyError, SamplingParams  # noqa: E402
from matpo_graph.verl_target.policy import ServerManagerPolicy  # noqa: E402

from verl_helpers import compile_tiny, compose_verl  # noqa: E402

pytestmark = pytest.mark.verl


class RecordingServer:
    """Answers like veRL's vLLM server (popping the keys it uses) with a fixed continuation."""

    def __init__(self, tokens: list[int], *, logprobs: bool = True, stop_reason: str = "completed", step: int = 5) -> None:
        self.tokens, self.logprobs, self.stop_reason, self.step = tokens, logprobs, stop_reason, step
        self.calls: list[tuple[str, list[int], dict[str, Any], dict[str, Any]]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):  # type: ignore[no-untyped-def]
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append((request_id, list(prompt_ids), dict(sampling_params), kwargs))
        sampling_params.pop("max_tokens")  # as veRL's server does: the caller's dict must not be reused
        lps = [-0.5] * len(self.tokens) if self.logprobs and sampling_params.get("logprobs") else None
        self.step += 1
        return TokenOutput(token_ids=self.tokens, log_probs=lps, stop_reason=self.stop_reason, extra_fields={"global_steps": self.step})


def _in_traj(traj_id: str, coro):  # type: ignore[no-untyped-def]
    async def run():  # type: ignore[no-untyped-def]
        token = GENERATION_CONTEXT.set(GenerationContext(role="r", traj_id=traj_id, depth=0, question="q"))
        try:
            return await coro
        finally:
            GENERATION_CONTEXT.reset(token)

    return run()


def test_policy_adapter_keeps_verl_sampling_and_adds_the_call_budget() -> None:
    server = RecordingServer([5, 6, 7])
    verl_params = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.0, "logprobs": False}
    policy = ServerManagerPolicy(server, verl_params, session="s1", request_kwargs={"priority": 3})

    async def calls():  # type: ignore[no-untyped-def]
        a = await _in_traj("0", policy.generate([1, 2], SamplingParams(max_tokens=8, stop=("</x>",), seed=11)))
        b = await _in_traj("0.1", policy.generate([3], SamplingParams(max_tokens=3, temperature=1.3)))
        c = await _in_traj("0", policy.generate([1, 2, 9], SamplingParams(max_tokens=8)))
        return a, b, c

    a, b, c = asyncio.run(calls())
    (rid0, prompt0, p0, kw0), (rid1, _, p1, _), (rid2, _, p2, _) = server.calls
    assert (rid0, rid1, rid2) == ("s1:0", "s1:0.1", "s1:0")  # one sticky request id per trajectory
    assert prompt0 == [1, 2] and kw0 == {"priority": 3}
    assert p0 == {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.0, "max_tokens": 8,
                  "logprobs": True, "stop": ["</x>"], "include_stop_str_in_output": True, "seed": 11}
    assert p1["temperature"] == 0.6 and p1["max_tokens"] == 3 and "stop" not in p1  # veRL decides the temperature
    assert p2["max_tokens"] == 8  # a fresh dict every call
    assert a.token_ids == [5, 6, 7] and a.logprobs == [-0.5] * 3 and a.finish_reason == "stop"
    assert b.finish_reason == "length"
    assert policy.stats.calls == {"0": 2, "0.1": 1}
    assert (policy.stats.min_global_steps, policy.stats.max_global_steps) == (6, 8)


@pytest.mark.parametrize(("server", "match"), [
    (RecordingServer([1], stop_reason="aborted"), "aborted"),
    (RecordingServer([1, 2], logprobs=False), "logprobs"),
])
def test_policy_adapter_turns_server_failures_into_policy_errors(server: RecordingServer, match: str) -> None:
    policy = ServerManagerPolicy(server, {"temperature": 1.0})
    with pytest.raises(PolicyError, match=match):
        asyncio.run(policy.generate([1], SamplingParams(max_tokens=4)))


def test_bundle_reward_function_loads_the_way_verl_loads_it(tmp_path: Path) -> None:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from matpo_graph.compilers.verl import graph_overrides

    program, plan, bundle = compile_tiny(tmp_path / "b")
    cfg = compose_verl(graph_overrides(program, plan, bundle_dir=str(bundle.root)))
    compute_score = get_custom_reward_fn(cfg)
    assert compute_score is not None
    right = compute_score(data_source="matpo_graph/tiny_delegate", solution_str="so \\boxed{Ada Vell}", ground_truth=["A. Vell", "Ada Vell"], extra_info={})
    wrong = compute_score(data_source="matpo_graph/tiny_delegate", solution_str="\\boxed{Bo}", ground_truth=["Ada Vell"], extra_info={})
    assert right == {"score": plan.accuracy_weight, "acc": 1.0, "format": 0.0, "scored_by_loop": False}
    assert wrong["score"] == 0.0
    looped = compute_score(data_source="x", solution_str="", ground_truth=["Ada Vell"],
                           extra_info={"matpo_reward": {"score": 0.93, "acc": 1.0, "format": 0.3}})
    assert looped == {"score": 0.93, "acc": 1.0, "format": 0.3, "scored_by_loop": True}
