"""The veRL bundle: every graph compiles (or says clearly why not), overrides compose with veRL's config."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")

from matpo_graph.compilers.local import compile_graph  # noqa: E402
from matpo_graph.compilers.verl import (
    AGENT_LOOP_TARGET,
    AGENT_NAME,
    VerlCompileError,
    compile_verl_bundle,
    graph_overrides,
    run_defaults,
)
from matpo_graph.core.loader import load_graph

from verl_helpers import REPO, TINY_GRAPH, compile_tiny, compose_verl

pytestmark = pytest.mark.verl

BUNDLE_FILES = {"README.md", "agent_loop.yaml", "credit_plan.json", "graph.yaml", "launch.sh", "program.json", "reward_fn.py", "verl_target.json"}


def _variant(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(TINY_GRAPH.read_text())
    edit(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _compile(path: Path, out: Path):  # type: ignore[no-untyped-def]
    graph = load_graph(path)
    program, plan = compile_graph(graph, path.parent)
    return compile_verl_bundle(graph, program, plan, out, graph_path=path)


@pytest.mark.parametrize("graph_file", sorted((REPO / "graphs").glob("*.yaml")), ids=lambda p: p.stem)
def test_compile_verl_every_graph_compiles_or_fails_clearly(graph_file: Path, tmp_path: Path) -> None:
    try:
        bundle = _compile(graph_file, tmp_path / "b")
    except VerlCompileError as exc:
        assert exc.issues and all(i.path.startswith(("credit.", "roles.", "policies.")) for i in exc.issues), exc.render()
        assert all("verl" in i.message.lower() or "verl" in (i.hint or "").lower() for i in exc.issues)
        return
    assert {p.name for p in bundle.root.iterdir()} == BUNDLE_FILES
    assert os.access(bundle.launch, os.X_OK)


def test_compile_verl_output_is_deterministic_and_relocatable(tmp_path: Path) -> None:
    _compile(REPO / "graphs" / "deep_search.yaml", tmp_path / "one")
    _compile(REPO / "graphs" / "deep_search.yaml", tmp_path / "two")
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "one", tmp_path / "two", sorted(BUNDLE_FILES), shallow=False)
    assert mismatch == [] and errors == [] and sorted(match) == sorted(BUNDLE_FILES)
    assert str(tmp_path) not in (tmp_path / "one" / "launch.sh").read_text()


@pytest.mark.parametrize(
    ("edit", "path", "words"),
    [
        (lambda g: g["credit"].update(strategy="root_only"), "credit.strategy", "broadcast"),
        (lambda g: g["roles"]["helper"].update(temperature=1.2), "roles.helper.temperature", "one temperature"),
        (lambda g: g["roles"]["planner"].update(trainable=False), "roles.planner.trainable", "root"),
        (lambda g: g["credit"].update(epsilon=1e-3), "credit.epsilon", "1e-06"),
        (lambda g: g["credit"].update(group_size=1, single_member="zero"), "credit.single_member", "group of one"),
        (lambda g: g["credit"].update(kl={"coef": 0.01, "estimator": "k3"}), "credit.kl.coef", "per tree"),
        (lambda g: g["credit"].update(loss_agg="seq_mean_token_mean"), "credit.loss_agg", "padding rows"),
    ],
    ids=["strategy", "temperature", "untrained-root", "epsilon", "single-member", "kl-with-tree-mean", "seq-mean"],
)
def test_compile_verl_rejects_what_verl_cannot_express(tmp_path: Path, edit, path: str, words: str) -> None:  # type: ignore[no-untyped-def]
    variant = _variant(tmp_path, edit)
    with pytest.raises(VerlCompileError) as info:
        _compile(variant, tmp_path / "b")
    issue = next(i for i in info.value.issues if i.path == path)
    assert words in issue.message + " " + (issue.hint or "")
    assert issue.line is not None  # located in the graph file
    assert f"{variant}:{issue.line}" in info.value.render()
    assert not (tmp_path / "b").exists()  # nothing half-written


def test_compile_verl_accepts_one_shared_role_temperature(tmp_path: Path) -> None:
    variant = _variant(tmp_path, lambda g: [r.update(temperature=0.8) for r in g["roles"].values()])
    bundle = _compile(variant, tmp_path / "b")
    assert "actor_rollout_ref.rollout.temperature=0.8" in bundle.overrides


def test_graph_overrides_compose_with_verl_config(tmp_path: Path) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    program, plan, bundle = compile_tiny(tmp_path / "bundle b")  # a space in the path on purpose
    runs = [f"{key}={default or 'x'}" for key, _, default in run_defaults(program)]
    cfg = compose_verl(graph_overrides(program, plan, bundle_dir=str(bundle.root)) + runs)

    arr = cfg.actor_rollout_ref
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "matpo"
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is True
    assert arr.rollout.name == "vllm" and arr.rollout.n == plan.group_size == 4
    assert cfg.data.max_response_length == program.context_tokens  # a response never loses trained tokens
    assert arr.rollout.prompt_length == cfg.data.max_prompt_length  # veRL derives these from data.*
    assert arr.actor.loss_agg_mode == "token-mean" and cfg.matpo.loss_agg == "tree_token_mean"
    assert arr.actor.clip_ratio_low == plan.clip_ratio_low and arr.actor.clip_ratio_high == plan.clip_ratio_high
    assert arr.actor.clip_ratio_c > 1e9  # dual-clip off (dual_clip: null)
    assert arr.actor.use_kl_loss is False and arr.actor.policy_loss.loss_mode == "vanilla"
    assert arr.rollout.agent.agent_loop_config_path == str(bundle.agent_loop_config)
    assert arr.rollout.agent.default_agent_loop == AGENT_NAME
    assert cfg.reward.custom_reward_function.path == str(bundle.reward_function)
    assert cfg.reward.custom_reward_function.name == "compute_score"
    assert cfg.matpo.bundle_dir == str(bundle.root)
    assert cfg.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == "matpo_graph.verl_target.setup.setup_worker"
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_graph_overrides_map_kl_and_dual_clip(tmp_path: Path) -> None:
    def edit(g):  # type: ignore[no-untyped-def]
        g["credit"].update(dual_clip=3.5, kl={"coef": 0.01, "estimator": "k1"}, loss_agg="token_mean", normalization="mean_only")

    program, plan, bundle = compile_tiny(tmp_path / "b", _variant(tmp_path, edit))
    cfg = compose_verl(graph_overrides(program, plan, bundle_dir=str(bundle.root)))
    actor = cfg.actor_rollout_ref.actor
    assert actor.clip_ratio_c == 3.5 and actor.use_kl_loss is True and actor.kl_loss_coef == 0.01
    assert actor.kl_loss_type == "kl" and actor.loss_agg_mode == "token-mean"
    assert cfg.algorithm.norm_adv_by_std_in_grpo is False


def test_launch_script_hands_verl_the_graph_overrides(tmp_path: Path) -> None:
    program, plan, bundle = compile_tiny(tmp_path / "b")
    argv_file = tmp_path / "argv.txt"
    fake_python = tmp_path / "python"  # records the command line instead of starting veRL
    fake_python.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "{argv_file}"\n')
    fake_python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake_python), "MODEL_PATH": "/models/m", "TRAIN_FILES": "/d/train.parquet", "N_GPUS": "2"}
    subprocess.run(["bash", str(bundle.launch), "trainer.total_training_steps=3"], check=True, env=env, cwd=tmp_path)
    argv = argv_file.read_text().splitlines()
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
    expected = graph_overrides(program, plan, bundle_dir=str(bundle.root.resolve()))
    assert argv[2 : 2 + len(expected)] == expected
    assert argv[-1] == "trainer.total_training_steps=3"  # the caller's overrides come last and win
    cfg = compose_verl(argv[2:])
    assert cfg.trainer.total_training_steps == 3 and cfg.trainer.n_gpus_per_node == 2
    assert cfg.actor_rollout_ref.model.path == "/models/m" and cfg.data.val_files == "/d/train.parquet"


def test_agent_loop_yaml_registers_the_matpo_loop(tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry

    _, _, bundle = compile_tiny(tmp_path / "b")
    entries = OmegaConf.load(bundle.agent_loop_config)  # as veRL's AgentLoopWorker reads it
    assert [(e.name, e._target_) for e in entries] == [(AGENT_NAME, AGENT_LOOP_TARGET)]
    from matpo_graph.verl_target.agent_loop import MatpoAgentLoop

    assert issubclass(MatpoAgentLoop, AgentLoopBase)
    assert _agent_loop_registry[AGENT_NAME]["_target_"] == AGENT_LOOP_TARGET


def test_compile_verb_writes_the_bundle(tmp_path: Path) -> None:
    out = tmp_path / "compiled"
    proc = subprocess.run(
        [sys.executable, "-m", "matpo_graph", "compile", str(TINY_GRAPH), "--target", "verl", "-o", str(out)],
        capture_output=True, text=True, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert BUNDLE_FILES - {"graph.yaml"} <= {p.name for p in out.iterdir()}


def test_verl_compiler_and_light_modules_import_without_heavy_engines() -> None:
    code = (
        "import sys, matpo_graph.compilers.verl, matpo_graph.verl_target.launch, matpo_graph.verl_target.policy, "
        "matpo_graph.verl_target.dataset, matpo_graph.cli.data_verbs; "
        "print(','.join(m for m in ('torch', 'verl', 'vllm', 'ray', 'pyarrow') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""
