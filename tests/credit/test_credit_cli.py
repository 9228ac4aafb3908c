"""`matpo-graph credit`: tables and JSON of rewards and advantages, computing what is missing."""

from __future__ import annotations

import json

import pytest

from matpo_graph.cli import main
from matpo_graph.core.rollout import read_trees, write_trees

from credit_helpers import PLANNER_WORKER, plan, traj, tree


def unscored_trees():
    def one(tid: str, answer: str):
        return tree(
            tid,
            "q",
            None,
            [
                traj("0", role="planner", calls=[True], final_text=f"\\boxed{{{answer}}}"),
                traj("0.1", parent="0", role="worker", depth=1, mask=[0, 0, 0, 0, 1, 1], calls=[True, False]),
            ],
        )

    return [one("a", "gold"), one("b", "silver")]


@pytest.fixture
def trees_file(tmp_path):
    path = tmp_path / "trees.jsonl"
    write_trees(path, unscored_trees())
    return path


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "credit_plan.json"
    path.write_text(plan(PLANNER_WORKER).model_dump_json())
    return path


def test_cli_credit_computes_rewards_and_advantages_as_json(trees_file, plan_file, capsys) -> None:
    assert main(["credit", str(trees_file), "--plan", str(plan_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["tree"], r["traj"]): r for r in data["rows"]}
    assert rows[("a", "0")]["reward"] == pytest.approx(0.9 + 0.1 * (0.5 * 1.0 + 0.5 * 0.5))
    assert rows[("b", "0")]["reward"] == pytest.approx(0.1 * 0.75)
    assert rows[("a", "0")]["advantage"] > 0 > rows[("b", "0")]["advantage"]
    assert rows[("a", "0.1")]["advantage"] == rows[("a", "0")]["advantage"]  # broadcast
    assert rows[("a", "0.1")]["trained_tokens"] == 2 and rows[("a", "0.1")]["depth"] == 1
    assert data["metrics"]["matpo/credit/groups"] == 1.0


def test_cli_credit_prints_a_table_and_writes_output(trees_file, plan_file, tmp_path, capsys) -> None:
    out = tmp_path / "credited.jsonl"
    assert main(["credit", str(trees_file), "--plan", str(plan_file), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for word in ("planner", "worker", "advantage", "trained tok", "matpo/credit/groups"):
        assert word in text
    credited = read_trees(out)
    assert all(t.reward is not None and t.root.advantage is not None for t in credited)
    assert credited[0].root.format_score == 1.0


def test_cli_credit_keeps_existing_advantages_unless_recompute(tmp_path, plan_file, capsys) -> None:
    path = tmp_path / "t.jsonl"
    t = unscored_trees()[0]
    t = t.model_copy(update={"trajectories": [x.model_copy(update={"advantage": 0.123}) for x in t.trajectories]})
    write_trees(path, [t])
    assert main(["credit", str(path), "--plan", str(plan_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["advantage"] == 0.123
    assert main(["credit", str(path), "--plan", str(plan_file), "--json", "--recompute"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["advantage"] == 0.0  # a lone member


def test_cli_credit_strategy_override_and_default_plan(trees_file, capsys) -> None:
    assert main(["credit", str(trees_file), "--strategy", "root_only", "--json"]) == 0
    captured = capsys.readouterr()
    assert "default" in captured.err
    rows = {(r["tree"], r["traj"]): r for r in json.loads(captured.out)["rows"]}
    assert rows[("a", "0.1")]["advantage"] is None and rows[("a", "0")]["advantage"] is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--plan", "/no/such/plan.json"], "cannot load the credit plan"),
        (["--strategy", "nowhere_mod_xyz:f"], "cannot import module"),
    ],
)
def test_cli_credit_reports_errors(trees_file, capsys, extra, message: str) -> None:
    assert main(["credit", str(trees_file), *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_credit_rejects_bad_trees_file(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"tree_id": 1}\n')
    assert main(["credit", str(bad)]) == 2
    assert "cannot read rollout trees" in capsys.readouterr().err


def test_cli_credit_reads_the_plan_from_a_graph(trees_file, capsys) -> None:
    from pathlib import Path

    graph = Path(__file__).resolve().parents[2] / "examples" / "property_test_credit" / "graph.yaml"
    assert main(["credit", str(trees_file), "--graph", str(graph), "--json"]) == 0
    rows = {(r["tree"], r["traj"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows[("a", "0")]["advantage"] > 0
    assert rows[("a", "0.1")]["advantage"] is None  # 'worker' is not a role of that graph, so it is not trained
