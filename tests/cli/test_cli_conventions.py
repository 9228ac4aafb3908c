"""Command-line habits shared across verbs: key=value and --config for the local engine, -o/--out everywhere,
one default temperature, --policy openai:URL wherever a policy is taken."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from matpo_graph.cli import build_parser, main
from matpo_graph.cli.overrides import (
    OverrideError,
    config_file_values,
    hydra_overrides,
    override_values,
    parse_command_line,
)
from matpo_graph.runtime.policy import DEFAULT_TEMPERATURE
from matpo_graph.rl.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
GRAPH = str(ROOT / "graphs" / "deep_search.yaml")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sub
                out.update({f"{name} {k}": v for k, v in subparsers(sub).items()})
    return out


def train_config(*argv: str):
    from matpo_graph.cli.train_verbs import build_train_config

    args = parse_command_line(build_parser(), ["train", GRAPH, *argv])
    return build_train_config(args)


# ---------------------------------------------------------------- output flag

def test_every_output_option_is_spelled_o_and_out():
    seen = 0
    for verb, sub in subparsers(build_parser()).items():
        for action in sub._actions:
            if action.dest in ("out", "output"):
                seen += 1
                assert {"-o", "--out", "--output"} <= set(action.option_strings), (verb, action.option_strings)
    assert seen >= 10


def test_dash_o_and_out_name_the_train_run_folder(tmp_path):
    for flag in ("-o", "--out", "--output"):
        cfg, run_dir = train_config(flag, str(tmp_path / "r"))
        assert run_dir == tmp_path / "r"


# ---------------------------------------------------------------- key=value and --config

def test_bare_key_value_overrides_anywhere_on_the_line(tmp_path):
    cfg, _ = train_config("lr=1e-5", "--steps", "3", "logger=console,tensorboard", "eval_questions=0",
                          "-o", str(tmp_path), "data_columns={question: query}")
    assert cfg.lr == 1e-5 and cfg.steps == 3 and cfg.eval_questions == 0
    assert cfg.logger == ["console", "tensorboard"] and cfg.data_columns == {"question": "query"}


def test_config_file_then_flags_then_overrides(tmp_path):
    conf = tmp_path / "train.yaml"
    conf.write_text("steps: 8\nlr: 3.0e-6\ngroup_size: 8\nlogger: [console, jsonl]\n")
    cfg, _ = train_config("--config", str(conf), "--steps", "5", "lr=1e-6")
    assert (cfg.steps, cfg.lr, cfg.group_size, cfg.logger) == (5, 1e-6, 8, ["console", "jsonl"])


def test_unknown_setting_names_the_closest(tmp_path):
    with pytest.raises(OverrideError, match=r"unknown setting 'grup_size'; did you mean group_size"):
        train_config("grup_size=4")
    conf = tmp_path / "bad.yaml"
    conf.write_text("eval_question: 3\n")
    with pytest.raises(OverrideError, match=r"bad\.yaml: unknown setting 'eval_question'; did you mean eval_questions"):
        config_file_values(conf, known=TrainConfig.model_fields)
    with pytest.raises(OverrideError, match="expected key=value"):
        override_values(["steps"])


def test_train_verb_reports_bad_settings_without_training(tmp_path, capsys):
    assert main(["train", GRAPH, "stepz=3", "-o", str(tmp_path / "r")]) == 2
    assert "unknown setting 'stepz'; did you mean steps" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_unrecognized_options_are_still_errors():
    with pytest.raises(SystemExit):
        parse_command_line(build_parser(), ["train", GRAPH, "--no-such-flag"])
    with pytest.raises(SystemExit):  # verbs without overrides take no key=value
        parse_command_line(build_parser(), ["report", "runs/x", "lr=1"])


def test_config_file_becomes_hydra_overrides_for_verl():
    assert hydra_overrides({"trainer": {"logger": ["console", "file"], "total_epochs": 2},
                            "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}}, "data": {"train_files": "a b"}}) == [
        "trainer.logger=[console,file]", "trainer.total_epochs=2", "actor_rollout_ref.actor.optim.lr=1e-06",
        "data.train_files='a b'"]


def test_resume_reads_the_run_folder_then_the_line_wins(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(TrainConfig(steps=2, lr=5e-6).model_dump_json())
    cfg, _ = train_config("--resume", "-o", str(run), "steps=6")
    assert (cfg.steps, cfg.lr) == (6, 5e-6)


# ---------------------------------------------------------------- temperature and policy

def test_same_default_temperature_in_rollout_train_and_eval():
    subs = subparsers(build_parser())
    rollout = subs["rollout"].parse_args([GRAPH, "-q", "x"])
    evaluate = subs["eval"].parse_args(["runs/x"])
    cfg, _ = train_config()
    assert rollout.temperature == evaluate.temperature == cfg.temperature == DEFAULT_TEMPERATURE == 0.7


@pytest.mark.parametrize("verb, argv", [
    ("rollout", [GRAPH, "-q", "x", "--policy", "openai:http://127.0.0.1:9/v1"]),
    ("eval", ["runs/x", "--policy", "openai:http://127.0.0.1:9/v1"]),
    ("train", [GRAPH, "--policy", "openai:http://127.0.0.1:9/v1"]),
])
def test_policy_openai_url_accepted_wherever_a_policy_is_taken(verb, argv):
    args = subparsers(build_parser())[verb].parse_args(argv)
    assert args.policy == "openai:http://127.0.0.1:9/v1"


def test_train_config_policy_spec_is_checked():
    assert TrainConfig(policy="openai:http://127.0.0.1:9/v1").policy.startswith("openai:")
    with pytest.raises(ValueError, match="unknown policy 'tgi'"):
        TrainConfig(policy="tgi")
    with pytest.raises(ValueError, match="unknown policy 'openai'"):
        TrainConfig(policy="openai")


def test_eval_takes_overrides_and_rejects_unknown(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(json.dumps({}))
    assert main(["eval", str(run), "eval_dta=x.jsonl"]) == 2
    assert "did you mean eval_data" in capsys.readouterr().err


def _readme_train_line() -> list[str]:
    """The new-user `matpo-graph train ...` line of README.md, continuation lines joined, as argv words."""
    import shlex

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("matpo-graph train graphs/qwen_native.yaml"))
    joined = ""
    for line in lines[start:]:
        joined += line.rstrip().rstrip("\\") + " "
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(joined)[2:]  # without `matpo-graph train`


def test_readme_new_user_command_parses(tmp_path):
    """The README's new-user `train` line, read from README.md (graph aside), builds the settings it promises."""
    words = _readme_train_line()
    assert words[0] == "graphs/qwen_native.yaml" and "-o" in words
    args = [w for w in words[1:words.index("-o")]] + ["-o", str(tmp_path / "qwen")]
    cfg, run_dir = train_config(*args)
    assert cfg.model == "Qwen/Qwen2.5-0.5B-Instruct" and cfg.data == "hf:my-org/multihop-qa:default:train"
    assert cfg.eval_data == "hf:my-org/multihop-qa::validation"
    assert cfg.data_columns == {"question": "query", "answers": "reward_model.ground_truth"}
    assert cfg.logger == ["console", "jsonl", "tensorboard"] and cfg.warmstart == "none"
    assert run_dir == tmp_path / "qwen"


def test_readme_verb_table_lists_every_verb():
    """README's table of verbs names each verb the CLI registers (and no verb it lacks)."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = {w for cell in re.findall(r"^\| ((?:`[a-z-]+(?: [a-z-]+)?`(?:, )?)+) \|", text, re.MULTILINE)
              for w in re.findall(r"`([a-z-]+)", cell)}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) <= listed, f"verbs missing from README's table: {sorted(set(sub.choices) - listed)}"
    assert listed <= set(sub.choices), f"README lists verbs the CLI lacks: {sorted(listed - set(sub.choices))}"
