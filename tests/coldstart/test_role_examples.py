"""Few-shot role examples sit in every context as prompt (loss mask 0) and are never learned."""

from __future__ import annotations

import pytest

from matpo_graph.coldstart.sft_data import examples_from_trees

from cs_helpers import demos, graph_variant, load, questions

PLANNER_MARK = "Zebraquartz Example Planner"
BROWSER_MARK = "Zebraquartz Example Browser"


def with_examples(d):
    d["roles"]["planner"]["examples"] = [[
        {"role": "user", "content": "Who founded the press that published Old Mill?"},
        {"role": "assistant", "content": f"{PLANNER_MARK}\n<tool_call>\n"
                                         '{"name": "search_and_browse", "arguments": {"subtask": "Who published Old Mill?"}}\n</tool_call>'},
        {"role": "tool", "content": "<tool_response>\nAnswer: Rook Press.\n</tool_response>"},
        {"role": "assistant", "content": "\\boxed{Rook Press}"},
    ]]
    d["roles"]["browser"]["examples"] = [[
        {"role": "user", "content": "Lookup: Who wrote Old Mill?"},
        {"role": "assistant", "content": f"{BROWSER_MARK}\n<tool_call>\n"
                                         '{"name": "web_search", "arguments": {"query": "Who wrote Old Mill?"}}\n</tool_call>'},
    ]]


def test_role_examples_are_in_context_with_loss_mask_zero(tmp_path, chat, web):
    program, plan = load(graph_variant(tmp_path, "deep_search", with_examples))
    assert program.roles["planner"].examples and program.roles["browser"].examples
    batch = demos(program, plan, questions(web, 2, hops=2), chat, web)
    assert batch.kept == 2  # the expert skips the example messages when reading its own history
    for tree in batch.trees:
        for traj in tree.trajectories:
            mark = PLANNER_MARK if traj.role == "planner" else BROWSER_MARK
            kinds = [m.kind for m in traj.messages if mark in m.content]
            assert kinds == ["example"], traj.traj_id
            assert mark in chat.decode(traj.token_ids, skip_special_tokens=False)
            trained = [t if m else chat.hf.pad_token_id for t, m in zip(traj.token_ids, traj.loss_mask)]
            assert mark not in chat.decode(trained, skip_special_tokens=False)
            assert sum(traj.loss_mask) == sum(t.num_tokens for t in traj.turns)
    for ex in examples_from_trees(batch.trees):  # what the warm-up trains on: the same masks
        kept = [t for t, m in zip(ex.token_ids, ex.loss_mask) if m]
        text = chat.decode(kept, skip_special_tokens=False)
        assert PLANNER_MARK not in text and BROWSER_MARK not in text


PROPOSED = {  # graph -> role -> example file under graphs/examples/
    "deep_search": {"planner": "examples/planner.yaml", "browser": "examples/browser.yaml"},
    "single_agent": {"agent": "examples/solo.yaml"},
    "three_level": {"planner": "examples/planner.yaml", "researcher": "examples/researcher.yaml",
                    "browser": "examples/browser.yaml"},
}


@pytest.mark.parametrize("graph", sorted(PROPOSED))
def test_proposed_example_files_compile_and_keep_demonstrations_perfect(graph, tmp_path, chat, web):
    def add(d):
        for role, path in PROPOSED[graph].items():
            d["roles"][role]["examples"] = path

    program, plan = load(graph_variant(tmp_path, graph, add))
    for role in PROPOSED[graph]:
        assert program.roles[role].examples, role
    batch = demos(program, plan, questions(web, 2, hops=2), chat, web)
    assert batch.kept == 2
    for tree in batch.trees:
        for traj in tree.trajectories:
            assert any(m.kind == "example" for m in traj.messages)
            assert sum(traj.loss_mask) == sum(t.num_tokens for t in traj.turns)
