"""A real local training step with a scripted policy: metrics in veRL's names in every sink, every tree saved,
progress from the start. (The scripted replies are all alike, so the step has no learning signal and the
update takes its zero-gradient path: the test stays fast without the vLLM engine.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _always_paris(folder: Path, *, questions: int) -> tuple[Path, Path]:
    """A scripted policy that always answers Paris, and `questions` QA items whose answer is Paris."""
    script = folder / "script.json"
    script.write_text(json.dumps({"rules": [], "default": "I know this one. \\boxed{Paris}"}))
    data = folder / "qa.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Capital number {i}?", "answer": "Paris"}) + "\n"
                            for i in range(questions)))
    return script, data


@pytest.fixture(scope="module")
def scripted_run(module_tmp):
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    from matpo_graph.compilers.local import load_program
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.trainer import LocalTrainer

    tmp = module_tmp
    script, data = _always_paris(tmp, questions=3)
    program, plan = load_program(ROOT / "graphs" / "single_agent.yaml")
    cfg = TrainConfig(policy=f"scripted:{script}", data=str(data), eval_data=str(data), steps=1, warmstart="none",
                      questions_per_step=2, group_size=2, eval_questions=1, time_budget_minutes=0, verify_sync=False,
                      train_layers=1)
    run = tmp / "run"
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = LocalTrainer(program, plan, cfg, run).run()
    return run, result, out.getvalue()


def test_scripted_run_logs_verl_names_to_jsonl_and_tensorboard(scripted_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, result, _ = scripted_run
    assert result.last_step == 1
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    start, train = records[0], records[1]
    assert start["step"] == 0 and "matpo/eval/greedy/accuracy" in start  # the starting model, evaluated first
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "critic/score/mean",
                "critic/advantages/mean", "response_length/mean", "timing_s/gen", "timing_s/update_actor",
                "timing_s/step", "matpo/reward/mean"):
        assert key in train, key
    assert not any(k in train for k in ("loss", "reward_mean", "rollout_seconds"))
    assert train["critic/score/mean"] == pytest.approx(train["matpo/reward/mean"])  # one trajectory per tree here
    assert any("matpo/eval/greedy/accuracy" in r for r in records[2:])
    assert sorted(p.name for p in (run / "evals").iterdir()) == ["step_000000.json", "step_000001.json"]
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "actor/pg_loss" in tags and "timing_s/gen" in tags
    assert [e.step for e in acc.Scalars("critic/score/mean")] == [1]


def test_scripted_run_saves_every_tree_of_the_step(scripted_run):
    from matpo_graph.core.rollout import read_trees

    run, _, _ = scripted_run
    trees = read_trees(run / "rollouts" / "step_000001.jsonl")
    assert len(trees) == 4  # 2 questions x G=2, all of them


def test_scripted_run_shows_progress_from_the_start(scripted_run):
    _, _, text = scripted_run
    assert text.index("RL steps 0/1: starting") < text.index("rollouts done: 4/4 trees")
    assert "update actor done" in text
    assert "eval greedy done: 1/1 trees" in text
    assert "step:1 - actor/" in text  # the console logger, veRL's format


def test_scripted_resume_counts_progress_on_from_its_checkpoint(scripted_run, tmp_path):
    """A resumed run's progress starts at the checkpoint's step, not at 0 (it used to print `RL steps 0/2`)."""
    import contextlib
    import io
    import shutil

    from matpo_graph.compilers.local import load_program
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.trainer import LocalTrainer

    run, _, _ = scripted_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)  # the module's run stays at step 1 for the other tests
    cfg = TrainConfig.model_validate_json((copy / "train_config.json").read_text()).model_copy(update={"steps": 2})
    program, plan = load_program(ROOT / "graphs" / "single_agent.yaml")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = LocalTrainer(program, plan, cfg, copy).run(resume=True)
    text = out.getvalue()
    assert result.last_step == 2
    assert "RL steps 1/2: starting" in text and "RL steps 0/2" not in text
    assert "[step 2/2] rollouts done" in text and "[step 1/2]" not in text


def test_scripted_eval_of_the_run_folder_shows_progress_and_writes_trees(scripted_run, tmp_path, capsys):
    from matpo_graph.cli import main
    from matpo_graph.core.rollout import read_trees

    run, _, _ = scripted_run
    out = tmp_path / "eval.jsonl"
    policy = f"scripted:{run.parent / 'script.json'}"
    assert main(["eval", str(run), "--policy", policy, "--n", "2", "--samples", "1", "--out", str(out),
                 "temperature=0.5"]) == 0
    text = capsys.readouterr().out
    assert "eval greedy done: 2/2 trees" in text and "eval sampled done: 2/2 trees" in text
    assert len(read_trees(out)) == 4


def test_scripted_eval_of_a_chosen_step(scripted_run, tmp_path, capsys):
    """--step 0 evaluates the model RL started from, --step N that checkpoint; a step without one is an error."""
    from matpo_graph.cli import main
    from matpo_graph.core.rollout import read_trees

    run, _, _ = scripted_run
    policy = f"scripted:{run.parent / 'script.json'}"
    for step in (0, 1):
        out = tmp_path / f"eval_{step}.jsonl"
        assert main(["eval", str(run), "--step", str(step), "--policy", policy, "--n", "1", "--samples", "2",
                     "--out", str(out)]) == 0
        assert len(read_trees(out)) == 3
    capsys.readouterr()
    assert main(["eval", str(run), "--step", "7", "--policy", policy, "--n", "1"]) == 2
    assert "no checkpoint for step 7" in capsys.readouterr().err


def test_dynamic_sampling_draws_more_questions_while_no_group_has_accuracy_signal(tmp_path):
    """Every scripted answer is right, so no group can teach anything: the step draws the questions it has
    not seen yet, up to its draw limit, and keeps their groups apart (no group id used twice)."""
    pytest.importorskip("torch")
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.trainer import LocalTrainer

    script, data = _always_paris(tmp_path, questions=5)
    program, plan = load_program(ROOT / "graphs" / "single_agent.yaml")
    cfg = TrainConfig(policy=f"scripted:{script}", data=str(data), eval_data=str(data), steps=1, warmstart="none",
                      questions_per_step=2, group_size=2, eval_questions=0, time_budget_minutes=0, verify_sync=False,
                      train_layers=1, min_signal_groups=1, max_sampling_rounds=2)
    result = LocalTrainer(program, plan, cfg, tmp_path / "run").run()
    trees = read_trees(tmp_path / "run" / "rollouts" / "step_000001.jsonl")
    groups: dict[str, set[str]] = {}
    for tree in trees:
        groups.setdefault(tree.group_id, set()).add(tree.metadata["question_id"])
    assert result.metrics[0]["sampling_draws"] == 3.0  # the first draw and both extra ones
    assert 4 < len(trees) <= 2 * 5 and len(trees) == 2 * len(groups)  # G=2 per group, more groups than 2
    assert all(len(q) == 1 for q in groups.values())
    question_ids = [next(iter(q)) for q in groups.values()]
    assert len(question_ids) == len(set(question_ids))  # no question drawn twice in the step


def test_contrast_batches_train_each_step_on_one_kind_of_page_over_different_relations(tmp_path):
    """With batch_mix=contrast a step's questions ask about one kind of page (here person or country pages),
    each for another relation, read from the questions' own metadata."""
    pytest.importorskip("torch")
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.trainer import LocalTrainer

    script, _ = _always_paris(tmp_path, questions=0)
    relations = {"p0": "born_in", "p1": "birth_year", "p2": "born_in", "p3": "birth_year",
                 "c0": "capital", "c1": "currency", "c2": "capital", "c3": "currency"}
    data = tmp_path / "typed.jsonl"
    data.write_text("".join(json.dumps({"id": qid, "question": f"Question {qid}?", "answer": "Paris",
                                        "metadata": {"relations": ["works_for", rel]}}) + "\n"
                            for qid, rel in relations.items()))
    program, plan = load_program(ROOT / "graphs" / "single_agent.yaml")
    cfg = TrainConfig(policy=f"scripted:{script}", data=str(data), eval_data=str(data), steps=4, warmstart="none",
                      questions_per_step=2, group_size=2, eval_questions=0, time_budget_minutes=0, verify_sync=False,
                      train_layers=1, batch_mix="contrast")
    LocalTrainer(program, plan, cfg, tmp_path / "run").run()
    kinds = []
    for step in range(1, 5):
        asked = {t.metadata["question_id"] for t in read_trees(tmp_path / "run" / "rollouts" / f"step_{step:06d}.jsonl")}
        assert len(asked) == 2 and len({relations[q] for q in asked}) == 2  # two relations side by side
        assert len({q[0] for q in asked}) == 1  # one kind of page
        kinds.append(next(iter(asked))[0])
    assert sorted(kinds) == ["c", "c", "p", "p"]  # each kind as often as its size asks


def test_hops_batches_train_each_step_on_one_and_two_hop_questions(tmp_path):
    """With batch_mix=hops every step holds a one-hop and a two-hop question, read from the questions' metadata,
    though the data hold three one-hop questions for each two-hop one."""
    pytest.importorskip("torch")
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.trainer import LocalTrainer

    script, _ = _always_paris(tmp_path, questions=0)
    hops = {f"a{i}": 1 for i in range(6)} | {"b0": 2, "b1": 2}
    data = tmp_path / "hops.jsonl"
    data.write_text("".join(json.dumps({"id": qid, "question": f"Question {qid}?", "answer": "Paris",
                                        "metadata": {"hops": h}}) + "\n" for qid, h in hops.items()))
    program, plan = load_program(ROOT / "graphs" / "single_agent.yaml")
    cfg = TrainConfig(policy=f"scripted:{script}", data=str(data), eval_data=str(data), steps=3, warmstart="none",
                      questions_per_step=2, group_size=2, eval_questions=0, time_budget_minutes=0, verify_sync=False,
                      train_layers=1, batch_mix="hops")
    LocalTrainer(program, plan, cfg, tmp_path / "run").run()
    for step in range(1, 4):
        asked = {t.metadata["question_id"] for t in read_trees(tmp_path / "run" / "rollouts" / f"step_{step:06d}.jsonl")}
        assert sorted(hops[q] for q in asked) == [1, 2]
