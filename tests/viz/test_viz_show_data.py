"""What the rollout page is built from: groups, credit, masks, metrics, plots and safe JSON."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from viz_helpers import KNOWN, make_run_dir

from matpo_graph.core.credit import assign_credit
from matpo_graph.core.program import CreditPlan
from matpo_graph.core.rollout import read_trees, write_trees
from matpo_graph.viz.show_data import collect_show_data
from matpo_graph.viz.show_page import script_json, show_page

VELORIA_REWARDS = [0.95, 0.0, 0.05, 0.9]


def _plan(**changes) -> CreditPlan:
    fields = dict(root="planner", group_size=4, strategy="broadcast", normalization="std", epsilon=1e-6,
                  single_member="zero", loss_agg="tree_token_mean", clip_ratio_low=0.2, clip_ratio_high=0.2,
                  dual_clip=None, kl_coef=0.0, kl_estimator="k3", answer_format="boxed", accuracy_scorer="exact_match",
                  accuracy_weight=0.9, format_weight=0.1, no_call_score=0.0, trained_roles=["planner", "browser"])
    fields.update(changes)
    return CreditPlan(**fields)


def _without_advantages(tmp_path: Path) -> Path:
    trees = [t.model_copy(update={"trajectories": [tr.model_copy(update={"advantage": None}) for tr in t.trajectories]})
             for t in read_trees(KNOWN)]
    out = tmp_path / "bare.jsonl"
    write_trees(out, trees)
    return out


def test_groups_hold_mean_and_unbiased_std_of_root_rewards():
    data = collect_show_data(KNOWN)
    groups = {g["id"]: g for g in data.summary["groups"]}
    mean = sum(VELORIA_REWARDS) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in VELORIA_REWARDS) / 3)
    assert groups["veloria"]["n"] == 4
    assert groups["veloria"]["mean"] == pytest.approx(0.475)
    assert groups["veloria"]["std"] == pytest.approx(std)
    assert groups["hostile"]["std"] == 0.0
    rows = {r["id"]: r for r in data.summary["trees"]}
    assert [rows[f"veloria-{i}"]["reward"] for i in range(4)] == VELORIA_REWARDS
    assert rows["veloria-0"]["adv"] == pytest.approx((0.95 - mean) / (std + 1e-6))
    assert data.summary["credit"]["status"] == "file"


def test_tree_rows_count_calls_tokens_and_depth():
    rows = {r["id"]: r for r in collect_show_data(KNOWN).summary["trees"]}
    trees = {t.tree_id: t for t in read_trees(KNOWN)}
    v0 = rows["veloria-0"]
    assert v0["n_traj"] == 3 and v0["depth"] == 2
    assert v0["invalid"] == 1 and v0["errors"] == 1
    assert v0["trained"] == sum(sum(t.loss_mask) for t in trees["veloria-0"].trajectories)
    assert v0["roles"] == {"planner": 1, "browser": 1, "verifier": 1}
    assert rows["veloria-2"]["term"] == "max_turns"


def test_bodies_carry_mask_runs_not_token_arrays():
    data = collect_show_data(KNOWN)
    trees = read_trees(KNOWN)
    for tree, body in zip(trees, data.bodies):
        for traj, packed in zip(tree.trajectories, body["trajs"]):
            assert "token_ids" not in packed and "logprobs" not in packed
            expanded = [v for v, n in packed["mask"] for _ in range(n)]
            assert expanded == traj.loss_mask
            assert packed["trained"] == sum(traj.loss_mask) and packed["tokens"] == len(traj.token_ids)
            assert [m[2] for m in packed["msgs"]] == [int(m.trained) for m in traj.messages]
            assert [_message_text(packed, m) for m in packed["msgs"]] == [m.content for m in traj.messages]


def _message_text(packed: dict, m: list) -> str:
    """What the page shows for a packed message (the same lookup as show.js)."""
    if m[3] is not None:
        return m[3]
    turn = packed["turns"][m[4][0]]
    return turn["text"] if len(m[4]) == 1 else turn["calls"][m[4][1]]["result"]


def test_repeated_long_texts_are_stored_once(tmp_path):
    tree = read_trees(KNOWN)[0]
    root = tree.root
    long_text = "A long planner turn that is repeated verbatim in the context messages. " * 3
    turns = [root.turns[0].model_copy(update={"text": long_text})] + root.turns[1:]
    msgs = [m.model_copy(update={"content": long_text}) if m.kind == "generated" and i == 2 else m
            for i, m in enumerate(root.messages)]
    tree = tree.model_copy(update={"trajectories": [root.model_copy(update={"turns": turns, "messages": msgs})]
                                   + tree.trajectories[1:]})
    write_trees(tmp_path / "t.jsonl", [tree])
    body = collect_show_data(tmp_path / "t.jsonl").bodies[0]["trajs"][0]
    assert body["msgs"][2][3] is None and body["msgs"][2][4] == [0]
    assert json.dumps(body).count("repeated verbatim") == 3  # the turn's text only


def test_missing_advantages_without_a_plan_are_not_invented(tmp_path):
    data = collect_show_data(_without_advantages(tmp_path))
    assert data.summary["credit"]["status"] == "missing"
    assert "--graph" in data.summary["credit"]["note"]
    assert all(r["adv"] is None for r in data.summary["trees"])


def test_missing_advantages_are_computed_with_the_run_credit_plan(tmp_path):
    bare = _without_advantages(tmp_path)
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    bare.rename(run / "rollouts" / "step_000003.jsonl")
    plan = _plan()
    (run / "credit_plan.json").write_text(plan.model_dump_json())
    data = collect_show_data(run)
    assert data.summary["credit"]["status"] == "computed"
    expected, _ = assign_credit(read_trees(run / "rollouts" / "step_000003.jsonl"), plan, warn=False)
    want = {t.tree_id: [tr.advantage for tr in t.trajectories] for t in expected}
    for body in data.bodies:
        assert [tr["adv"] for tr in body["trajs"]] == pytest.approx(want[body["id"]])
    # and they agree with the advantages written into the fixture by hand
    recorded = {t.tree_id: t.root.advantage for t in read_trees(KNOWN)}
    for row in data.summary["trees"]:
        assert row["adv"] == pytest.approx(recorded[row["id"]], abs=1e-9)
    # the frozen verifier is outside trained_roles: no advantage
    v0 = next(b for b in data.bodies if b["id"] == "veloria-0")
    assert v0["trajs"][2]["role"] == "verifier" and v0["trajs"][2]["adv"] is None


def test_credit_failure_degrades_to_missing(tmp_path):
    trees = [t.model_copy(update={"reward": None, "trajectories": [tr.model_copy(update={"advantage": None}) for tr in t.trajectories]})
             for t in read_trees(KNOWN)]
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    write_trees(run / "rollouts" / "step_000001.jsonl", trees)
    (run / "credit_plan.json").write_text(_plan().model_dump_json())
    data = collect_show_data(run)
    assert data.summary["credit"]["status"] == "missing"
    assert "computing them failed" in data.summary["credit"]["note"]
    assert all(r["adv"] is None and r["reward"] is None for r in data.summary["trees"])


def test_run_dir_brings_metrics_of_the_step_and_plots(tmp_path):
    run = make_run_dir(tmp_path, KNOWN)
    data = collect_show_data(run)
    assert data.summary["step"] == 2 and data.summary["steps"] == [1, 2]
    assert data.summary["metrics"] == {"step": 2, "reward_mean": 0.65, "loss": 0.5}  # the last record of step 2
    (plot,) = data.summary["plots"]
    assert plot["name"] == "reward.png" and plot["src"].startswith("data:image/png;base64,iVBOR")
    assert collect_show_data(run, step=1).summary["metrics"] == {"step": 1, "reward_mean": 0.1}


def test_script_json_cannot_close_the_script_tag():
    text = script_json({"a": "</script><script>alert(1)</script>", "b": "x\u2028y", "c": float("nan"), "d": "&amp;"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><script>alert(1)</script>", "b": "x\u2028y", "c": None, "d": "&amp;"}


def test_page_embeds_hostile_text_only_as_escaped_json():
    page = show_page(collect_show_data(KNOWN))
    assert "window.__pwned" in page  # the payload is there, as data
    assert "<img" not in page
    scripts = re.findall(r"<script[^>]*>", page)
    assert len([s for s in scripts if "application/json" not in s]) == 2  # the error sink and the app
    assert re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", page) is None
    assert "default-src 'none'" in page
