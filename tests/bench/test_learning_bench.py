"""The learning benchmark's resume logic, tables and status, on fabricated folders (no model, no engine)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from matpo_graph.core.rollout import RewardBreakdown, RolloutTree, Trajectory
from matpo_graph.bench.learning_bench import (
    CONFIGS,
    BenchLayout,
    BenchSettings,
    EvalPoint,
    SettingsMismatch,
    append_log,
    config_state,
    edit_credit,
    plan_actions,
    read_eval_point,
    select_configs,
    share_start,
    summarise_eval,
    write_eval_point,
)
from matpo_graph.bench.learning_report import estimate_seconds_left, plot_curves, render_table, status_text

ROOT = Path(__file__).resolve().parents[2]
SMALL = BenchSettings(steps=20, eval_every=10, eval_questions=3, samples=2)
QUESTIONS = ["q1", "q2", "q3"]


def fake_warmup(layout: BenchLayout, variant: str, tokens: int = 33_000) -> None:
    folder = layout.warmup(variant)
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    (folder / "metrics_sft.jsonl").write_text(json.dumps({"kind": "step", "step": 1}) + "\n" + json.dumps(
        {"kind": "summary", "trained_tokens": tokens, "checkpoint": str(folder / "model"), "seconds": 400.0}) + "\n")


def fake_checkpoint(layout: BenchLayout, config: str, step: int) -> None:
    ck = layout.run(config) / "checkpoints" / f"step_{step:06d}"
    ck.mkdir(parents=True)
    (ck / "state.json").write_text(json.dumps({"step": step}))
    (ck / "model.safetensors").write_bytes(b"")


def fake_eval(layout: BenchLayout, config: str, step: int, greedy: list[float], sampled: list[float],
              questions: list[str] = QUESTIONS, samples: int = 2) -> None:
    write_eval_point(layout.eval_file(config, step), EvalPoint(
        config=config, step=step, questions=questions, greedy=dict(zip(questions, greedy)),
        sampled=dict(zip(questions, sampled)), samples=samples, seconds=60.0, trees=len(questions) * (1 + samples)))


def fake_metrics(layout: BenchLayout, config: str, steps: int) -> None:
    rows = [{"step": s, "matpo/reward/mean": 0.2, "matpo/group_variance_share": 0.5, "matpo/tool_error_rate": 0.1,
             "matpo/max_context/planner": 1000.0 + s, "timing_s/step": 150.0, "matpo/truncated": 1.0,
             "actor/pg_clipfrac": 0.0,
             # only steps that trained log an entropy: every third here (a mean over all steps would be 0.01)
             **({"actor/entropy": 0.03, "actor/pg_clipfrac": 0.002} if s % 3 == 0 else {})}
            for s in range(1, steps + 1)]
    path = layout.run(config) / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def states_of(layout, settings, configs):
    return {c.name: config_state(layout, settings, c) for c in configs}


def described(layout, settings, configs):
    return [a.describe() for a in plan_actions(settings, configs, states_of(layout, settings, configs))]


def test_eval_steps_include_the_warm_up_and_the_last_step():
    assert BenchSettings().eval_steps() == [0, 10, 20, 30]
    assert BenchSettings(steps=25, eval_every=10).eval_steps() == [0, 10, 20, 25]
    assert BenchSettings(steps=1, eval_every=1).eval_steps() == [0, 1]


def test_default_configurations_and_unknown_names():
    names = [c.name for c in select_configs(None)]
    assert names[:4] == ["deep_search-clean", "single_agent-clean", "deep_search-noisy", "single_agent-noisy"]
    assert {"deep_search_no_summary-clean", "deep_search_no_recap-clean"} <= set(names)
    assert len(select_configs(["all"])) == len(CONFIGS) == 8
    assert CONFIGS["single_agent-noisy"].noise == "paper" and CONFIGS["deep_search-clean"].noise is None
    with pytest.raises(ValueError, match="known"):
        select_configs(["deep_serch-clean"])
    for c in CONFIGS.values():
        assert (ROOT / c.graph_file).is_file()


def test_fresh_folder_plans_warm_ups_then_rounds(tmp_path):
    layout = BenchLayout(tmp_path)
    configs = select_configs(["deep_search-clean", "single_agent-clean", "deep_search-noisy"])
    assert described(layout, SMALL, configs) == [
        "warm-up of deep_search", "warm-up of single_agent",
        "evaluate deep_search-clean at step 0", "evaluate single_agent-clean at step 0",
        "evaluate deep_search-noisy at step 0",
        "train deep_search-clean to step 10", "evaluate deep_search-clean at step 10",
        "train single_agent-clean to step 10", "evaluate single_agent-clean at step 10",
        "train deep_search-noisy to step 10", "evaluate deep_search-noisy at step 10",
        "train deep_search-clean to step 20", "evaluate deep_search-clean at step 20",
        "train single_agent-clean to step 20", "evaluate single_agent-clean at step 20",
        "train deep_search-noisy to step 20", "evaluate deep_search-noisy at step 20",
    ]


def test_finished_pieces_are_found_from_files_and_never_planned_again(tmp_path):
    layout = BenchLayout(tmp_path)
    configs = select_configs(["deep_search-clean", "single_agent-clean"])
    fake_warmup(layout, "deep_search")
    fake_eval(layout, "deep_search-clean", 0, [0, 1, 0], [0.5, 0.5, 0])
    fake_checkpoint(layout, "deep_search-clean", 13)  # interrupted while training towards step 20
    fake_eval(layout, "deep_search-clean", 10, [1, 1, 0], [1, 0.5, 0])
    state = config_state(layout, SMALL, configs[0])
    assert state.warmed_up and state.trained == 13 and sorted(state.evals) == [0, 10] and state.missing_evals == [20]
    assert described(layout, SMALL, configs) == [
        "warm-up of single_agent", "evaluate single_agent-clean at step 0",
        "train single_agent-clean to step 10", "evaluate single_agent-clean at step 10",
        "train deep_search-clean to step 20", "evaluate deep_search-clean at step 20",  # resumes from step 13
        "train single_agent-clean to step 20", "evaluate single_agent-clean at step 20",
    ]
    fake_checkpoint(layout, "deep_search-clean", 20)
    fake_eval(layout, "deep_search-clean", 20, [1, 1, 1], [1, 1, 0.5])
    assert config_state(layout, SMALL, configs[0]).finished
    assert not any("deep_search" in a and "single" not in a for a in described(layout, SMALL, configs)
                   if not a.startswith("warm-up of single"))


def test_an_evaluation_from_other_settings_or_unreadable_is_redone(tmp_path):
    layout = BenchLayout(tmp_path)
    [config] = select_configs(["deep_search-clean"])
    fake_warmup(layout, "deep_search")
    fake_eval(layout, config.name, 0, [0, 1], [0, 1], questions=["q1", "q2"])  # 2 questions, not 3
    layout.eval_file(config.name, 10).write_text("{not json")
    state = config_state(layout, SMALL, config)
    assert state.evals == {} and state.missing_evals == [0, 10, 20]
    assert read_eval_point(layout.eval_file(config.name, 10)) is None


def test_an_evaluation_whose_checkpoint_is_gone_is_reported_not_planned(tmp_path):
    layout = BenchLayout(tmp_path)
    [config] = select_configs(["deep_search-clean"])
    fake_warmup(layout, "deep_search")
    fake_eval(layout, config.name, 0, [0, 0, 0], [0, 0, 0])
    fake_checkpoint(layout, config.name, 20)  # trained past step 10 without evaluating it
    state = config_state(layout, SMALL, config)
    assert state.lost_evals == [10]
    assert described(layout, SMALL, [config]) == ["evaluate deep_search-clean at step 20"]
    assert "cannot be done (checkpoint gone) [10]" in status_text(layout, SMALL, [config], {config.name: state})


def test_settings_that_would_mix_incomparable_pieces_are_refused():
    saved = BenchSettings().to_json()
    BenchSettings(steps=60, eval_every=20).check_against(saved)  # growing the run is fine
    with pytest.raises(SettingsMismatch, match="eval_questions"):
        BenchSettings(eval_questions=24).check_against(saved)
    with pytest.raises(SettingsMismatch, match="warmup_tokens"):
        BenchSettings(warmup_tokens=1000).check_against(saved)
    with pytest.raises(SettingsMismatch, match="lr"):  # another learning rate is another curve: another folder
        BenchSettings(lr=1e-5).check_against(saved)
    before_lr = {k: v for k, v in saved.items() if k != "lr"}  # a folder from before --lr used the default
    BenchSettings().check_against(before_lr)
    with pytest.raises(SettingsMismatch, match="lr: folder None, now 1e-05"):
        BenchSettings(lr=1e-5).check_against(before_lr)
    with pytest.raises(SettingsMismatch, match="temperature: folder None, now 1.0"):  # as is another rollout temperature
        BenchSettings(temperature=1.0).check_against(before_lr)


def tree(qid: str, tag: str, k: int, acc: float, *, truncated: str | None = None) -> RolloutTree:
    root = Trajectory(traj_id="0", role="agent", depth=0, token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0, -1, -1],
                      prompt_length=1)
    return RolloutTree(tree_id=f"{tag}0-{qid}/{k}", group_id=f"{tag}0-{qid}", question="?", trajectories=[root],
                       reward=RewardBreakdown(total=0.9 * acc, accuracy=acc, format=0.0, answer="x" if acc else None),
                       truncated=truncated, metadata={"question_id": qid})


def test_summarise_eval_keeps_per_question_accuracies():
    trees = [tree("a", "eg", 0, 1.0), tree("b", "eg", 0, 0.0)]
    trees += [tree("a", "es", k, acc) for k, acc in enumerate([1.0, 0.0])]
    trees += [tree("b", "es", k, acc, truncated="tree_tokens" if k else None) for k, acc in enumerate([0.0, 0.0])]
    point = summarise_eval(trees, config="c", step=10, samples=2, seconds=5.0)
    assert point.questions == ["a", "b"]
    assert point.greedy == {"a": 1.0, "b": 0.0} and point.sampled == {"a": 0.5, "b": 0.0}
    assert point.trees == 6 and point.truncated == 1 and point.answered == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="2 samples"):
        summarise_eval(trees[:-1], config="c", step=10, samples=2, seconds=5.0)


def test_table_and_plot_render_partial_results_labelled(tmp_path):
    layout = BenchLayout(tmp_path)
    configs = select_configs(["deep_search-clean", "single_agent-clean"])
    fake_warmup(layout, "deep_search", tokens=32_990)
    fake_eval(layout, "deep_search-clean", 0, [0, 1, 0], [0.0, 0.5, 0.0])
    fake_eval(layout, "deep_search-clean", 10, [1, 1, 0], [0.5, 1.0, 0.0])
    fake_checkpoint(layout, "deep_search-clean", 10)
    fake_metrics(layout, "deep_search-clean", 10)
    states = states_of(layout, SMALL, configs)
    text = render_table(layout, SMALL, configs, states)
    assert "PARTIAL" in text
    row = next(line for line in text.splitlines() if line.startswith("| MATPO (deep_search), clean"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "32,990"
    assert cells[2] == "0.167 ± 0.167" and cells[4] == "10 (partial, of 20)"
    assert cells[5] == "0.500 ± 0.289"
    # paired: differences 0.5, 0.5, 0 -> mean 0.333, se 0.167, t(0.975, 2) = 4.303
    assert cells[7].startswith("+0.333 [-0.384, +1.050]")
    assert cells[9:] == ["0.500", "0.100", "1,010", "150", "10", "0.0300", "0.0020"]
    other = next(line for line in text.splitlines() if line.startswith("| single agent (GRPO), clean"))
    assert other.count(" - ") >= 8  # nothing yet, still a row
    png = plot_curves(tmp_path / "curve.png", SMALL, configs, states)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_complete_results_are_not_labelled_partial(tmp_path):
    layout = BenchLayout(tmp_path)
    settings = BenchSettings(steps=10, eval_every=10, eval_questions=3, samples=2)
    [config] = select_configs(["deep_search-clean"])
    fake_warmup(layout, "deep_search")
    fake_eval(layout, config.name, 0, [0, 1, 0], [0, 0.5, 0])
    fake_eval(layout, config.name, 10, [0, 1, 0], [0, 0.5, 0])
    text = render_table(layout, settings, [config], states_of(layout, settings, [config]))
    assert "PARTIAL" not in text and "| 10 |" in text and "+0.000" in text


def test_time_left_uses_this_folders_measured_rates(tmp_path):
    layout = BenchLayout(tmp_path)
    [config] = select_configs(["deep_search-clean"])
    fake_warmup(layout, "deep_search")
    fake_eval(layout, config.name, 0, [0, 0, 0], [0, 0, 0])
    append_log(layout, {"action": "train", "config": config.name, "from": 0, "to": 2, "seconds": 400.0})
    append_log(layout, {"action": "eval", "config": config.name, "step": 0, "trees": 9, "seconds": 90.0})
    states = states_of(layout, SMALL, [config])
    left, guessed = estimate_seconds_left(layout, SMALL, [config], states)
    # 20 steps x 200 s + 2 evaluations x 9 trees x 10 s; the warm-up is done, so its rate is not needed
    assert left == pytest.approx(20 * 200 + 2 * 9 * 10)
    assert guessed == ["warmup"]


def _script():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "scripts" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_status_and_dry_run_on_a_fabricated_folder(tmp_path, capsys):
    module = _script()
    layout = BenchLayout(tmp_path)
    fake_warmup(layout, "deep_search")
    common = ["--out", str(tmp_path), "--configs", "deep_search-clean", "--steps", "20", "--eval-questions", "3",
              "--samples", "2"]
    assert module.main([*common, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "warm-up done" in out and "todo: evaluate deep_search-clean at step 0" in out and "time left" in out
    layout.settings_file.write_text(json.dumps(BenchSettings(eval_questions=5).to_json()))
    assert module.main([*common, "--status"]) == 2
    assert "eval_questions" in capsys.readouterr().err


def test_update_settings_and_warmup_variety_are_fixed_for_a_folder_and_survive_json():
    strong = BenchSettings(train_settings=("optimizer_steps_per_rl_step=2", "ppo_epochs=2"), warmup_variety=0.5)
    saved = json.loads(json.dumps(strong.to_json()))  # as bench.json keeps it: the tuple comes back a list
    strong.check_against(saved)
    with pytest.raises(SettingsMismatch, match="train_settings"):
        BenchSettings(warmup_variety=0.5).check_against(saved)
    with pytest.raises(SettingsMismatch, match="warmup_variety"):
        BenchSettings(train_settings=strong.train_settings).check_against(saved)
    older = {k: v for k, v in BenchSettings().to_json().items() if k not in ("train_settings", "warmup_variety")}
    BenchSettings().check_against(older)  # a folder from before these settings used the defaults


def test_credit_edits_reach_nested_blocks_and_refuse_what_the_spec_refuses():
    from matpo_graph.core.spec import CreditSpec

    base = CreditSpec()
    edited = edit_credit(base, ["kl.coef=0.02", "normalization=mean_only", "group_size=6"])
    assert (edited.kl.coef, edited.normalization, edited.group_size) == (0.02, "mean_only", 6)
    assert edited.kl.estimator == base.kl.estimator and base.kl.coef == 0.0  # the rest kept, the original untouched
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        edit_credit(base, ["kl.coef"])
    with pytest.raises(ValueError, match="no setting 'cof'.*coef"):
        edit_credit(base, ["kl.cof=0.1"])
    with pytest.raises(ValueError, match="no block 'kll'"):
        edit_credit(base, ["kll.coef=0.1"])
    with pytest.raises(ValueError, match="normalization=median"):
        edit_credit(base, ["normalization=median"])
    with pytest.raises(ValueError, match="kl.coef=-1"):
        edit_credit(base, ["kl.coef=-1"])


def test_credit_settings_are_fixed_for_a_folder_but_not_for_its_start(tmp_path):
    anchored = BenchSettings(steps=20, eval_every=10, eval_questions=3, samples=2, credit_settings=("kl.coef=0.02",))
    saved = json.loads(json.dumps(anchored.to_json()))
    anchored.check_against(saved)
    with pytest.raises(SettingsMismatch, match="credit_settings"):
        SMALL.check_against(saved)
    SMALL.check_against({k: v for k, v in SMALL.to_json().items() if k != "credit_settings"})  # older folders
    first = BenchLayout(tmp_path / "plain")
    first.root.mkdir()
    first.settings_file.write_text(json.dumps(SMALL.to_json()))
    fake_warmup(first, "deep_search")
    fake_eval(first, "deep_search-clean", 0, [1, 0, 0], [0.5, 0.5, 0])
    # the warm-up and step-0 evaluation never see the credit block, so a credit lever pairs against them
    assert share_start(BenchLayout(tmp_path / "kl"), first, anchored, select_configs(["deep_search-clean"])) == [
        "warm-up deep_search", "step-0 evaluation deep_search-clean"]
    second, configs = BenchLayout(tmp_path / "kl"), select_configs(["deep_search-clean"])
    assert "credit kl.coef=0.02;" in render_table(second, anchored, configs, states_of(second, anchored, configs))


def test_the_script_trains_on_an_edited_copy_and_warms_up_on_the_plain_one(tmp_path):
    bench = _script()
    layout = BenchLayout(tmp_path)
    config = select_configs(["deep_search-clean"])[0]
    settings = BenchSettings(credit_settings=("kl.coef=0.02", "normalization=mean_only"))
    from matpo_graph.core.loader import load_graph

    plain = load_graph(bench._write_graph(layout, settings, config))
    trained = load_graph(bench._write_graph(layout, settings, config, rl=True))
    assert (plain.credit.kl.coef, plain.credit.normalization) == (0.0, "std")
    assert (trained.credit.kl.coef, trained.credit.normalization) == (0.02, "mean_only")
    assert trained.limits == plain.limits and trained.roles == plain.roles
    assert bench._write_graph(layout, BenchSettings(), config, rl=True) == layout.graph("deep_search")


def test_a_frozen_role_is_left_out_of_the_rl_copy_only_and_a_typo_fails_first(tmp_path, capsys):
    bench = _script()
    layout = BenchLayout(tmp_path)
    config = select_configs(["deep_search-clean"])[0]
    settings = BenchSettings(frozen_roles=("planner",))
    from matpo_graph.compilers.local import load_program

    plain = bench._write_graph(layout, settings, config)
    trained = bench._write_graph(layout, settings, config, rl=True)
    assert plain != trained
    assert set(load_program(plain)[1].trained_roles) == {"browser", "planner"}
    assert load_program(trained)[1].trained_roles == ["browser"]
    with pytest.raises(SettingsMismatch, match="frozen_roles"):
        BenchSettings().check_against(json.loads(json.dumps(settings.to_json())))
    BenchSettings().check_against({k: v for k, v in BenchSettings().to_json().items() if k != "frozen_roles"})
    assert bench.main(["--out", str(tmp_path / "typo"), "--configs", "deep_search-clean", "--frozen-role", "plannr",
                       "--dry-run"]) == 2
    assert "plannr" in capsys.readouterr().err and not (tmp_path / "typo").exists()


def test_a_strategy_named_as_code_on_the_command_line_is_trusted_for_its_runs_only(tmp_path):
    bench = _script()
    ref = "matpo_graph.bench.null_credit:shuffled_broadcast"
    assert bench._trusted_strategy(BenchSettings(credit_settings=("kl.coef=0.1", f"strategy={ref}"))) == [
        "--trust-module", ref]
    assert bench._trusted_strategy(BenchSettings(credit_settings=("strategy=root_only",))) == []
    assert bench._trusted_strategy(BenchSettings()) == []
    layout, config = BenchLayout(tmp_path), select_configs(["deep_search-clean"])[0]
    from matpo_graph.core.loader import load_graph
    from matpo_graph.core.trust import TrustPolicy

    copy = bench._write_graph(layout, BenchSettings(credit_settings=(f"strategy={ref}",)), config, rl=True)
    assert load_graph(copy, trust=TrustPolicy(trusted_code=(ref,))).credit.strategy == ref


def test_heldout_questions_from_the_test_split_and_their_hops():
    default = BenchSettings()
    assert not default.custom_heldout  # the trainer's own dev questions: no file is handed to eval
    final = BenchSettings(heldout_split="test", heldout_max_hops=4, eval_questions=120)
    questions = final.heldout_questions()
    assert final.custom_heldout and len(questions) == 120 == len({q.id for q in questions})
    dev = {q.id for q in BenchSettings(heldout_split="dev", heldout_max_hops=4, eval_questions=120).heldout_questions()}
    assert dev.isdisjoint(q.id for q in questions)  # what settings were chosen on is not what is reported
    short = BenchSettings(heldout_split="test", eval_questions=52).heldout_questions()
    assert all(int(q.metadata["hops"]) <= 2 for q in short)
    with pytest.raises(ValueError, match="fewer than eval_questions"):
        BenchSettings(heldout_split="test", eval_questions=96).heldout_questions()  # 52 of 1-2 hops
    with pytest.raises(ValueError, match="dev or test"):
        BenchSettings(heldout_split="train")


def test_a_second_rl_seed_shares_the_warm_up_and_step_0_evaluation(tmp_path):
    first, second = BenchLayout(tmp_path / "seed0"), BenchLayout(tmp_path / "seed1")
    config = select_configs(["deep_search-clean"])
    first.root.mkdir()
    first.settings_file.write_text(json.dumps(SMALL.to_json()))
    fake_warmup(first, "deep_search")
    fake_eval(first, "deep_search-clean", 0, [1, 0, 0], [0.5, 0.5, 0])
    reseeded = BenchSettings(steps=20, eval_every=10, eval_questions=3, samples=2, rl_seed=1)
    assert reseeded.train_seed == 1 and SMALL.train_seed == 0
    shared = share_start(second, first, reseeded, config)
    assert shared == ["warm-up deep_search", "step-0 evaluation deep_search-clean"]
    assert second.warmup("deep_search").resolve() == first.warmup("deep_search").resolve()
    assert described(second, reseeded, config)[0] == "train deep_search-clean to step 10"
    assert share_start(second, first, reseeded, config) == []  # nothing twice
    with pytest.raises(SettingsMismatch, match="samples"):
        share_start(BenchLayout(tmp_path / "other"), first, BenchSettings(eval_questions=3, samples=4), config)
