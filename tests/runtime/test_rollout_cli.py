"""`matpo-graph rollout` with a scripted policy on the default graph and the embedded web."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matpo_graph.cli import main
from matpo_graph.core.rollout import read_trees
from matpo_graph.core.toolcalls import format_tool_call

GRAPH = Path(__file__).resolve().parents[2] / "graphs" / "deep_search.yaml"

SCRIPT = {
    "rules": [
        {
            "role": "planner",
            "turn": 0,
            "reply": "Delegating.\n"
            + format_tool_call("search_and_browse", {"subtask": "Find the founder."}, "hermes"),
        },
        {"role": "planner", "reply": "\\boxed{Nobody}"},
        {"role": "browser", "turn": 0, "reply": format_tool_call("web_search", {"query": "founder"}, "hermes")},
        {"role": "browser", "purpose": "summary", "reply": "<think>scratch</think>No founder is named."},
        {"role": "browser", "reply": "Done searching."},
    ]
}


@pytest.mark.skipif(not GRAPH.is_file(), reason="default graph not present")
def test_rollout_cli_scripted_default_graph(tmp_path, capsys):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / "tree.json"
    code = main(
        [
            "rollout",
            str(GRAPH),
            "-q",
            "Who founded it?",
            "--policy",
            f"scripted:{script}",
            "--answer",
            "Nobody",
            "--seed",
            "3",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "planner" in printed and "browser" in printed and "search_and_browse" in printed
    [tree] = read_trees(out)
    assert [t.role for t in tree.trajectories] == ["planner", "browser"]
    assert tree.reward is not None and tree.reward.accuracy == 1.0
    browser = tree.trajectories[1]
    [search] = browser.turns[0].calls
    assert search.valid and search.error is None and "founder" in search.result.lower()  # the embedded web answered
    assert browser.termination == "summary" and browser.final_text == "No founder is named."
    assert tree.root.turns[0].calls[0].result == "No founder is named."


def test_rollout_cli_bad_policy_spec_is_an_error(tmp_path, capsys):
    graph = tmp_path / "g.yaml"
    graph.write_text("name: g\nroot: solo\nroles:\n  solo:\n    system: Answer.\n")
    code = main(["rollout", str(graph), "-q", "q", "--policy", "nonsense"])
    assert code == 2 and "unknown policy 'nonsense'" in capsys.readouterr().err
