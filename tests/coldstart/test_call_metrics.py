"""Cold-start statistics on expert demonstrations (which call and answer perfectly)."""

from __future__ import annotations

from matpo_graph.core.rollout import RolloutTree, Trajectory, Turn
from matpo_graph.core.rollout import CallRecord, RewardBreakdown
from matpo_graph.coldstart.call_metrics import call_metrics

from cs_helpers import demos, load, questions


def test_call_metrics_on_expert_demonstrations(chat, web):
    program, plan = load("deep_search")
    trees = demos(program, plan, questions(web, 3, hops=2), chat, web).trees
    m = call_metrics(trees, answer_format=program.answer_format)
    assert m["first_reply_valid_call/planner"] == 1.0 and m["first_reply_valid_call/browser"] == 1.0
    assert m["call_validity"] == 1.0 and m["answer_in_format"] == 1.0 and m["accuracy"] == 1.0
    assert 0.0 < m["reply_valid_call/browser"] < 1.0  # the reply that reports makes no call
    assert m["group_variance_share"] == 0.0  # one tree per question: no spread


def tree(group, total, *, valid=True, answer="\\boxed{x}"):
    turn = Turn(index=0, text=answer, num_tokens=1, calls=[CallRecord(name="s", valid=valid)])
    root = Trajectory(traj_id="0", role="solo", depth=0, turns=[turn], final_text=answer)
    return RolloutTree(tree_id=f"{group}{total}{valid}", group_id=group, question="q", trajectories=[root],
                       reward=RewardBreakdown(total=total, accuracy=float(total > 0.5), format=1.0))


def test_call_metrics_group_variance_and_validity():
    trees = [tree("a", 1.0), tree("a", 0.1, valid=False), tree("b", 0.1), tree("b", 0.1, answer="no answer")]
    m = call_metrics(trees, answer_format="boxed")
    assert m["group_variance_share"] == 0.5
    assert m["first_reply_valid_call/solo"] == 0.75
    assert m["answer_in_format"] == 0.75
    assert m["accuracy"] == 0.25
