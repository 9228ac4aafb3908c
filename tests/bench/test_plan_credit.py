"""The delegation push sums advantage x root delegations by hops; one-hop plans count over-delegating trees."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matpo_graph.bench.learning_bench import BenchLayout
from matpo_graph.bench.plan_credit import RunPlanCredit, delegation_push, one_hop_plans, render_plan_credit
from matpo_graph.core.rollout import RolloutTree
from .test_flips import make_tree

ROOT = Path(__file__).resolve().parents[2]


def credited(tree: RolloutTree, adv: float) -> RolloutTree:
    root = tree.trajectories[0].model_copy(update={"advantage": adv})
    return tree.model_copy(update={"trajectories": [root, *tree.trajectories[1:]]})


def test_push_by_hand():
    # a two-hop group: the tree that delegated twice was right (+1.5), the three that delegated once were not
    two = [credited(make_tree("b", "t", 0, acc=1.0, delegations=2), 1.5)] + [
        credited(make_tree("b", "t", k, acc=0.0, delegations=1), -0.5) for k in (1, 2, 3)]
    # a one-hop group: the over-delegating tree was wrong
    one = [credited(make_tree("a", "t", 0, acc=0.0, delegations=2, hops=1), -1.5)] + [
        credited(make_tree("a", "t", k, acc=1.0, delegations=1, hops=1), 0.5) for k in (1, 2, 3)]
    push = delegation_push(two + one)
    assert push.by_hops == {2: pytest.approx(1.5), 1: pytest.approx(-1.5)} and push.total == pytest.approx(0.0)
    assert push.trees == 8
    uncredited = make_tree("c", "t", 0, acc=1.0, delegations=3).model_copy(update={"metadata": {}})
    assert delegation_push([uncredited]).by_hops == {None: 0.0}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-2, 2)), min_size=2, max_size=8))
def test_a_constant_delegation_count_gets_no_push_from_zero_sum_advantages(members):
    """Within a GRPO group the advantages sum to zero: when every tree delegates alike, there is nothing to push."""
    mean = sum(a for _, a in members) / len(members)
    d = members[0][0]
    trees = [credited(make_tree("q", "t", k, acc=0.0, delegations=d), a - mean) for k, (_, a) in enumerate(members)]
    assert delegation_push(trees).total == pytest.approx(0.0, abs=1e-9)


def test_one_hop_plans_count_greedy_and_sampled_trees():
    trees = [make_tree("a", "eg", 0, acc=1.0, delegations=1, hops=1), make_tree("a", "es", 0, acc=0.0, delegations=2, hops=1),
             make_tree("a", "es", 1, acc=1.0, delegations=3, hops=1), make_tree("b", "eg", 0, acc=1.0, delegations=2)]
    plans = one_hop_plans(trees)
    assert (plans.trees, plans.over, plans.right, plans.greedy, plans.greedy_over) == (3, 2, 2, 1, 0)
    assert plans.over_share == pytest.approx(2 / 3)


def test_render_sorts_runs_by_push():
    plans = one_hop_plans([make_tree("a", "eg", 0, acc=1.0, hops=1)])
    up = delegation_push([credited(make_tree("b", "t", 0, acc=1.0, delegations=2), 1.0)])
    down = delegation_push([credited(make_tree("a", "t", 0, acc=0.0, delegations=2, hops=1), -1.0)])
    text = render_plan_credit([RunPlanCredit("up", up, plans, plans), RunPlanCredit("down", down, plans, plans)])
    assert text.index("| down |") < text.index("| up |")
    assert "| down | 1 | -2.00 | +0.00 | -2.00 | 0.00 -> 0.00 (0.00 -> 0.00) | 1.00 -> 1.00 |" in text


def test_script_reads_a_benchmark_folder(tmp_path: Path):
    layout = BenchLayout(tmp_path / "bench")
    run = layout.run("deep_search-clean")
    (run / "rollouts").mkdir(parents=True)
    (run / "evals").mkdir()
    step = [credited(make_tree("b", "t", 0, acc=1.0, delegations=2), 1.0),
            credited(make_tree("b", "t", 1, acc=0.0, delegations=1), -1.0)]
    (run / "rollouts" / "step_000001.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in step))
    for s, d in ((0, 1), (10, 2)):
        with gzip.open(layout.eval_trees("deep_search-clean", s), "wt", encoding="utf-8") as fh:
            fh.write(make_tree("a", "eg", 0, acc=1.0, delegations=d, hops=1).model_dump_json() + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_plan_credit.py"), str(tmp_path / "bench")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| 2 | +1.00 | +1.00 | 0.00 -> 1.00 (0.00 -> 1.00) | 1.00 -> 1.00 |" in out.stdout
    # a warm-up evaluated at step 0 only: its plans, no push
    (run / "evals" / "step_000010.trees.jsonl.gz").unlink()
    for f in (run / "rollouts").iterdir():
        f.unlink()
    only = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_plan_credit.py"), str(tmp_path / "bench")],
                          capture_output=True, text=True, timeout=60)
    assert only.returncode == 0, only.stderr
    assert "| 0 | - | 0.00 (0.00) | 1.00 |" in only.stdout
    empty = tmp_path / "empty"
    failed = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_plan_credit.py"), str(empty)],
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0 and "no step-0 evaluation" in failed.stderr
