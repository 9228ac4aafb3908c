import json
from pathlib import Path

import pytest

from matpo_graph.tracking.report import read_metrics, write_report


def test_report_writes_plots_and_summary(tmp_path: Path) -> None:
    rows = [
        {"step": s, "reward_mean": 0.1 * s, "accuracy": 0.05 * s, "format_score": 0.2, "loss": 0.01, "grad_norm": 1.0,
         "tokens/planner": 100 + s, "max_context/planner": 300, "tool_error_rate": 0.0}
        for s in (1, 2, 3)
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = write_report(tmp_path)
    text = out.read_text()
    assert "| matpo/reward/mean | 0.1 (step 1) | 0.3 (step 3) |" in text  # old names read through aliases
    for name in ("reward.png", "loss.png", "tokens_per_role.png", "context_per_role.png"):
        png = tmp_path / "plots" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_read_metrics_keeps_the_last_record_of_a_repeated_step(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 1}\n{"step": 1, "loss": 2}\n{"step": 2, "loss": 3}\n')
    assert [r["matpo/loss/total"] for r in read_metrics(tmp_path)] == [2, 3]


def test_report_without_metrics_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no metrics"):
        write_report(tmp_path)


def test_an_evaluation_record_joins_its_step_and_a_redone_step_starts_afresh(tmp_path: Path) -> None:
    rows = [
        {"step": 1, "reward_mean": 0.1, "loss": 0.5},
        {"step": 2, "reward_mean": 0.2, "loss": 0.4},
        {"step": 2, "eval/greedy/accuracy": 0.5},
        {"step": 2, "reward_mean": 0.3, "loss": 0.3},  # step 2 redone after a resume: the old eval is stale
        {"step": 2, "eval/greedy/accuracy": 0.75},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    merged = read_metrics(tmp_path)
    assert merged[-1] == {"step": 2, "matpo/reward/mean": 0.3, "matpo/loss/total": 0.3, "matpo/eval/greedy/accuracy": 0.75}
    text = write_report(tmp_path).read_text()
    assert "| matpo/reward/mean | 0.1 (step 1) | 0.3 (step 2) |" in text
    assert "| matpo/eval/greedy/accuracy | 0.75 (step 2) | 0.75 (step 2) |" in text


def test_report_pairs_the_starting_model_with_the_last_evaluation(tmp_path):
    """Per-question records of step 0 and the last evaluation give one paired row per answer kind, and the
    training accuracy gets a running mean."""
    from matpo_graph.tracking.eval_records import compare_heldout, read_eval_records
    from matpo_graph.tracking.report import write_report

    run = tmp_path / "run"
    (run / "evals").mkdir(parents=True)
    before = {"q1": {"greedy": 0.0, "sampled": [0.0, 1.0]}, "q2": {"greedy": 1.0, "sampled": [1.0, 1.0]},
              "q3": {"greedy": 0.0, "sampled": [0.0, 0.0]}}
    after = {"q1": {"greedy": 1.0, "sampled": [1.0, 1.0]}, "q2": {"greedy": 1.0, "sampled": [1.0, 0.0]},
             "q3": {"greedy": 0.0, "sampled": [0.0, 1.0]}}
    for step, questions in ((0, before), (4, after)):
        (run / "evals" / f"step_{step:06d}.json").write_text(json.dumps({"step": step, "questions": questions}))
    rows = [{"step": s, "matpo/reward/accuracy": a, "timing_s/step": 1.0} for s, a in ((1, 0.25), (2, 0.75))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    greedy = compare_heldout(read_eval_records(run), kind="greedy")
    assert greedy is not None and (greedy.before_step, greedy.after_step, greedy.questions) == (0, 4, 3)
    assert greedy.difference.estimate == pytest.approx(1 / 3) and (greedy.won, greedy.lost) == (1, 0)
    text = write_report(run).read_text()
    assert "## Held-out accuracy: the starting model vs the last evaluation" in text
    assert "| greedy | 3 | 0.333 [" in text and "| +0.333 [" in text
    assert "| 2 | 0.750 | 0.500 |" in text  # step 2: accuracy and the running mean of 0.25 and 0.75
