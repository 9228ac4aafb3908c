"""The per-role policy router with scripted backends: every generation goes to its role's policy, and the
executor records the policy (and adapter version) on each trajectory."""

from __future__ import annotations

import asyncio

import pytest
from rt_helpers import EchoSearch, planner_worker

from matpo_graph.core.toolcalls import format_tool_call
from matpo_graph.runtime.executor import Executor
from matpo_graph.runtime.policies.router import PolicyRouter
from matpo_graph.runtime.policies.scripted import ScriptedPolicy
from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams


class Labelled:
    """A scripted backend that counts its requests and labels its generations as a given adapter version."""

    def __init__(self, inner: ScriptedPolicy, adapter: str | None) -> None:
        self.inner, self.adapter, self.calls = inner, adapter, 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.calls += 1
        gen = await self.inner.generate(prompt_ids, sampling)
        return gen.model_copy(update={"adapter": self.adapter})


def _bound(program, planner: str, worker: str):  # type: ignore[no-untyped-def]
    roles = {"planner": program.roles["planner"].model_copy(update={"policy": planner}),
             "worker": program.roles["worker"].model_copy(update={"policy": worker})}
    return program.model_copy(update={"roles": roles})


def test_router_sends_each_role_to_its_policy_and_trajectories_record_it(chat) -> None:
    program = _bound(planner_worker(), "plan", "work")
    planner = Labelled(ScriptedPolicy([format_tool_call("ask_worker", {"subtask": "find X"}, "hermes"),
                                       "The answer is \\boxed{X}."], chat), "plan@3")
    worker = Labelled(ScriptedPolicy(["X is the answer."], chat), None)
    router = PolicyRouter({"plan": planner, "work": worker}, program.role_policies())
    tree = asyncio.run(asyncio.wait_for(Executor(program, router, chat, {"web_search": EchoSearch()}).run("Q?"), 60))
    by_role = {t.role: t for t in tree.trajectories}
    assert set(by_role) == {"planner", "worker"}
    assert (by_role["planner"].policy, by_role["planner"].adapter) == ("plan", "plan@3")
    assert (by_role["worker"].policy, by_role["worker"].adapter) == ("work", None)
    assert planner.calls == 2 and worker.calls == 1


def test_router_refuses_unknown_bindings_and_calls_without_context(chat) -> None:
    with pytest.raises(ValueError, match="no backend for policy"):
        PolicyRouter({"a": ScriptedPolicy(["x"], chat)}, {"planner": "a", "worker": "b"})
    router = PolicyRouter({"a": ScriptedPolicy(["x"], chat)}, {"planner": "a"})
    with pytest.raises(PolicyError, match="generation context"):
        asyncio.run(router.generate([1, 2], SamplingParams()))
