"""Executor branches with the scripted policy, the real SmolLM2 tokenizer and small local tools."""

from __future__ import annotations

import asyncio

import pytest
from rt_helpers import EchoSearch, child_callable, planner_worker, program, role, search_callable, tpl

from matpo_graph.core.toolcalls import format_tool_call
from matpo_graph.runtime.executor import Executor, RolloutSetupError
from matpo_graph.runtime.policies.scripted import ScriptedPolicy, scripted_logprob
from matpo_graph.runtime.policy import PolicyError


def hermes(name, **args):
    return format_tool_call(name, args, "hermes")


def run(executor, question="Who wrote Dune?", **kw):
    return asyncio.run(asyncio.wait_for(executor.run(question, **kw), timeout=60))


def assert_tokens_consistent(tree, chat):
    """Ids equal the template of the message list; mask and logprobs sit exactly on sampled tokens."""
    for t in tree.trajectories:
        reference = chat.template_ids([{"role": m.role, "content": m.content} for m in t.messages])
        if t.messages[-1].kind == "generated":
            # The one intended difference: a trajectory ends on the sampled end-of-turn token, without
            # the newline the template writes after it.
            assert chat.decode(reference[len(t.token_ids) :], skip_special_tokens=False) == "\n", t.traj_id
            reference = reference[: len(t.token_ids)]
        assert t.token_ids == reference, t.traj_id
        sampled = [i for i, m in zip(t.token_ids, t.loss_mask) if m]
        assert [lp for lp, m in zip(t.logprobs, t.loss_mask) if m] == [scripted_logprob(i) for i in sampled]
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.loss_mask) if not m)


def test_executor_parallel_fanout_runs_children_concurrently(chat):
    barrier = asyncio.Barrier(3)

    async def script(req):
        ctx = req.context
        if ctx.role == "planner":
            if ctx.turn == 0:
                return "Splitting.\n" + "\n".join(hermes("ask_worker", subtask=f"part {i}") for i in range(3))
            return "All parts done. \\boxed{42}"
        if ctx.turn == 0:
            await asyncio.wait_for(barrier.wait(), timeout=10)  # only passes if all three workers run at once
            return hermes("web_search", query=ctx.task["subtask"])
        return f"Report: found {ctx.task['subtask']}."

    tool = EchoSearch()
    ex = Executor(planner_worker(), ScriptedPolicy(script, chat), chat, {"web_search": tool})
    tree = run(ex)
    root = tree.root
    assert [t.traj_id for t in tree.trajectories] == ["0", "0.1", "0.2", "0.3"]
    assert [c.child_id for c in root.turns[0].calls] == ["0.1", "0.2", "0.3"]
    assert [c.result for c in root.turns[0].calls] == [f"Report: found part {i}." for i in range(3)]
    assert [tree.trajectories[i + 1].task for i in range(3)] == [{"subtask": f"part {i}"} for i in range(3)]
    assert root.termination == "answer" and root.final_text == "All parts done. \\boxed{42}"
    assert sorted(c["query"] for c in tool.calls) == ["part 0", "part 1", "part 2"]
    assert [m.kind for m in root.messages].count("child_result") == 3
    assert_tokens_consistent(tree, chat)


def test_executor_fanout_respects_edge_max_parallel(chat):
    active = {"now": 0, "max": 0}

    async def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return "\n".join(hermes("ask_worker", subtask=str(i)) for i in range(5)) if ctx.turn == 0 else "\\boxed{x}"
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await asyncio.sleep(0.01)
        active["now"] -= 1
        return "done"

    ex = Executor(
        planner_worker(edge={"max_parallel": 2}), ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}
    )
    tree = run(ex)
    assert len(tree.descendants) == 5 and active["max"] == 2


def test_executor_global_cap_with_nested_calls_does_not_deadlock(chat):
    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return "\n".join(hermes("ask_worker", subtask=str(i)) for i in range(4)) if ctx.turn == 0 else "\\boxed{x}"
        return hermes("web_search", query="q") if ctx.turn == 0 else "done"

    tool = EchoSearch(latency_s=0.001)
    ex = Executor(planner_worker(max_concurrency=1), ScriptedPolicy(script, chat), chat, {"web_search": tool})
    tree = run(ex)
    assert len(tree.descendants) == 4 and len(tool.calls) == 4 and tool.max_active == 1


def test_executor_depth_limit_returns_error_message(chat):
    prog = program(
        {
            "planner": role("planner", [child_callable()], root=True),
            "worker": role("worker", [child_callable("delegate", "worker")]),
        },
        max_depth=1,
    )

    def script(req):
        ctx = req.context
        if ctx.turn == 0:
            return hermes("ask_worker" if ctx.role == "planner" else "delegate", subtask="deeper")
        return "\\boxed{done}" if ctx.role == "planner" else "finished"

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {}))
    assert [t.traj_id for t in tree.trajectories] == ["0", "0.1"]
    [call] = tree.trajectories[1].turns[0].calls
    assert call.kind == "child" and call.valid and call.child_id is None
    assert call.error == "max_depth 1 reached" and "delegation limit" in call.result
    assert tree.trajectories[1].messages[-2].kind == "error"
    assert_tokens_consistent(tree, chat)


def test_executor_undeclared_tool_is_invalid_and_not_run(chat):
    def script(req):
        if req.context.turn == 0:
            return hermes("web_search", query="dune author")  # the planner has no web_search
        return "\\boxed{Frank Herbert}"

    tool = EchoSearch()
    tree = run(Executor(planner_worker(), ScriptedPolicy(script, chat), chat, {"web_search": tool}))
    [call] = tree.root.turns[0].calls
    assert (call.kind, call.valid, call.error) == ("invalid", False, "unknown callable 'web_search'")
    assert "You can call: ask_worker" in call.result and tool.calls == []
    assert tree.root.messages[-2].kind == "error" and tree.root.termination == "answer"


def test_executor_malformed_and_schema_invalid_calls(chat):
    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="x") if ctx.turn == 0 else "\\boxed{1}"
        if ctx.turn == 0:
            return '<tool_call>{"name": "web_search", "arguments": {"query": </tool_call>\n' + hermes("web_search", q=3)
        return "nothing found"

    tool = EchoSearch()
    tree = run(Executor(planner_worker(), ScriptedPolicy(script, chat), chat, {"web_search": tool}))
    bad_json, bad_args = tree.trajectories[1].turns[0].calls
    assert (bad_json.kind, bad_json.valid) == ("invalid", False) and "bad JSON" in bad_json.error
    assert (bad_args.kind, bad_args.valid) == ("tool", False) and "'query' is a required property" in bad_args.error
    assert "Nothing was run" in bad_args.result and tool.calls == []


def test_executor_overflow_drops_latest_messages_then_summarises(chat):
    big = "lorem ipsum " * 150  # ~300 tokens per result
    prog = planner_worker(
        context_tokens=700,
        summary_reserve=100,
        worker={"final_summary": "on_overflow", "max_turns": 10, "max_tokens_per_turn": 40},
    )

    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="long") if ctx.turn == 0 else "\\boxed{ok}"
        if ctx.purpose == "summary":
            return "Summary: nothing useful."
        return hermes("web_search", query=f"page {ctx.turn}")

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch(text=big)}))
    w = tree.trajectories[1]
    assert w.termination == "context_overflow"
    assert w.turns[-1].purpose == "summary" and w.final_text == "Summary: nothing useful."
    assert len(w.token_ids) <= prog.context_tokens
    kinds = [m.kind for m in w.messages]
    assert kinds[-2:] == ["instruction", "generated"]
    assert kinds.count("tool_result") < sum(len(t.calls) for t in w.turns)  # some results were dropped
    assert tree.root.turns[0].calls[0].result == "Summary: nothing useful."
    assert_tokens_consistent(tree, chat)


def test_executor_root_out_of_turns_is_forced_to_answer(chat):
    prog = planner_worker(planner={"max_turns": 2})

    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return "\\boxed{forced}" if ctx.purpose == "forced_answer" else hermes("ask_worker", subtask="again")
        return "report"

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}))
    root = tree.root
    assert root.termination == "max_turns"
    assert [t.purpose for t in root.turns] == ["act", "act", "forced_answer"]
    assert root.final_text == "\\boxed{forced}" and root.messages[-2].kind == "instruction"
    assert len(tree.descendants) == 2


def test_executor_child_result_is_cleaned_and_capped(chat):
    prog = planner_worker(edge={"max_result_chars": 80})
    long_tail = "x" * 200

    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="s") if ctx.turn == 0 else "\\boxed{y}"
        return (
            "<think>private reasoning</think>The answer is Paris. " + hermes("web_search", query="leftover") + long_tail
        )

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}))
    child = tree.trajectories[1]
    result = tree.root.turns[0].calls[0].result
    assert result == child.final_text and len(result) == 80
    assert result.startswith("The answer is Paris. xxx") and result.endswith("[...truncated]")
    assert "<think>" not in result and "tool_call" not in result


def test_executor_child_always_summary(chat):
    prog = planner_worker(worker={"final_summary": "always"})

    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="s") if ctx.turn == 0 else "\\boxed{y}"
        return "Final report: 7." if ctx.purpose == "summary" else "I think it is 7."

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}))
    child = tree.trajectories[1]
    assert child.termination == "summary" and [t.purpose for t in child.turns] == ["act", "summary"]
    assert tree.root.turns[0].calls[0].result == "Final report: 7."


def test_executor_examples_are_in_prompt_and_never_trained(chat):
    examples = [
        [
            {"role": "user", "content": "Example question?"},
            {"role": "assistant", "content": "EXAMPLE_ANSWER \\boxed{1}"},
        ]
    ]
    prog = program({"planner": role("planner", root=True, examples=examples)})
    tree = run(Executor(prog, ScriptedPolicy(["\\boxed{2}"], chat), chat, {}))
    root = tree.root
    assert [m.kind for m in root.messages] == ["prompt", "example", "example", "prompt", "generated"]
    example_ids = chat.encode("EXAMPLE_ANSWER")
    start = next(i for i in range(len(root.token_ids)) if root.token_ids[i : i + len(example_ids)] == example_ids)
    assert start < root.prompt_length and not any(root.loss_mask[: root.prompt_length])
    assert sum(root.loss_mask) == root.turns[0].num_tokens == len(chat.encode("\\boxed{2}")) + 1
    assert_tokens_consistent(tree, chat)


def test_executor_policy_error_is_recorded_not_raised(chat):
    def script(req):
        ctx = req.context
        if ctx.role == "worker":
            raise PolicyError("engine down")
        return hermes("ask_worker", subtask="s") if ctx.turn == 0 else "\\boxed{z}"

    tree = run(Executor(planner_worker(), ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}))
    child = tree.trajectories[1]
    assert child.termination == "policy_error" and child.error == "PolicyError: engine down"
    assert child.turns == [] and sum(child.loss_mask) == 0
    call = tree.root.turns[0].calls[0]
    assert call.child_id == "0.1" and "no report" in call.result
    assert tree.root.termination == "answer" and tree.root.final_text == "\\boxed{z}"


def test_executor_failing_tool_is_recorded(chat):
    def script(req):
        ctx = req.context
        if ctx.role == "planner":
            return hermes("ask_worker", subtask="s") if ctx.turn == 0 else "\\boxed{z}"
        return hermes("web_search", query="q") if ctx.turn == 0 else "gave up"

    tree = run(Executor(planner_worker(), ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch(fail=True)}))
    [call] = tree.trajectories[1].turns[0].calls
    assert call.valid and call.error == "RuntimeError: backend exploded" and "tool failed" in call.result


def test_executor_xml_format_and_tool_role(chat):
    prog = program({"planner": role("planner", [search_callable()], root=True)}, fmt="xml")

    def script(req):
        return format_tool_call("web_search", {"query": "a"}, "xml") if req.context.turn == 0 else "\\boxed{a}"

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}, tool_role="tool"))
    root = tree.root
    assert root.turns[0].calls[0].result == "result for a"
    assert root.messages[-2].role == "tool" and root.messages[-2].content.startswith('<tool_result name="web_search">')
    assert_tokens_consistent(tree, chat)


def test_executor_run_group_ids_and_seeds(chat):
    policy = ScriptedPolicy(["\\boxed{1}"], chat)
    ex = Executor(program({"planner": role("planner", root=True)}), policy, chat, {})
    trees = asyncio.run(ex.run_group("q?", 3, group_id="g7", answers=["1"], seed=5))
    assert [t.tree_id for t in trees] == ["g7/0", "g7/1", "g7/2"] and {t.group_id for t in trees} == {"g7"}
    assert trees[0].answers == ["1"] and trees[0].metadata["seed"] == 5
    seeds = {r.sampling.seed for r in policy.requests}
    assert len(seeds) == 3 and None not in seeds


def test_executor_missing_tool_implementation_is_a_setup_error(chat):
    with pytest.raises(RolloutSetupError, match="no implementation for tool\\(s\\) 'web_search'"):
        Executor(planner_worker(), ScriptedPolicy(["x"], chat), chat, {})


def test_executor_root_template_error_raises_clearly(chat):
    prog = program({"planner": role("planner", root=True, system=tpl("{{ nonexistent }}"))})
    with pytest.raises(RolloutSetupError, match="role 'planner': a prompt template does not render"):
        run(Executor(prog, ScriptedPolicy(["x"], chat), chat, {}))


def test_executor_child_template_error_becomes_call_error(chat):
    prog = planner_worker(worker={"user": tpl("{{ args.missing_key.x }}")})

    def script(req):
        return hermes("ask_worker", subtask="s") if req.context.turn == 0 else "\\boxed{z}"

    tree = run(Executor(prog, ScriptedPolicy(script, chat), chat, {"web_search": EchoSearch()}))
    call = tree.root.turns[0].calls[0]
    assert len(tree.trajectories) == 1 and call.child_id is None and "could not start" in call.result
