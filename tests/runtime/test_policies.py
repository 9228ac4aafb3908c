"""Policy backends without the vLLM engine: scripted, the factory, OpenAI over real local HTTP, transformers."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from matpo_graph.runtime.gen_context import GENERATION_CONTEXT, GenerationContext
from matpo_graph.runtime.policies import make_policy
from matpo_graph.runtime.policies.scripted import ScriptedPolicy, scripted_logprob
from matpo_graph.runtime.policy import Policy, PolicyError, SamplingParams


def test_scripted_policy_list_replies_end_with_eos_and_truncate(chat):
    policy = ScriptedPolicy(["hello there", "bye"], chat)
    assert isinstance(policy, Policy)
    a = asyncio.run(policy.generate([1, 2], SamplingParams()))
    b = asyncio.run(policy.generate([1, 2], SamplingParams()))
    assert a.token_ids == chat.encode("hello there") + [2] and a.finish_reason == "stop"
    assert a.logprobs == [scripted_logprob(i) for i in a.token_ids]
    assert chat.decode(b.token_ids) == "bye"
    c = asyncio.run(policy.generate([1], SamplingParams(max_tokens=1)))
    assert len(c.token_ids) == 1 and c.finish_reason == "length"


def test_scripted_policy_rules_file_matches_context_and_prompt(chat, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {"role": "worker", "reply": "worker reply"},
                    {"contains": ["magic word"], "reply": "you said it"},
                ],
                "default": "fallback",
            }
        )
    )
    policy = make_policy(f"scripted:{script}", tokenizer=chat)

    async def ask(prompt_text, role):
        token = GENERATION_CONTEXT.set(GenerationContext(role=role, traj_id="0", depth=0, question="q"))
        try:
            gen = await policy.generate(chat.encode(prompt_text), SamplingParams())
        finally:
            GENERATION_CONTEXT.reset(token)
        return chat.decode(gen.token_ids)

    assert asyncio.run(ask("anything", "worker")) == "worker reply"
    assert asyncio.run(ask("say the magic word", "planner")) == "you said it"
    assert asyncio.run(ask("nothing", "planner")) == "fallback"


def test_scripted_policy_bad_files_are_clear_errors(chat, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON script"):
        ScriptedPolicy.from_file(bad, chat)
    bad.write_text(json.dumps({"rules": [{"reply": 3}]}))
    with pytest.raises(ValueError, match=r"rules\[0\] needs a string 'reply'"):
        ScriptedPolicy.from_file(bad, chat)
    nodefault = tmp_path / "nodefault.json"
    nodefault.write_text(json.dumps({"rules": [{"role": "x", "reply": "r"}]}))
    policy = ScriptedPolicy.from_file(nodefault, chat)
    with pytest.raises(PolicyError, match="no rule matched"):
        asyncio.run(policy.generate([1], SamplingParams()))


def test_make_policy_unknown_spec_lists_choices():
    with pytest.raises(ValueError, match="unknown policy 'tgi': use one of vllm, hf, openai:URL, scripted:FILE"):
        make_policy("tgi")
    with pytest.raises(ValueError, match="needs a model folder"):
        make_policy("vllm")


class _Completions(BaseHTTPRequestHandler):
    """A small OpenAI-compatible completions server: echoes the prompt ids back as sampled ids."""

    requests: ClassVar[list[dict]] = []
    fail_first = 0
    with_ids = True

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        ids = body["prompt"][-3:]
        tokens = [f"token_id:{i}" for i in ids] if type(self).with_ids else ["a", "b", "c"]
        payload = {
            "choices": [
                {
                    "text": "abc",
                    "finish_reason": "stop",
                    "logprobs": {"tokens": tokens, "token_logprobs": [-0.5, -1.0, -1.5]},
                }
            ]
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def completions_server():
    _Completions.requests, _Completions.fail_first, _Completions.with_ids = [], 0, True
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_policy_sends_token_ids_and_reads_ids_back(completions_server, monkeypatch, chat):
    monkeypatch.setenv("TEST_KEY", "sk-secret")
    _Completions.fail_first = 1  # one 503, then success: retried

    async def go():
        policy = make_policy(
            f"openai:{completions_server}", model="m", api_key_env="TEST_KEY", retries=2, tokenizer=chat
        )
        try:
            return await policy.generate([5, 6, 7, 8], SamplingParams(max_tokens=3, seed=9, temperature=0.5))
        finally:
            await policy.aclose()

    gen = asyncio.run(go())
    assert gen.token_ids == [6, 7, 8] and gen.logprobs == [-0.5, -1.0, -1.5] and gen.text == "abc"
    sent = _Completions.requests[-1]
    assert sent["path"] == "/v1/completions" and sent["auth"] == "Bearer sk-secret"
    assert (
        sent["body"]["prompt"] == [5, 6, 7, 8]
        and sent["body"]["seed"] == 9
        and sent["body"]["return_tokens_as_token_ids"]
    )
    assert len(_Completions.requests) == 2


def test_openai_policy_without_ids_retokenises_and_marks_it(completions_server, chat):
    _Completions.with_ids = False

    async def go():
        policy = make_policy(f"openai:{completions_server}", model="m", tokenizer=chat)
        try:
            return await policy.generate([5, 6], SamplingParams())
        finally:
            await policy.aclose()

    gen = asyncio.run(go())
    assert gen.token_ids == chat.encode("abc") + [2] and gen.finish_reason == "stop+retokenised"


def test_openai_policy_gives_up_with_policy_error(completions_server):
    _Completions.fail_first = 5

    async def go():
        policy = make_policy(f"openai:{completions_server}", model="m", retries=1)
        try:
            await policy.generate([1], SamplingParams())
        finally:
            await policy.aclose()

    with pytest.raises(PolicyError, match=r"failed: HTTP 503 \(after 2 attempts\)"):
        asyncio.run(go())


def test_hf_policy_batches_and_matches_a_torch_forward(chat):
    torch = pytest.importorskip("torch")
    from matpo_graph.runtime.models import resolve_model

    policy = make_policy("hf", resolve_model(), max_batch=4)
    prompts = [
        chat.template_ids([{"role": "user", "content": "Say hi."}], add_generation_prompt=True),
        chat.template_ids(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}],
            add_generation_prompt=True,
        ),
    ]

    async def both():
        return await asyncio.gather(
            *(policy.generate(p, SamplingParams(temperature=0.0, max_tokens=6)) for p in prompts)
        )

    gens = asyncio.run(both())
    for prompt, gen in zip(prompts, gens):
        assert 1 <= len(gen.token_ids) <= 6 and len(gen.logprobs) == len(gen.token_ids)
        with torch.no_grad():
            logits = policy.model(torch.tensor([prompt + gen.token_ids])).logits[0]
        ref = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        expected = [float(ref[i, t]) for i, t in enumerate(gen.token_ids)]
        assert gen.logprobs == pytest.approx(expected, abs=1e-3)
        assert gen.token_ids[0] == int(ref[0].argmax())  # greedy

    # weight updates: the policy serves new weights; keys it does not know are refused
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * 0.5
    assert asyncio.run(policy.load_weights(state)) >= 0.0
    assert torch.equal(policy.model.model.norm.weight, state["model.norm.weight"])
    with pytest.raises(PolicyError, match="unexpected \\['bogus.weight'\\]"):
        asyncio.run(policy.load_weights({**state, "bogus.weight": torch.zeros(1)}))
