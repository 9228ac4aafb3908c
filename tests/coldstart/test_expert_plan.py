"""Which graphs the expert can demonstrate, and the message when it cannot."""

from __future__ import annotations

import pytest

from matpo_graph.cli import main
from matpo_graph.coldstart.expert_plan import ExpertUnsupported, plan_expert

from cs_helpers import graph_variant, load


def test_plan_expert_shipped_graphs_pick_a_browsing_path():
    assert {r: s.kind for r, s in plan_expert(load("deep_search")[0]).items()} == {"planner": "delegate", "browser": "browse"}
    assert {r: s.kind for r, s in plan_expert(load("single_agent")[0]).items()} == {"agent": "browse"}
    three = plan_expert(load("three_level")[0])
    assert [three[r].kind for r in ("planner", "researcher", "browser")] == ["delegate", "delegate", "browse"]
    two = plan_expert(load("two_workers")[0])
    assert two["planner"].child == "search_and_browse" and "calculator" not in two


def test_plan_expert_role_without_search_names_role_and_reason(tmp_path):
    def scrape_only(d):
        d["roles"]["agent"]["tools"] = ["scrape"]

    program, _ = load(graph_variant(tmp_path, "single_agent", scrape_only))
    with pytest.raises(ExpertUnsupported, match=r"role 'agent': it has no search tool") as info:
        plan_expert(program)
    assert info.value.role == "agent"


def test_plan_expert_edge_to_non_browsing_child_is_explained(tmp_path):
    def calculator_only(d):
        d["edges"] = [e for e in d["edges"] if e["to"] != "browser"]
        del d["roles"]["browser"]
        del d["tools"]["web_search"], d["tools"]["scrape"]

    program, _ = load(graph_variant(tmp_path, "two_workers", calculator_only))
    with pytest.raises(ExpertUnsupported) as info:
        plan_expert(program)
    msg = str(info.value)
    assert "role 'planner'" in msg
    assert "edge 'compute' leads to 'calculator', which cannot look facts up" in msg
    assert "search and scrape tools" in msg


def test_cli_demos_unsupported_graph_exits_2_with_the_reason(tmp_path, capsys):
    def scrape_only(d):
        d["roles"]["agent"]["tools"] = ["scrape"]

    path = graph_variant(tmp_path, "single_agent", scrape_only)
    code = main(["demos", str(path), "-n", "1", "-o", str(tmp_path / "d.jsonl")])
    assert code == 2
    assert "cannot play role 'agent'" in capsys.readouterr().err
    assert not (tmp_path / "d.jsonl").exists()
