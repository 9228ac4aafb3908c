"""Per-tree budgets (limits.tree_seconds, limits.tree_tokens): a tree past either is cut, marked and still scored."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from rt_helpers import EchoSearch, planner_worker

from matpo_graph.compilers.local import compile_graph
from matpo_graph.core.loader import load_graph
from matpo_graph.core.reward import score_tree
from matpo_graph.core.spec import Limits
from matpo_graph.core.toolcalls import format_tool_call
from matpo_graph.runtime.executor import Executor
from matpo_graph.runtime.policies.scripted import ScriptedPolicy
from matpo_graph.tracking.rollout_metrics import rollout_metrics

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def hermes(name, **args):
    return format_tool_call(name, args, "hermes")


def run(executor, question="Who wrote Dune?", timeout=30, **kw):
    return asyncio.run(asyncio.wait_for(executor.run(question, **kw), timeout=timeout))


def looping(req):
    """A tree that never ends on its own: the planner always delegates, every worker always searches."""
    ctx = req.context
    if ctx.role == "planner":
        return "Looking again.\n" + hermes("ask_worker", subtask=f"lookup {ctx.turn}")
    return hermes("web_search", query=f"{ctx.task['subtask']} try {ctx.turn}")


def loop_program(**limits):
    return planner_worker(planner={"max_turns": 200}, worker={"max_turns": 200}, **limits)


def generated(tree) -> int:
    return sum(t.num_trained_tokens for t in tree.trajectories)


def test_limits_budgets_default_off_and_must_be_positive():
    assert Limits().tree_seconds is None and Limits().tree_tokens is None
    assert Limits(tree_seconds=90, tree_tokens=8000).tree_tokens == 8000
    for bad in ({"tree_seconds": 0}, {"tree_tokens": 0}, {"tree_seconds": -1.0}):
        with pytest.raises(ValidationError):
            Limits(**bad)


def test_compile_carries_tree_budgets_into_the_program():
    graph = load_graph(GRAPHS / "deep_search.yaml")
    program, _ = compile_graph(graph, GRAPHS)
    assert program.tree_seconds is None and program.tree_tokens is None
    limited = graph.model_copy(update={"limits": graph.limits.model_copy(update={"tree_seconds": 120.0, "tree_tokens": 6000})})
    program2, _ = compile_graph(limited, GRAPHS)
    assert (program2.tree_seconds, program2.tree_tokens) == (120.0, 6000)
    assert program2.graph_sha256 != program.graph_sha256


def test_looping_tree_is_cut_by_tree_seconds_quickly(chat):
    policy = ScriptedPolicy(looping, chat, latency_s=0.02)
    tool = EchoSearch(latency_s=0.01)
    ex = Executor(loop_program(tree_seconds=0.5), policy, chat, {"web_search": tool})
    t0 = time.perf_counter()
    tree = run(ex)
    took = time.perf_counter() - t0
    assert took < 3.0, took
    assert tree.truncated == "tree_seconds"
    root = tree.root
    assert root.termination == "truncated" and root.final_text == ""
    assert any(t.termination == "truncated" for t in tree.descendants)
    # nothing keeps running after the tree came back
    requests, calls = len(policy.requests), len(tool.calls)
    asyncio.run(asyncio.sleep(0.2))
    assert (len(policy.requests), len(tool.calls)) == (requests, calls)
    # scored as a tree without an answer, and counted per step
    reward = score_tree(tree, _plan())
    assert reward.answer is None and reward.accuracy == 0.0
    assert rollout_metrics([tree.model_copy(update={"reward": reward})])["truncated"] == 1.0


def test_tree_seconds_stops_an_open_tool_call(chat):
    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="slow") if ctx.turn == 0 else "\\boxed{x}"
        return hermes("web_search", query="slow") if ctx.turn == 0 else "report"

    ex = Executor(planner_worker(tree_seconds=0.3), ScriptedPolicy(script, chat), chat,
                  {"web_search": EchoSearch(latency_s=30.0)})
    t0 = time.perf_counter()
    tree = run(ex)
    assert time.perf_counter() - t0 < 3.0
    assert tree.truncated == "tree_seconds"
    assert [t.termination for t in tree.trajectories] == ["truncated", "truncated"]
    assert tree.trajectories[1].turns[0].calls == []  # the call was cut before it returned


def test_looping_tree_is_cut_by_tree_tokens(chat):
    budget = 300
    policy = ScriptedPolicy(looping, chat)
    ex = Executor(loop_program(tree_tokens=budget, edge={"max_parallel": 1}), policy, chat, {"web_search": EchoSearch()})
    tree = run(ex)
    assert tree.truncated == "tree_tokens"
    assert generated(tree) <= budget
    assert generated(tree) > budget - 64  # it ran until the budget was (nearly) spent, not much less
    assert tree.root.termination == "truncated" and tree.root.final_text == ""
    spenders = [t for t in tree.trajectories if t.termination == "truncated"]
    assert spenders and all(t.traj_id == "0" or t.traj_id.startswith("0.") for t in spenders)
    assert score_tree(tree, _plan()).answer is None


def test_turn_asks_for_at_most_the_tokens_left(chat):
    policy = ScriptedPolicy(lambda req: "word " * 200 + "\\boxed{x}", chat)
    prog = planner_worker(tree_tokens=50, planner={"max_tokens_per_turn": 256})
    tree = run(Executor(prog, policy, chat, {"web_search": EchoSearch()}))
    assert policy.requests[0].sampling.max_tokens == 50
    assert generated(tree) == 50 and tree.truncated == "tree_tokens"
    assert tree.root.termination == "truncated"  # the turn that spent the budget


def test_budgets_that_are_not_reached_change_nothing(chat):
    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="a") if ctx.turn == 0 else "Done. \\boxed{42}"
        return hermes("web_search", query="a") if ctx.turn == 0 else "Report: 42."

    plain = run(Executor(planner_worker(), ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}), seed=3)
    capped = run(Executor(planner_worker(tree_seconds=60.0, tree_tokens=10_000), ScriptedPolicy(script, chat), chat,
                          {"web_search": EchoSearch()}), seed=3)
    assert capped.truncated is None and plain.truncated is None
    assert [t.token_ids for t in capped.trajectories] == [t.token_ids for t in plain.trajectories]
    assert [t.termination for t in capped.trajectories] == [t.termination for t in plain.trajectories]
    assert capped.root.final_text == "Done. \\boxed{42}"
    assert rollout_metrics([capped])["truncated"] == 0.0


def test_many_cut_trees_in_one_group_do_not_crash(chat):
    ex = Executor(loop_program(tree_seconds=0.3), ScriptedPolicy(looping, chat, latency_s=0.01), chat,
                  {"web_search": EchoSearch(latency_s=0.01)})
    trees = asyncio.run(asyncio.wait_for(ex.run_group("q?", 4, group_id="g", seed=0), timeout=30))
    assert [t.truncated for t in trees] == ["tree_seconds"] * 4
    assert all(t.root.termination == "truncated" for t in trees)


def _plan():
    _, plan = compile_graph(load_graph(GRAPHS / "deep_search.yaml"), GRAPHS)
    return plan
