"""Metrics go where `logger` says, in veRL's vocabulary; report reads local and veRL runs alike."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from matpo_graph.tracking.metric_names import canonical_name, canonical_row
from matpo_graph.tracking.progress import RunProgress
from matpo_graph.tracking.report import read_metrics, read_rows, write_report
from matpo_graph.tracking.sinks import Tracker, parse_loggers

LEGACY_ROW = {
    "step": 3, "loss": 0.25, "pg_loss": 0.2, "clip_fraction": 0.1, "ppo_kl": 0.01, "kl": 0.02, "entropy": 1.5,
    "grad_norm": 0.9, "reward_mean": 0.4, "accuracy": 0.5, "rollout_seconds": 70.0, "train_seconds": 90.0,
    "step_seconds": 170.0, "tokens/planner": 900.0, "credit/degenerate_groups": 1.0, "eval/greedy/accuracy": 0.75,
}


def event_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ---------------------------------------------------------------- vocabulary

def test_vocabulary_uses_verl_names_and_matpo_for_the_rest():
    row = canonical_row(LEGACY_ROW)
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm",
                "timing_s/gen", "timing_s/update_actor", "timing_s/step"):
        assert key in row, key
    assert row["actor/pg_loss"] == 0.2 and row["actor/ppo_kl"] == 0.01
    assert row["matpo/loss/total"] == 0.25 and row["matpo/loss/approx_kl_k3"] == 0.02
    assert row["matpo/reward/mean"] == 0.4 and row["matpo/tokens/planner"] == 900.0
    assert row["matpo/credit/degenerate_groups"] == 1.0 and row["matpo/eval/greedy/accuracy"] == 0.75
    assert all(k == "step" or "/" in k for k in row)


def test_vocabulary_keeps_canonical_names_and_prefers_them_over_aliases():
    assert canonical_name("critic/score/mean") == "critic/score/mean"
    assert canonical_name("timing_s/old_log_prob") == "timing_s/old_log_prob"
    assert canonical_row({"step": 1, "actor/pg_loss": 1.0, "pg_loss": 2.0}) == {"step": 1, "actor/pg_loss": 1.0}


def test_verl_batch_metrics_weigh_rows_and_tokens_as_verl(tmp_path):
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.tracking.metric_names import verl_batch_metrics

    trees = read_trees(Path(__file__).parents[1] / "fixtures" / "rollouts" / "known_step.jsonl")
    m = verl_batch_metrics(trees)
    rows = [(t.reward.total, traj) for t in trees if t.reward is not None for traj in t.trajectories]
    assert m["critic/score/mean"] == pytest.approx(sum(r for r, _ in rows) / len(rows))
    lengths = [len(tr.token_ids) - tr.prompt_length for _, tr in rows]
    assert m["response_length/mean"] == pytest.approx(sum(lengths) / len(lengths))
    assert m["response_length/max"] == max(lengths)
    weighted = [(tr.advantage, sum(tr.loss_mask)) for _, tr in rows if tr.advantage is not None]
    expected = sum(a * n for a, n in weighted) / sum(n for _, n in weighted)
    assert m["critic/advantages/mean"] == pytest.approx(expected)
    assert m["critic/advantages/mean"] != pytest.approx(sum(a for a, _ in weighted) / len(weighted))  # token-level


# ---------------------------------------------------------------- loggers

def test_parse_loggers_accepts_verl_spelling_and_refuses_unknown():
    assert parse_loggers("['console','file']") == ["console", "jsonl"]
    assert parse_loggers(["tensorboard", "console", "tensorboard"]) == ["tensorboard", "console"]
    with pytest.raises(ValueError, match="unknown logger 'mlflow'; choose from console, jsonl, tensorboard, wandb"):
        parse_loggers("console,mlflow")


def test_tracker_writes_jsonl_console_and_tensorboard_events(tmp_path):
    lines: list[str] = []
    tracker = Tracker(["console", "jsonl", "tensorboard"], run_dir=tmp_path, echo=lines.append)
    tracker.log({"step": 1, "actor/pg_loss": 0.5, "critic/score/mean": 0.1, "note": "text is skipped"})
    tracker.log({"step": 2, "actor/pg_loss": 0.25, "critic/score/mean": 0.3})
    tracker.close()
    assert lines[0] == "step:1 - actor/pg_loss:0.5 - critic/score/mean:0.1"
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and records[1]["critic/score/mean"] == 0.3
    scalars = event_scalars(tmp_path / "tensorboard")
    assert scalars["actor/pg_loss"] == [(1, 0.5), (2, 0.25)]
    assert [v for _, v in scalars["critic/score/mean"]] == pytest.approx([0.1, 0.3])


def test_tracker_without_jsonl_writes_no_metrics_file(tmp_path):
    tracker = Tracker(["tensorboard"], run_dir=tmp_path)
    tracker.log({"step": 1, "actor/grad_norm": 2.0})
    tracker.close()
    assert not (tmp_path / "metrics.jsonl").exists()
    assert event_scalars(tmp_path / "tensorboard")["actor/grad_norm"] == [(1, 2.0)]


def test_tracker_wandb_offline_without_network(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = Tracker(["wandb"], run_dir=tmp_path, experiment="offline-test", config={"lr": 1e-6})
    assert tracker._wandb.settings.mode == "offline"
    tracker.log({"step": 1, "actor/pg_loss": 0.5})
    tracker.close()
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline run folder"
    del wandb


def test_tracker_missing_package_is_an_error_only_when_asked_for(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    from matpo_graph.tracking.sinks import TrackingError

    with pytest.raises(TrackingError, match=r"logger 'wandb' needs the wandb package \(pip install wandb\)"):
        Tracker(["wandb"], run_dir=tmp_path)
    with pytest.warns(UserWarning, match="logger 'wandb' is off"):
        tracker = Tracker(["jsonl", "wandb"], run_dir=tmp_path, required=False)
    assert tracker.active == ["jsonl"]


def test_train_config_logger_option():
    from matpo_graph.rl.config import TrainConfig

    assert TrainConfig().logger == ["console", "jsonl", "tensorboard"]
    assert TrainConfig(logger="['console','wandb']").logger == ["console", "wandb"]
    assert TrainConfig().rollout_samples_per_step is None  # every tree of a step is saved by default
    with pytest.raises(ValueError, match="unknown logger"):
        TrainConfig(logger="neptune")


# ---------------------------------------------------------------- report: local and veRL runs

def test_report_reads_verl_file_logger_and_console_and_overlays_a_local_run(tmp_path, monkeypatch, capsys):
    pytest.importorskip("verl")
    from verl.utils.logger.aggregate_logger import LocalLogger
    from verl.utils.tracking import FileLogger

    verl_rows = [{"actor/pg_loss": 0.3 - 0.1 * s, "critic/score/mean": 0.2 * s, "timing_s/gen": 30.0,
                  "response_length/mean": 200.0 + s} for s in (1, 2)]
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "verl_run.jsonl"))
    file_logger = FileLogger("proj", "exp")
    console = LocalLogger(print_to_console=True)
    for s, data in enumerate(verl_rows, 1):
        file_logger.log(data, step=s)
        console.log(data, step=s)
    file_logger.finish()
    (tmp_path / "verl_console.log").write_text("(TaskRunner pid=1) some noise\n" + capsys.readouterr().out)

    from_file = read_metrics(tmp_path / "verl_run.jsonl")
    from_console = read_metrics(tmp_path / "verl_console.log")
    assert [r["critic/score/mean"] for r in from_file] == pytest.approx([0.2, 0.4])
    assert [r["actor/pg_loss"] for r in from_console] == pytest.approx([0.2, 0.1])
    assert from_file == from_console

    local = tmp_path / "local_run"
    local.mkdir()
    (local / "metrics.jsonl").write_text("\n".join(json.dumps(canonical_row(r)) for r in (
        {"step": 1, "pg_loss": 0.25, "critic/score/mean": 0.1, "rollout_seconds": 60.0},
        {"step": 2, "pg_loss": 0.15, "critic/score/mean": 0.3, "rollout_seconds": 50.0})))
    report = write_report(local, compare=[tmp_path / "verl_run.jsonl"], out_dir=tmp_path / "both")
    text = report.read_text()
    assert "## local_run" in text and "## verl_run" in text
    assert "| critic/score/mean | 0.2 (step 1) | 0.4 (step 2) |" in text
    assert "| timing_s/gen | 60 (step 1) | 50 (step 2) |" in text
    assert (tmp_path / "both" / "plots" / "reward.png").read_bytes()[:4] == b"\x89PNG"


def test_report_reads_old_runs_through_aliases(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps(LEGACY_ROW) + "\n")
    [row] = read_rows(tmp_path)
    assert row["actor/pg_clipfrac"] == 0.1 and row["timing_s/gen"] == 70.0


# ---------------------------------------------------------------- progress

class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_progress_plain_lines_show_counts_tokens_and_time_left():
    from rich.console import Console

    out = io.StringIO()
    clock = FakeClock()
    board = RunProgress(total_steps=2, console=Console(file=out, force_terminal=False, width=200), every_s=5.0,
                        clock=clock)
    board.begin("rollouts", total=8, unit="trees", tokens=0)
    clock.t = 10.0
    board.advance(2, tokens=500)  # 2 of 8 after 10 s: 30 s left, 50 tok/s
    clock.t = 12.0
    board.advance(1, tokens=600)  # within every_s of the last line: not printed
    clock.t = 40.0
    board.advance(5, tokens=2000)
    board.end()
    board.begin("update actor")
    clock.t = 100.0
    board.step_done(1, "reward 0.5")
    board.begin("update actor")  # the second update is estimated from the first (60 s)
    board.stop()
    text = out.getvalue()
    assert "RL steps 0/2: starting" in text
    assert "[step 1/2] rollouts: 2/8 trees, 50 tok/s, ~30s left" in text
    assert "3/8 trees" not in text
    assert "[step 1/2] rollouts done: 8/8 trees, 40s, 2000 tokens, 50 tok/s" in text
    assert "RL steps 1/2: reward 0.5  ~1:40 left" in text
    assert "[step 2/2] update actor: ~1:00 left" in text


def test_progress_of_a_resumed_run_counts_on_from_its_checkpoint():
    from rich.console import Console

    out = io.StringIO()
    clock = FakeClock()
    board = RunProgress(total_steps=20, first_step=10, console=Console(file=out, force_terminal=False, width=200),
                        every_s=5.0, clock=clock)
    board.begin("rollouts", total=8, unit="trees")
    clock.t = 10.0
    board.advance(8)
    board.end()
    clock.t = 60.0
    board.step_done(11, "reward 0.5")
    board.stop()
    text = out.getvalue()
    assert "RL steps 10/20: starting" in text
    assert "[step 11/20] rollouts done" in text
    assert "RL steps 11/20: reward 0.5  ~9:00 left" in text  # 9 steps left at the 60 s this launch's one step took
