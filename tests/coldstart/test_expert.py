"""The expert demonstrator through the real executor, real tools (embedded web) and the real tokenizer."""

from __future__ import annotations

import asyncio

import pytest

from matpo_graph.core.reward import normalize_answer
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.data.qa import QAItem
from matpo_graph.runtime.policy import PolicyError, SamplingParams
from matpo_graph.coldstart.expert import ExpertPolicy, steps_of

from cs_helpers import demos, load, questions

SHIPPED = ["deep_search", "single_agent", "three_level", "two_workers"]
CHILD_ROLE = {"deep_search": "browser", "three_level": "researcher", "two_workers": "browser"}


def mask_runs(traj):
    """Token id runs where the loss mask is 1, in order."""
    runs, cur = [], []
    for tid, m in zip(traj.token_ids, traj.loss_mask):
        if m:
            cur.append(tid)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


@pytest.mark.parametrize("graph", SHIPPED)
def test_expert_demos_score_full_reward_on_their_questions(graph, chat, web):
    program, plan = load(graph)
    items = questions(web, 4, hops=2)
    batch = demos(program, plan, items, chat, web, keep_all=True)
    assert batch.tried == 4 and batch.kept == 4
    for tree, item in zip(batch.trees, items):
        assert tree.reward is not None
        assert tree.reward.total == pytest.approx(plan.accuracy_weight + plan.format_weight), tree.question
        assert normalize_answer(tree.reward.answer or "") == normalize_answer(item.answers[0])


@pytest.mark.parametrize("graph", ["deep_search", "single_agent"])
def test_expert_demos_are_valid_rollout_trees(graph, chat, web):
    program, plan = load(graph)
    batch = demos(program, plan, questions(web, 4, hops=2), chat, web)
    assert batch.kept == 4
    for tree in batch.trees:
        RolloutTree.model_validate_json(tree.model_dump_json())  # invariants hold after a round trip
        assert tree.root.role == program.root and tree.root.parent_id is None and tree.root.depth == 0
        ids = {t.traj_id for t in tree.trajectories}
        for traj in tree.trajectories:
            assert traj.role in program.roles
            assert traj.termination != "policy_error", traj.error
            if traj.parent_id is not None:
                assert traj.parent_id in ids and traj.depth >= 1
            # the loss mask covers exactly the generated tokens, and they carry no sampling logprobs
            runs = mask_runs(traj)
            assert [len(r) for r in runs] == [t.num_tokens for t in traj.turns]
            assert all(lp == 0.0 for lp in traj.logprobs)
            assert not any(traj.loss_mask[: traj.prompt_length])
            for run, turn in zip(runs, traj.turns):
                assert run[-1] in chat.eos_token_ids  # every reply ends with the end-of-turn token
                assert chat.decode(run[:-1], skip_special_tokens=False) == turn.text
            for call in traj.calls:
                assert call.valid, call.error


def test_expert_planner_delegates_each_lookup_with_earlier_answers_substituted(chat, web):
    program, plan = load("deep_search")
    item = next(q for q in web.world.questions["train"] if q.metadata.get("hops") == 2)
    tree = demos(program, plan, [item], chat, web).trees[0]
    first, second = item.decomposition
    subtasks = [c.arguments["subtask"] for c in tree.root.calls]
    assert subtasks == [first["question_resolved"], second["question_resolved"]]
    assert first["answer"] in subtasks[1]
    children = tree.children_of("0")
    assert [c.role for c in children] == ["browser", "browser"]
    assert [c.task["subtask"] for c in children] == subtasks
    for child in children:  # each browser searches, then scrapes, and reports its fact
        assert [c.name for c in child.calls] == ["web_search", "scrape"]
        assert child.turns[-1].purpose == "summary"


def test_expert_three_level_passes_lookups_down(chat, web):
    program, plan = load("three_level")
    item = next(q for q in web.world.questions["train"] if q.metadata.get("hops") == 2)
    tree = demos(program, plan, [item], chat, web).trees[0]
    roles = sorted((t.depth, t.role) for t in tree.trajectories)
    assert roles == [(0, "planner"), (1, "researcher"), (1, "researcher"), (2, "browser"), (2, "browser")]
    for researcher in tree.children_of("0"):
        (browser,) = tree.children_of(researcher.traj_id)
        assert browser.task["subtask"] == researcher.task["subtask"]


def test_expert_single_agent_does_the_whole_chain(chat, web):
    program, plan = load("single_agent")
    item = next(q for q in web.world.questions["train"] if q.metadata.get("hops") == 2)
    tree = demos(program, plan, [item], chat, web).trees[0]
    assert len(tree.trajectories) == 1
    assert [c.name for c in tree.root.calls] == ["web_search", "scrape", "web_search", "scrape"]
    assert item.decomposition[1]["question_resolved"] == tree.root.calls[2].arguments["query"]


def test_expert_policy_outside_the_executor_raises_policy_error(chat):
    program, _ = load("deep_search")
    policy = ExpertPolicy(program, chat, [])
    with pytest.raises(PolicyError, match="generation context"):
        asyncio.run(policy.generate([1, 2, 3], SamplingParams()))


def test_expert_unknown_question_is_recorded_not_raised(chat, web):
    program, plan = load("deep_search")
    stranger = QAItem(id="x", question="Who painted the moon?", answers=["nobody"])
    known = questions(web, 1, hops=1)
    from matpo_graph.runtime.executor import Executor
    from matpo_graph.tools.registry import build_tools

    async def go():
        tools = build_tools(program.tools, embedded_url=web.url)
        try:
            ex = Executor(program, ExpertPolicy(program, chat, known), chat, tools)
            return await ex.run(stranger.question)
        finally:
            await tools.aclose()

    tree = asyncio.run(go())
    assert tree.root.termination == "policy_error"
    assert "does not know the question" in (tree.root.error or "")


def test_steps_of_resolves_hash_references_and_dependencies():
    item = QAItem(id="q", question="Where was the author of X born?", answers=["Paris"], decomposition=[
        {"question": "Who wrote X?", "answer": "Ann Lee"},
        {"question": "Where was #1 born?", "answer": "Paris"},
    ])
    steps = steps_of(item)
    assert [s.question for s in steps] == ["Who wrote X?", "Where was Ann Lee born?"]
    assert [s.deps for s in steps] == [(), (1,)]
    plain = QAItem(id="p", question="Who wrote X?", answers=["Ann Lee"])
    assert [(s.question, s.answer) for s in steps_of(plain)] == [("Who wrote X?", "Ann Lee")]


def test_steps_of_one_step_decomposition_is_the_question_as_asked():
    item = QAItem(id="q", question="Who employed Ann Lee?", answers=["Rook Press"], decomposition=[
        {"question": "Which organisation did Ann Lee work for?", "answer": "Rook Press", "support_page": "/page/ann-lee"},
    ])
    (step,) = steps_of(item)
    assert (step.question, step.answer, step.support) == ("Who employed Ann Lee?", "Rook Press", "/page/ann-lee")


def test_expert_root_states_the_lookup_count_first_and_closes_on_it(chat, web):
    """One-lookup and multi-lookup questions differ from the root's first words on, and its last turn says why it stops."""
    program, plan = load("deep_search")
    one = next(q for q in web.world.questions["train"] if q.metadata.get("hops") == 1)
    two = next(q for q in web.world.questions["train"] if q.metadata.get("hops") == 2)
    trees = demos(program, plan, [one, two], chat, web).trees
    first = {t.question: [turn.text for turn in t.root.turns] for t in trees}
    fields = [step["field"] for step in two.decomposition]
    assert first[one.question][0].startswith(f"Fields to find: {one.decomposition[0]['field']}. This needs one lookup.\n<tool_call>")
    assert first[one.question][-1].startswith("The helper found: ") and "That was the only lookup." in first[one.question][-1]
    assert first[two.question][0].startswith(f"Fields to find: {fields[0]}, then {fields[1]}. This needs 2 lookups:\n1. ")
    assert "Next: lookup 2 of 2." in first[two.question][1]
    assert "All 2 lookups are done." in first[two.question][-1]


def test_expert_browser_names_the_row_it_needs_then_quotes_that_row(chat, web):
    """The helper's first words name the infobox label of its lookup; its reading turn quotes that row verbatim."""
    program, plan = load("deep_search")
    items = [q for q in web.world.questions["train"] if q.metadata.get("hops") == 2][:3]
    trees = demos(program, plan, items, chat, web).trees
    assert len(trees) == 3
    for tree, item in zip(trees, items):
        browsers = [t for t in tree.trajectories if t.role == "browser"]
        assert len(browsers) == len(item.decomposition)
        for traj, step in zip(browsers, item.decomposition):
            field = step["field"]
            assert traj.turns[0].text.startswith(f"Field to find: {field}. Let me search.")
            quote = f'The page says: "{field} | {step["answer"]}"'
            assert any(turn.text.startswith(quote) for turn in traj.turns), [turn.text for turn in traj.turns]


def test_steps_of_keeps_the_field_label_when_the_data_names_it():
    item = QAItem(id="q", question="Who employed Ann Lee?", answers=["Rook Press"], decomposition=[
        {"question": "Which organisation did Ann Lee work for?", "answer": "Rook Press", "field": "Employer"},
    ])
    assert [s.field for s in steps_of(item)] == ["Employer"]
    assert [s.field for s in steps_of(QAItem(id="p", question="Who wrote X?", answers=["Ann Lee"]))] == [None]
