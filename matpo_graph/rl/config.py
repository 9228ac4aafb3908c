"""Typed configuration of a local training run; every field carries its help text."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from matpo_graph.coldstart.defaults import WARMUP_DEMOS, WARMUP_DRILLS, WARMUP_EPOCHS, WARMUP_LR
from matpo_graph.runtime.policy import DEFAULT_TEMPERATURE

__all__ = ["TrainConfig"]


class TrainConfig(BaseModel):
    """Settings of `matpo-graph train`. Defaults fit a fresh 2-core CPU machine (the whole job within about 20 minutes)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        default="smollm2-135m-instruct",
        description="Embedded model name, a local HF model directory, or a Hub id org/name read from the local "
        "Hugging Face cache (MATPO_GRAPH_HUB_ONLINE=1 allows downloading it).",
    )
    steps: int = Field(default=4, ge=0, description="RL steps to run (in total, counting resumed ones).")
    time_budget_minutes: float = Field(
        default=20.0, ge=0.0,
        description="Wall-clock budget of one invocation, warm-up included (0: none). A step starts only if, at the pace "
        "of the steps so far, it and the final evaluation end within the budget; the run then checkpoints, "
        "evaluates and reports as usual, and --resume continues towards `steps`.",
    )
    questions_per_step: int = Field(default=2, ge=1, description="Questions per RL step; each gets group_size root rollouts.")
    group_size: int | None = Field(default=None, ge=1, description="Root rollouts per question; the graph's credit.group_size when unset.")
    batch_mix: Literal["shuffled", "contrast", "hops"] = Field(
        default="shuffled",
        description="How a step's questions are drawn: 'shuffled' walks seeded permutations of all questions; 'contrast' "
        "draws each step from one kind of page (the last hop's subject: person, city, ...) over as many different "
        "asked relations as it has, so the update sees neighbouring relations side by side; 'hops' takes the "
        "questions of each relation-chain length in turn (one-hop, two-hop, ...), so every step holds questions "
        "that need one lookup beside questions that need more (questions without a hop count are one-hop).",
    )
    data: str | None = Field(
        default=None,
        description="Training questions: a QA file (JSONL/JSON/parquet), a dataset folder (save_to_disk, parquet, "
        "arrow), hf:NAME[:CONFIG][:SPLIT], or fanoutqa:dev; the embedded web's train split when unset.",
    )
    eval_data: str | None = Field(default=None, description="Held-out questions, in any form `data` takes; the embedded web's dev split when unset.")
    data_columns: dict[str, str] = Field(
        default_factory=dict,
        description="Field -> column mapping for datasets with other column names, e.g. "
        "{question: query, answers: label}; applies to data and eval_data.",
    )
    env_seed: int = Field(default=0, description="Seed of the embedded web world.")
    env_entities: int = Field(default=400, ge=10, description="Entities in the embedded web world.")
    noise: str | None = Field(default=None, description="Noise preset of the embedded web (e.g. 'noisy'); clean when unset.")
    max_hops: int = Field(default=2, ge=1, le=4, description="Longest relation chain among training questions.")
    seed: int = Field(default=0, description="Seed of data order, sampling and initialisation.")
    temperature: float = Field(
        default=DEFAULT_TEMPERATURE, ge=0.0,
        description="Sampling temperature of rollouts. Engine and trainer both use logprobs of the tempered "
        "distribution (logits / temperature), so the PPO ratio is exact; 0.7 keeps a 135M model from derailing.",
    )
    lr: float = Field(default=2e-6, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(default=0.0, ge=0.0)
    max_grad_norm: float = Field(default=1.0, gt=0.0, description="Gradient clipping norm.")
    optimizer_steps_per_rl_step: int = Field(
        default=1, ge=1, description="Mini-batches (each one AdamW step) per RL step, independent of how many workers were spawned."
    )
    min_signal_groups: int = Field(
        default=0, ge=0,
        description="Dynamic sampling (as in DAPO): when a step's groups hold fewer than this many whose roots differ in "
        "accuracy, draw questions_per_step more questions (G rollouts each) and add their groups, up to "
        "max_sampling_rounds extra draws; 0 draws once.",
    )
    max_sampling_rounds: int = Field(default=2, ge=0, le=16, description="Extra draws dynamic sampling may take per step.")
    ppo_epochs: int = Field(
        default=1, ge=1, le=16,
        description="Passes over the step's mini-batches; passes after the first see a PPO ratio away from 1, where the clip acts.",
    )
    drop_zero_advantage_rows: bool = Field(
        default=True,
        description="Leave rows whose every advantage is 0 out of the forward and backward passes (their gradient is exactly 0 "
        "without a KL term); only the token metrics of the update then cover fewer rows.",
    )
    micro_batch_tokens: int = Field(default=4096, ge=128, description="Tokens per forward/backward micro-batch (gradient accumulation).")
    train_layers: int = Field(
        default=10, ge=0,
        description="Decoder layers trained, counted from the top (with the final norm); 0 trains every weight. "
        "The CPU default keeps a step within minutes; use 0 on a GPU.",
    )
    lora_rank: int = Field(default=0, ge=0, description="LoRA rank (peft); 0 trains all weights.")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        default="auto",
        description="Matmuls of the RL update's decoder layers (and the warm-up's): bf16 autocast (weights, optimizer, "
        "final norm and vocabulary projection stay float32) or fp32; auto picks bf16 where the CPU has native bf16.",
    )
    old_logprobs: Literal["trainer", "engine"] = Field(
        default="trainer",
        description="Old logprobs of the PPO ratio: recomputed by the trainer before the step's first update (the first "
        "mini-batch's ratio is then exactly 1 whatever the precision), or the engine's sampling logprobs. The gap between "
        "the two is logged either way (matpo/engine_trainer_logprob_gap).",
    )
    engine_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="Weights and activations of the vLLM rollout engine. auto: bfloat16 where the CPU has native bf16 and "
        "the trainer recomputes the old logprobs (so the PPO ratio never compares across precisions), else float32. "
        "bf16 serving samples 1.3x faster here; engine and trainer logprobs then differ by ~0.03 on average, which "
        "matpo/engine_trainer_logprob_gap and sync_max_abs_logprob_diff show; float32 keeps them equal to ~1e-3.",
    )
    eval_every: int = Field(default=0, ge=0, description="Evaluate on the held-out split every K steps (0: only at the end when eval_questions > 0).")
    eval_questions: int = Field(default=4, ge=0, description="Held-out questions per evaluation.")
    eval_at_start: bool = Field(
        default=True,
        description="Also evaluate the model RL starts from (the warm-up) before the first step, on the same questions, "
        "so the report can put start and end side by side with a paired interval.",
    )
    checkpoint_every: int = Field(default=1, ge=1, description="Write a checkpoint every N steps.")
    keep_checkpoints: int = Field(default=2, ge=1, description="Checkpoints kept on disk (the newest ones).")
    rollout_samples_per_step: int | None = Field(
        default=None, ge=0,
        description="Rollout trees saved per step under RUN_DIR/rollouts/ (whole groups, at least this many trees); "
        "unset saves every tree of the step, 0 none. Lower it for long runs.",
    )
    logger: list[str] = Field(
        default_factory=lambda: ["console", "jsonl", "tensorboard"],
        description="Where metrics go, several at once (as veRL's trainer.logger): console, jsonl (RUN_DIR/metrics.jsonl, "
        "which report and show read), tensorboard (RUN_DIR/tensorboard), wandb (when installed; offline unless WANDB_MODE says otherwise).",
    )
    project_name: str = Field(default="matpo-graph", description="Project name for the trackers (W&B), as veRL's trainer.project_name.")
    experiment_name: str | None = Field(default=None, description="Experiment name for the trackers; the run folder's name when unset.")
    warmstart: Literal["none", "sft", "auto"] = Field(
        default="auto", description="Cold start before RL: sft (supervised warm-up on expert demonstrations), none, or auto (sft for the embedded model)."
    )
    sft_demos: int = Field(default=WARMUP_DEMOS, ge=1, description="Expert demonstrations for the warm-up.")
    sft_drills: int = Field(
        default=WARMUP_DRILLS, ge=0,
        description="Further demonstrations of which only each trajectory's first turn (decomposition, field to find) is trained.",
    )
    sft_tokens: int | None = Field(
        default=None, ge=1,
        description="Cap the warm-up at this many trained tokens (demonstrations and drills in their requested proportion); "
        "unset: all of sft_demos and sft_drills. Gives graphs whose demonstrations differ in length the same warm-up budget.",
    )
    sft_variety: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="How often the warm-up's expert departs from its canonical wording, first query, page read and lookup "
        "order (0: one fixed way per question). Varied demonstrations leave the warmed-up policy choices to explore.",
    )
    sft_epochs: int = Field(default=WARMUP_EPOCHS, ge=1, description="Epochs of the warm-up.")
    sft_lr: float = Field(default=WARMUP_LR, gt=0.0, description="Learning rate of the warm-up.")
    kv_cache_gib: int = Field(default=2, ge=1, description="vLLM CPU KV cache size (GiB).")
    policy: str = Field(
        default="vllm",
        description="Rollout policy: vllm, hf, openai:URL (an OpenAI-compatible server; it does not receive the "
        "trained weights) or scripted:FILE (tests).",
    )
    tool_cache: Literal["off", "record", "replay", "readwrite"] = Field(default="off", description="On-disk tool response cache mode.")
    verify_sync: bool = Field(default=True, description="After each weight sync, compare engine and trainer logprobs on a fixed sequence (metric sync_max_abs_logprob_diff).")
    tool_cache_dir: str = Field(default="tool_cache", description="Folder of the tool response cache.")

    @field_validator("logger", mode="before")
    @classmethod
    def _loggers(cls, v: object) -> object:
        """Accept ``console,tensorboard`` and veRL's ``['console','wandb']`` as well as a list; check the names."""
        if isinstance(v, (str, list, tuple)):
            from matpo_graph.tracking.sinks import parse_loggers

            return parse_loggers(v)
        return v

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        kind, sep, arg = v.partition(":")
        if (kind in ("vllm", "hf") and not sep) or (kind in ("openai", "scripted") and arg):
            return v
        raise ValueError(f"unknown policy {v!r}: use vllm, hf, openai:URL or scripted:FILE")

    @field_validator("data_columns", mode="before")
    @classmethod
    def _columns(cls, v: object) -> object:
        """Accept the command line's ``question=query,answers=label`` as well as a mapping."""
        if isinstance(v, (str, dict)):
            from matpo_graph.data.qa import parse_columns

            return parse_columns(v)
        return v

    @model_validator(mode="after")
    def _check(self) -> "TrainConfig":
        if self.group_size == 1:
            import warnings

            warnings.warn("group_size 1 gives zero GRPO advantages: nothing will be learned", UserWarning, stacklevel=2)
        return self
