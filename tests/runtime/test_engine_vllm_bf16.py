"""A bfloat16 rollout engine (the default where the CPU has native bf16): it takes the trainer's float32
weights and tracks them within bf16 rounding, far closer than the update it was given moved them.

Slow (starts its own engine): ``pytest -m engine tests/runtime/test_engine_vllm_bf16.py``.
"""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def model_dir():  # type: ignore[no-untyped-def]
    from matpo_graph.runtime.models import resolve_model

    return resolve_model("smollm2-135m-instruct")


def _mean_abs(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def test_bf16_engine_reloads_float32_weights(model_dir, chat):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM

    from matpo_graph.runtime.policies.vllm import VLLMPolicy
    from matpo_graph.runtime.policy import SamplingParams
    from matpo_graph.model.precision import cpu_has_native_bf16

    if not cpu_has_native_bf16():
        pytest.skip("this CPU has no native bfloat16; the engine serves float32 here")

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    seq = chat.template_ids([
        {"role": "user", "content": "Which river flows through Vienna?"},
        {"role": "assistant", "content": "The Danube flows through Vienna."},
    ])

    def torch_logprobs() -> list[float]:
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float()[:-1], dim=-1)
        return [0.0] + [float(logp[i, seq[i + 1]]) for i in range(len(seq) - 1)]

    async def run() -> tuple[list[float], list[float], list[float], list[float]]:
        policy = VLLMPolicy(model_dir, kv_cache_gib=1, max_model_len=1024, max_num_seqs=4, dtype="bfloat16")
        try:
            before = await policy.score(seq)
            before_ref = torch_logprobs()
            with torch.no_grad():
                model.model.embed_tokens.weight.mul_(1.25)  # tied: the output head moves too
                model.model.norm.weight.mul_(0.8)
            await policy.load_weights(model.state_dict())
            after = await policy.score(seq)
            sampled = await policy.generate(chat.template_ids([{"role": "user", "content": "Hi"}], add_generation_prompt=True),
                                            SamplingParams(temperature=1.0, max_tokens=8))
            assert sampled.token_ids and len(sampled.logprobs) == len(sampled.token_ids)
            return before, before_ref, after, torch_logprobs()
        finally:
            policy.shutdown()

    before, before_ref, after, after_ref = asyncio.run(run())
    moved = _mean_abs(after_ref, before_ref)
    assert moved > 0.1, "the weight change must be large enough for the check to mean something"
    assert _mean_abs(before, before_ref) < 0.25 * moved  # bf16 rounding: ~0.06 per token here
    assert _mean_abs(after, after_ref) < 0.25 * moved  # the engine serves the new weights, within bf16 rounding
    assert _mean_abs(after, before) > 0.5 * moved
