"""The flip report sorts evaluation trees into outcomes and pairs greedy answers by question."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from matpo_graph.bench.flips import compare_evaluations, render_flips, tree_shape
from matpo_graph.core.rollout import CallRecord, RewardBreakdown, RolloutTree, Trajectory, Turn

ROOT = Path(__file__).resolve().parents[2]


def make_tree(qid: str, tag: str, k: int, *, acc: float, answer: str | None = "x", truncated: str | None = None,
              delegations: int = 1, tool_error: bool = False, hops: int = 2) -> RolloutTree:
    root_calls = [CallRecord(name="browse", kind="child", child_id=f"0.{i}") for i in range(delegations)]
    root = Trajectory(traj_id="0", role="planner", depth=0,
                      turns=[Turn(index=0, text="...", num_tokens=20, calls=root_calls),
                             Turn(index=1, text="answer", num_tokens=5)])
    children = [Trajectory(traj_id=f"0.{i}", parent_id="0", role="browser", depth=1,
                           turns=[Turn(index=0, text="search", num_tokens=10,
                                       calls=[CallRecord(name="search", error="HTTP 500" if tool_error else None),
                                              CallRecord(name="nonsense", kind="invalid", valid=False)])])
                for i in range(delegations)]
    return RolloutTree(tree_id=f"{tag}0-{qid}/{k}", group_id=f"{tag}0-{qid}", question="?",
                       trajectories=[root, *children], truncated=truncated,
                       metadata={"question_id": qid, "hops": hops},
                       reward=RewardBreakdown(total=acc, accuracy=acc, format=0.0, answer=answer))


def test_tree_shape_outcomes_and_counts():
    assert tree_shape(make_tree("a", "eg", 0, acc=1.0)).outcome == "right"
    assert tree_shape(make_tree("a", "eg", 0, acc=0.0)).outcome == "wrong answer"
    assert tree_shape(make_tree("a", "eg", 0, acc=0.0, answer=None)).outcome == "no answer"
    # a tree stopped by its budget counts as cut off even when its (forced) answer happens to match
    assert tree_shape(make_tree("a", "eg", 0, acc=1.0, truncated="tree_tokens")).outcome == "cut off"
    s = tree_shape(make_tree("a", "es", 3, acc=0.0, delegations=2, tool_error=True))
    assert not s.greedy and s.question == "a" and s.hops == 2 and s.answer == "x"
    assert (s.delegations, s.root_turns, s.generated_tokens) == (2, 2, 45)
    assert (s.tool_calls, s.tool_errors, s.invalid_calls) == (2, 2, 2)
    with pytest.raises(ValueError, match="no reward"):
        tree_shape(make_tree("a", "eg", 0, acc=1.0).model_copy(update={"reward": None}))


def test_compare_pairs_greedy_answers_by_question():
    before = [make_tree("a", "eg", 0, acc=1.0), make_tree("b", "eg", 0, acc=1.0),
              make_tree("c", "eg", 0, acc=0.0, answer=None), make_tree("a", "es", 0, acc=0.0)]
    # order differs and one question only exists after: it is not paired
    after = [make_tree("c", "eg", 0, acc=1.0, delegations=3), make_tree("b", "eg", 0, acc=0.0, delegations=0),
             make_tree("a", "eg", 0, acc=1.0), make_tree("d", "eg", 0, acc=1.0),
             make_tree("a", "es", 0, acc=0.0, answer=None)]
    report = compare_evaluations(before, after, before_step=0, after_step=10)
    assert report.greedy_transitions == {("right", "right"): 1, ("right", "wrong answer"): 1,
                                         ("no answer", "right"): 1}
    assert [q for q, _, _ in report.lost] == ["b"] and [q for q, _, _ in report.won] == ["c"]
    assert report.lost[0][2].delegations == 0
    assert report.behaviour["greedy"]["delegations"] == (1.0, 1.25)
    assert report.sampled_outcomes["wrong answer"] == (1, 0) and report.sampled_outcomes["no answer"] == (0, 1)
    text = render_flips(report)
    assert "| right | 1 | 1 | 0 | 0 |" in text and "### Lost greedy answers (1)" in text
    assert "| b | 2 | right; 'x'; 1 delegations" in text
    with pytest.raises(ValueError, match="two greedy trees"):
        compare_evaluations(before + [make_tree("a", "eg", 0, acc=0.0)], after, before_step=0, after_step=10)


def test_by_hops_splits_accuracy_and_delegations_by_chain_length():
    # one-hop answers lost to a second delegation while two-hop ones are won: overall greedy accuracy stays 0.5
    before = [make_tree("a", "eg", 0, acc=1.0, hops=1), make_tree("b", "eg", 0, acc=0.0, hops=2),
              make_tree("a", "es", 0, acc=1.0, hops=1), make_tree("a", "es", 1, acc=0.0, hops=1)]
    after = [make_tree("a", "eg", 0, acc=0.0, hops=1, delegations=2), make_tree("b", "eg", 0, acc=1.0, hops=2, delegations=2),
             make_tree("a", "es", 0, acc=1.0, hops=1)]
    rows = {(r.hops, r.greedy): r for r in compare_evaluations(before, after, before_step=0, after_step=5).by_hops}
    assert list(rows) == [(1, True), (2, True), (1, False)]
    assert rows[1, True].accuracy == (1.0, 0.0) and rows[1, True].delegations == (1.0, 2.0)
    assert rows[2, True].accuracy == (0.0, 1.0) and rows[2, True].trees == (1, 1)
    assert rows[1, False].trees == (2, 1) and rows[1, False].accuracy == (0.5, 1.0)
    text = render_flips(compare_evaluations(before, after, before_step=0, after_step=5))
    assert "| 1 | greedy | 1 | 1.000 -> 0.000 | 1.00 -> 2.00 |" in text
    assert "| 1 | sampled | 2 -> 1 | 0.500 -> 1.000 |" in text


def test_script_reads_a_benchmark_folder(tmp_path):
    evals = tmp_path / "runs" / "deep_search-clean" / "evals"
    evals.mkdir(parents=True)
    for step, acc in ((0, 1.0), (10, 0.0)):
        with gzip.open(evals / f"step_{step:06d}.trees.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.write(make_tree("q1", "eg", 0, acc=acc).model_dump_json() + "\n")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_flips.py"), str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "### Lost greedy answers (1)" in run.stdout
    assert (evals / "flips_0_10.md").read_text() == run.stdout
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_flips.py"), str(tmp_path), "--steps", "0", "5"],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "no evaluation trees for step 5" in missing.stderr


def test_script_compares_two_configurations_of_one_folder_with_a_paired_accuracy(tmp_path):
    import json

    answers = {"single_agent-clean": {"q1": 1.0, "q2": 1.0, "q3": 0.0},
               "single_agent-noisy": {"q1": 0.0, "q2": 1.0, "q3": 0.0}}
    for config, acc in answers.items():
        evals = tmp_path / "runs" / config / "evals"
        evals.mkdir(parents=True)
        with gzip.open(evals / "step_000000.trees.jsonl.gz", "wt", encoding="utf-8") as fh:
            for q, a in acc.items():
                fh.write(make_tree(q, "eg", 0, acc=a).model_dump_json() + "\n")
        sampled = {q: a / 2 for q, a in acc.items()}
        (evals / "step_000000.json").write_text(json.dumps(
            {"config": config, "step": 0, "questions": list(acc), "greedy": acc, "sampled": sampled, "samples": 2}))
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_flips.py"), str(tmp_path),
                          "--config", "single_agent-clean", "--against", "single_agent-noisy"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    # second minus first, paired: differences (-1, 0, 0) -> mean -1/3; the interval is wide but finite
    assert "| greedy | 3 | 0.667 | 0.333 | -0.333 [" in run.stdout
    assert "| sampled | 3 | 0.333 | 0.167 | -0.167 [" in run.stdout
    assert "### Greedy answers, single_agent-clean step 0 -> single_agent-noisy step 0" in run.stdout
    assert "### Lost greedy answers (1)" in run.stdout and "| q1 | 2 |" in run.stdout
    written = tmp_path / "runs" / "single_agent-clean" / "evals" / "flips_0_single_agent-noisy_0.md"
    assert written.read_text() == run.stdout
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_flips.py"), str(tmp_path),
                              "--config", "single_agent-clean", "--against", "deep_search-clean"],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "no evaluation trees for step 0" in missing.stderr


def test_census_counts_each_questions_lost_and_won_runs_and_the_top_share():
    from matpo_graph.bench.flip_census import flip_census, render_flip_census

    start = [make_tree("a", "eg", 0, acc=1.0, hops=1), make_tree("b", "eg", 0, acc=0.0), make_tree("c", "eg", 0, acc=1.0)]
    runs = {
        "r1": [make_tree("a", "eg", 0, acc=0.0, hops=1), make_tree("b", "eg", 0, acc=1.0), make_tree("c", "eg", 0, acc=1.0)],
        "r2": [make_tree("a", "eg", 0, acc=0.0, hops=1), make_tree("b", "eg", 0, acc=0.0), make_tree("c", "eg", 0, acc=1.0)],
        "r3": start,
    }
    reports = {k: compare_evaluations(start, v, before_step=0, after_step=10) for k, v in runs.items()}
    census = flip_census(reports)
    assert (census.runs, census.questions, census.flips) == (3, 3, 3)
    assert [(r.question, r.hops, r.lost, r.won) for r in census.rows] == [("a", 1, 2, 0), ("b", 2, 0, 1)]
    assert census.share_of_top(1) == pytest.approx(2 / 3) and census.share_of_top(5) == 1.0
    text = render_flip_census(census, top=1)
    assert "3 runs, 3 questions each: 3 greedy answers changed (1.0 a run), on 2 distinct questions" in text
    assert "| a | 1 | 2 | 0 |" in text and "67%" in text
    with pytest.raises(ValueError, match="at least one run"):
        flip_census({})


def test_census_script_on_fabricated_folders(tmp_path, capsys):
    import importlib.util

    from matpo_graph.bench.learning_bench import BenchLayout

    def write(folder: Path, step: int, trees: list[RolloutTree]) -> None:
        path = BenchLayout(folder).eval_trees("deep_search-clean", step)
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.writelines(t.model_dump_json() + "\n" for t in trees)

    for name, acc in (("s0", 0.0), ("s1", 1.0)):
        write(tmp_path / name, 0, [make_tree("a", "eg", 0, acc=1.0), make_tree("b", "eg", 0, acc=0.0)])
        write(tmp_path / name, 10, [make_tree("a", "eg", 0, acc=acc), make_tree("b", "eg", 0, acc=0.0)])
    write(tmp_path / "bare", 0, [make_tree("a", "eg", 0, acc=1.0)])
    spec = importlib.util.spec_from_file_location("bench_flip_census", ROOT / "scripts" / "bench_flip_census.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(tmp_path / "s0"), str(tmp_path / "s1")]) == 0
    assert "| a | 2 | 1 | 0 |" in capsys.readouterr().out
    assert module.main([str(tmp_path / "s0"), str(tmp_path / "bare")]) == 2
    assert "steps [0]" in capsys.readouterr().err
