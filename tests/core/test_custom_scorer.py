"""A custom reward scorer 'module:function' with veRL's compute_score signature: one function for the
local trainer's reward and for veRL's reward module, run only when the user trusts it."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from matpo_graph.core.reward import score_tree
from matpo_graph.core.rollout import RolloutTree, Trajectory, Turn
from matpo_graph.core.trust import ENV_TRUST_CODE, TrustPolicy, UntrustedCodeError
from matpo_graph.testing.shapes import GraphShape, make_plan
from matpo_graph.verl_target.reward import make_compute_score

ONE_ROLE = GraphShape(root="solver", roles=("solver",), edges={"solver": ()}, tools={"solver": ()}, max_depth=1)
SCORER = "matpo_test_scorers:compute_score"
TRUSTED = TrustPolicy(trusted_code=("matpo_test_scorers",))


@pytest.fixture(autouse=True)
def scorer_module(tmp_path, monkeypatch):
    (tmp_path / "matpo_test_scorers.py").write_text(textwrap.dedent('''
        CALLS = []

        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            CALLS.append((data_source, solution_str, list(ground_truth), dict(extra_info or {})))
            return 1.0 if "42" in solution_str else 0.25

        def as_dict(data_source, solution_str, ground_truth, extra_info=None):
            return {"score": 0.5, "note": "dict form"}

        def out_of_range(data_source, solution_str, ground_truth, extra_info=None):
            return 3.0
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(ENV_TRUST_CODE, raising=False)
    yield
    sys.modules.pop("matpo_test_scorers", None)


def solved(text: str) -> RolloutTree:
    root = Trajectory(traj_id="0", role="solver", depth=0, token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -0.1],
                      prompt_length=1, turns=[Turn(index=0, text=text, num_tokens=1)], final_text=text)
    return RolloutTree(tree_id="t", group_id="g", question="What is six times seven?", answers=["42", "forty-two"],
                       graph="arith", trajectories=[root])


def test_local_reward_calls_the_trusted_scorer_with_verls_arguments():
    plan = make_plan(ONE_ROLE, accuracy_scorer=SCORER)
    breakdown = score_tree(solved("It is \\boxed{42}"), plan, trust=TRUSTED)
    assert breakdown.accuracy == 1.0 and breakdown.total == pytest.approx(plan.accuracy_weight * 1.0 + plan.format_weight * breakdown.format)
    calls = sys.modules["matpo_test_scorers"].CALLS
    data_source, solution, truth, extra = calls[-1]
    assert (data_source, solution, truth) == ("matpo_graph/arith", "It is \\boxed{42}", ["42", "forty-two"])
    assert extra["question"] == "What is six times seven?" and extra["answer"] == "42"


def test_untrusted_scorer_is_refused_and_never_imported():
    plan = make_plan(ONE_ROLE, accuracy_scorer=SCORER)
    with pytest.raises(UntrustedCodeError, match="not trusted"):
        score_tree(solved("\\boxed{42}"), plan, trust=TrustPolicy())
    assert "matpo_test_scorers" not in sys.modules


def test_scorer_dict_result_and_range_check():
    ok = score_tree(solved("x"), make_plan(ONE_ROLE, accuracy_scorer="matpo_test_scorers:as_dict"), trust=TRUSTED)
    assert ok.accuracy == 0.5
    with pytest.raises(ValueError, match=r"must return a number in \[0, 1\].*3.0"):
        score_tree(solved("x"), make_plan(ONE_ROLE, accuracy_scorer="matpo_test_scorers:out_of_range"), trust=TRUSTED)


def test_verl_reward_module_calls_the_same_scorer(tmp_path, monkeypatch):
    plan = make_plan(ONE_ROLE, accuracy_scorer=SCORER)
    path = tmp_path / "credit_plan.json"
    path.write_text(json.dumps(plan.model_dump(mode="json")))
    compute_score = make_compute_score(path)
    with pytest.raises(UntrustedCodeError):
        compute_score(data_source="matpo_graph/arith", solution_str="\\boxed{42}", ground_truth=["42"], extra_info={})
    monkeypatch.setenv(ENV_TRUST_CODE, "matpo_test_scorers")  # how the trust reaches veRL's worker processes
    right = compute_score(data_source="matpo_graph/arith", solution_str="so \\boxed{42}", ground_truth=["42"], extra_info={"index": 3})
    wrong = compute_score(data_source="matpo_graph/arith", solution_str="\\boxed{41}", ground_truth=["42"], extra_info={})
    assert right == {"score": plan.accuracy_weight, "acc": 1.0, "format": 0.0, "scored_by_loop": False}
    assert wrong["acc"] == 0.25
    data_source, solution, truth, extra = sys.modules["matpo_test_scorers"].CALLS[-2]
    assert (data_source, solution, truth, extra["index"], extra["answer"]) == ("matpo_graph/arith", "so \\boxed{42}", ["42"], 3, "42")


def test_graph_with_a_custom_scorer_validates_only_with_trust(tmp_path: Path):
    from matpo_graph.core.loader import check_text

    text = f"name: g\nroot: a\nroles:\n  a: {{system: 'Answer {{{{ question }}}}'}}\nreward: {{accuracy: {{scorer: '{SCORER}'}}}}\n"
    assert [i.code for i in check_text(text, base_dir=tmp_path, trust=TrustPolicy()).issues] == ["untrusted-code"]
    assert check_text(text, base_dir=tmp_path, trust=TRUSTED).ok
