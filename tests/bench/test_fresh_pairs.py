"""Fresh-question pairs: first meetings only, units pooled over pairs, mismatched batches refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matpo_graph.bench.fresh_pairs import first_met_accuracy, paired_blocks, render_fresh_pairs
from matpo_graph.bench.learning_bench import BenchLayout
from matpo_graph.rl.data_order import extra_draw_tag, is_extra_draw
from .test_flips import make_tree

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_fresh_pairs.py"


def test_first_met_scores_each_question_once_at_its_first_step():
    steps = {1: [make_tree("a", "t", 0, acc=1.0), make_tree("a", "t", 1, acc=0.0), make_tree("b", "t", 0, acc=1.0)],
             2: [make_tree("a", "t", 0, acc=1.0), make_tree("c", "t", 0, acc=0.0)]}
    assert first_met_accuracy(steps) == {1: {"a": 0.5, "b": 1.0}, 2: {"a": None, "c": 0.0}}
    with pytest.raises(ValueError, match="no reward"):
        first_met_accuracy({1: [make_tree("a", "t", 0, acc=1.0).model_copy(update={"reward": None})]})


def test_extra_draws_count_as_met_but_are_not_units():
    """Dynamic sampling's extra questions differ between runs: never units, but after them a question is not fresh."""
    extra = make_tree("b", "t", 0, acc=1.0).model_copy(update={"group_id": "d1-0-b", "tree_id": "d1-0-b/0"})
    steps = {1: [make_tree("a", "t", 0, acc=0.0), extra], 2: [make_tree("b", "t", 0, acc=1.0), make_tree("c", "t", 0, acc=0.5)]}
    assert first_met_accuracy(steps) == {1: {"a": 0.0}, 2: {"b": None, "c": 0.5}}


def test_a_question_one_run_met_earlier_is_no_unit_but_the_batch_still_pairs():
    """Run A drew b as an extra at step 1; at step 2 both runs hold b regularly: only c is a unit, no refusal."""
    extra = make_tree("b", "t", 0, acc=1.0).model_copy(update={"group_id": "d1-0-b", "tree_id": "d1-0-b/0"})
    a = first_met_accuracy({1: [make_tree("a", "t", 0, acc=0.0), extra],
                            2: [make_tree("b", "t", 0, acc=1.0), make_tree("c", "t", 0, acc=1.0)]})
    b = first_met_accuracy({1: [make_tree("a", "t", 0, acc=0.0)],
                            2: [make_tree("b", "t", 0, acc=0.0), make_tree("c", "t", 0, acc=0.5)]})
    rows = paired_blocks([(a, b)], block=1)
    assert [(r.first, r.difference.n, r.difference.estimate) for r in rows] == [(1, 1, 0.0), (2, 1, 0.5), (1, 2, 0.25)]


def test_the_trainers_extra_draw_tag_is_recognised():
    assert is_extra_draw(f"{extra_draw_tag(1)}7-ew0-2h-00067") and is_extra_draw(f"{extra_draw_tag(12)}0-q")
    assert not is_extra_draw("s7-ew0-2h-00067") and not is_extra_draw("d-7-q") and not is_extra_draw("eg-q")
    with pytest.raises(ValueError, match="count from 1"):
        extra_draw_tag(0)


def test_blocks_pool_pairs_by_hand():
    a1 = {1: {"a": 1.0}, 2: {"b": 0.5}, 3: {"c": 1.0}}
    b1 = {1: {"a": 1.0}, 2: {"b": 0.0}, 3: {"c": 0.0}}
    a2 = {1: {"x": 0.0}, 2: {"y": 1.0}}
    b2 = {1: {"x": 0.5}, 2: {"y": 0.5}}
    rows = paired_blocks([(a1, b1), (a2, b2)], block=2)
    first, second, overall = rows
    assert (first.first, first.last, first.difference.n) == (1, 2, 4)
    assert first.difference.estimate == pytest.approx((0 + 0.5 - 0.5 + 0.5) / 4)
    assert (second.first, second.last, second.difference.n) == (3, 3, 1)
    assert second.difference.estimate == pytest.approx(1.0)
    assert (overall.first, overall.last, overall.difference.n) == (1, 3, 5)
    assert overall.a == pytest.approx(3.5 / 5) and overall.b == pytest.approx(2.0 / 5)
    text = render_fresh_pairs(rows, "scored", "null")
    assert "| 3-3 | 1 | 1.000 | 0.000 | +1.000 (one question) |" in text and "| 1-3 | 5 |" in text


def test_different_batches_are_not_paired():
    with pytest.raises(ValueError, match="step 1: the runs drew different questions"):
        paired_blocks([({1: {"a": 1.0}}, {1: {"b": 1.0}})], block=10)
    with pytest.raises(ValueError, match="share no training step"):
        paired_blocks([({1: {"a": 1.0}}, {2: {"a": 1.0}})], block=10)
    with pytest.raises(ValueError, match="block"):
        paired_blocks([({1: {"a": 1.0}}, {1: {"a": 1.0}})], block=0)


accuracies = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(accuracies, accuracies), min_size=2, max_size=12), st.integers(1, 5))
def test_swapping_the_sides_negates_every_difference(units, block):
    a = {i + 1: {f"q{i}": x} for i, (x, _) in enumerate(units)}
    b = {i + 1: {f"q{i}": y} for i, (_, y) in enumerate(units)}
    forward, backward = paired_blocks([(a, b)], block), paired_blocks([(b, a)], block)
    assert [r.difference.estimate for r in forward] == pytest.approx([-r.difference.estimate for r in backward])
    assert paired_blocks([(a, a)], block)[-1].difference.estimate == 0.0
    assert sum(r.difference.n for r in forward[: -1 if len(forward) > 1 else None]) == len(units)


def test_script_pairs_two_benchmark_folders(tmp_path: Path):
    folders = []
    for name, accs in (("scored", (1.0, 1.0)), ("null", (0.0, 1.0))):
        run = BenchLayout(tmp_path / name).run("deep_search-clean")
        (run / "rollouts").mkdir(parents=True)
        step = [make_tree("a", "t", k, acc=acc) for k, acc in enumerate(accs)]
        (run / "rollouts" / "step_000001.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in step))
        folders.append(str(tmp_path / name))
    out = subprocess.run([sys.executable, str(SCRIPT), "--pair", *folders], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| 1-1 | 1 | 1.000 | 0.500 | +0.500 (one question) |" in out.stdout
    missing = subprocess.run([sys.executable, str(SCRIPT), "--pair", folders[0], str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "no training rollouts" in missing.stderr
