"""Supervised warm-up (cold start): train the shared policy on expert demonstrations of every role.

The embedded 135M model almost never writes a valid tool call from instructions alone, so RL from it
sees all-zero rewards and no GRPO signal. A short supervised pass on full-reward expert rollout trees
(cross-entropy on exactly the generated tokens of every trajectory, all roles at once) teaches the call
and answer formats; the RL trainer then starts from the checkpoint written here.

Outputs under ``out_dir``: ``demos.jsonl`` (the demonstrations), ``drills.jsonl`` (the trees whose
trajectories' first turns were drilled), ``metrics_sft.jsonl`` (one row per optimizer step, one per epoch, and a final summary) and ``model/`` (a complete HF model folder).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from matpo_graph.coldstart.defaults import WARMUP_DEMOS, WARMUP_DRILLS, WARMUP_EPOCHS, WARMUP_LR
from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.rollout import RolloutTree, write_trees
from matpo_graph.model.precision import resolve_precision

log = logging.getLogger(__name__)

__all__ = ["SFTSettings", "run_sft", "train_sft"]


@dataclass(frozen=True)
class SFTSettings:
    """Optimisation settings of the warm-up (defaults fit about ten minutes on two CPU cores)."""

    epochs: int = WARMUP_EPOCHS
    lr: float = WARMUP_LR
    batch_size: int = 4
    """Trajectories per optimizer step; the loss is the mean over their generated tokens."""
    micro_batch_tokens: int = 4096
    """Padded tokens per forward/backward pass (gradient accumulation inside a step)."""
    train_layers: int = 10
    """Decoder layers trained, from the top; 0 trains all (see :mod:`matpo_graph.coldstart.sft_model`)."""
    train_embeddings: bool = False
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    warmup_ratio: float = 0.1
    seed: int = 0
    max_seconds: float | None = None
    """Stop at the first optimizer step boundary after this many seconds (the checkpoint is still written)."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """Matmuls of the training passes in bfloat16 (autocast; weights, optimizer and loss stay float32) or
    float32. auto picks bf16 where the CPU has native bfloat16 instructions (about twice as fast there)."""
    eval_loss: bool = False
    """Also measure the mean loss over all demonstrations before and after training (costs two float32
    forward passes over them)."""

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.batch_size < 1 or self.micro_batch_tokens < 16:
            raise ValueError("batch_size must be >= 1 and micro_batch_tokens >= 16")
        if self.train_layers < 0:
            raise ValueError(f"train_layers must be >= 0 (0 trains every layer), got {self.train_layers}")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"precision must be auto, bf16 or fp32, got {self.precision!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up, then linear decay to a tenth of the peak."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    return 1.0 - 0.9 * min(1.0, (step - warmup) / span)


def _mean_loss(model: Any, examples: Sequence[Any], micro_batch_tokens: int) -> float:
    import torch

    from matpo_graph.coldstart.sft_data import micro_batches

    total, count = 0.0, 0
    # float32 throughout, whatever the training passes use
    precision, model.precision = model.precision, "fp32"
    try:
        with torch.no_grad():
            for micro in micro_batches(examples, max_tokens=micro_batch_tokens):
                loss, n = model.loss_sum(micro)
                total, count = total + float(loss), count + n
    finally:
        model.precision = precision
    return total / max(1, count)


def train_sft(trees: Sequence[RolloutTree], *, model_dir: str | Path, out_dir: str | Path,
              settings: SFTSettings | None = None, progress: bool = True,
              openings: Sequence[RolloutTree] = (), whole_roles: Collection[str] = ()) -> Path:
    """Train on the trajectories of `trees` (and the first turns of the trajectories of `openings`, all
    turns for roles in `whole_roles`, see :func:`~matpo_graph.coldstart.sft_data.opening_examples`) and write
    the checkpoint ``out_dir/model``; returns its path.

    Raises:
        ValueError: no trajectory with generated tokens in `trees`.
    """
    import torch

    from matpo_graph.coldstart.sft_data import examples_from_trees, micro_batches, opening_examples, optimizer_batches
    from matpo_graph.coldstart.sft_model import SFTModel
    from matpo_graph.model.folder import save_model_folder

    s = settings or SFTSettings()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drills = opening_examples(openings, whole_roles=whole_roles)
    examples = examples_from_trees(trees) + drills
    if not examples:
        raise ValueError("no demonstration has generated tokens to learn from")
    torch.manual_seed(s.seed)
    t_start, cpu_start = time.perf_counter(), time.process_time()
    bf16 = resolve_precision(s.precision) == "bf16"
    model = SFTModel(model_dir, train_layers=s.train_layers, train_embeddings=s.train_embeddings,
                     precision="bf16" if bf16 else "fp32")
    optimizer = torch.optim.AdamW(model.trainable, lr=s.lr, weight_decay=s.weight_decay)
    steps_per_epoch = math.ceil(len(examples) / s.batch_size)
    total_steps = steps_per_epoch * s.epochs
    warmup = int(total_steps * s.warmup_ratio)
    metrics_path = out / "metrics_sft.jsonl"
    metrics_path.write_text("")

    def log_row(row: dict[str, Any]) -> None:
        with metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, sort_keys=True) + "\n")

    roles = sorted({ex.role for ex in examples})
    summary: dict[str, Any] = {
        "kind": "summary", "demonstrations": len(trees), "opening_drills": len(openings), "drill_examples": len(drills), "examples": len(examples), "roles": roles,
        "tokens": sum(len(ex) for ex in examples), "trained_tokens": sum(ex.trained_tokens for ex in examples),
        "trainable_parameters": model.num_trainable(), "settings": s.as_dict(), "precision": "bf16" if bf16 else "fp32",
    }
    if s.eval_loss:
        model.model.eval()
        summary["loss_before"] = _mean_loss(model, examples, s.micro_batch_tokens)
    model.model.train()
    step, stopped = 0, False
    bar = _progress(progress)
    plain_every = max(1, total_steps // 10)  # a log file gets about ten lines, a terminal the bar
    with bar:
        task = bar.add_task("warm-up", total=total_steps, loss=float("nan"))
        for epoch in range(1, s.epochs + 1):
            t_epoch, loss_sum, loss_tokens, seen = time.perf_counter(), 0.0, 0, 0
            for batch in optimizer_batches(examples, batch_size=s.batch_size, seed=s.seed, epoch=epoch):
                if s.max_seconds is not None and time.perf_counter() - t_start > s.max_seconds:
                    stopped = True
                    break
                for group in optimizer.param_groups:
                    group["lr"] = s.lr * _lr_factor(step, total_steps, warmup)
                n_trained = sum(ex.trained_tokens for ex in batch)
                optimizer.zero_grad(set_to_none=True)
                batch_loss = 0.0
                for micro in micro_batches(batch, max_tokens=s.micro_batch_tokens):
                    loss, _ = model.loss_sum(micro)  # bf16 autocast inside the engine when bf16
                    (loss / max(1, n_trained)).backward()
                    batch_loss += float(loss.detach())
                grad_norm = float(torch.nn.utils.clip_grad_norm_(model.trainable, s.max_grad_norm))
                optimizer.step()
                step += 1
                loss_sum, loss_tokens = loss_sum + batch_loss, loss_tokens + n_trained
                seen += sum(len(ex) for ex in batch)
                row = {"kind": "step", "epoch": epoch, "step": step, "loss": batch_loss / max(1, n_trained),
                       "trained_tokens": n_trained, "tokens": sum(len(ex) for ex in batch),
                       "lr": optimizer.param_groups[0]["lr"], "grad_norm": grad_norm,
                       "seconds": time.perf_counter() - t_start, "cpu_seconds": time.process_time() - cpu_start}
                log_row(row)
                bar.update(task, advance=1, loss=row["loss"])
                if progress and not bar.console.is_terminal and (step % plain_every == 0 or step == total_steps):
                    log.info("warm-up step %d/%d: loss %.3f, %.0fs", step, total_steps, row["loss"], row["seconds"])
            if loss_tokens:
                log_row({"kind": "epoch", "epoch": epoch, "loss": loss_sum / loss_tokens, "trained_tokens": loss_tokens,
                     "tokens": seen, "seconds": time.perf_counter() - t_epoch})
            if stopped:
                break
    if s.eval_loss:
        model.model.eval()
        summary["loss_after"] = _mean_loss(model, examples, s.micro_batch_tokens)
    summary.update({"steps": step, "stopped_by_time": stopped, "seconds": time.perf_counter() - t_start,
                    "cpu_seconds": time.process_time() - cpu_start, "threads": torch.get_num_threads()})
    model.clear_cache()
    path = save_model_folder(model.model, model_dir, out / "model", info_name="matpo_graph_sft.json", info=summary)
    summary["checkpoint"] = str(path)
    log_row(summary)
    return path


def _progress(enabled: bool) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn(), TimeRemainingColumn(),
        disable=not enabled, transient=False,
    )


def run_sft(
    program: Program,
    plan: CreditPlan,
    *,
    model_dir: str | Path,
    out_dir: str | Path,
    demos: int = WARMUP_DEMOS,
    drills: int = WARMUP_DRILLS,
    epochs: int = WARMUP_EPOCHS,
    lr: float = WARMUP_LR,
    seed: int = 0,
    env_seed: int = 0,
    env_entities: int = 400,
    max_hops: int | None = 2,
    trees: Sequence[RolloutTree] | None = None,
    progress: bool = True,
    max_trained_tokens: int | None = None,
    variety: float = 0.0,
    **settings: Any,
) -> Path:
    """Cold start: make `demos` full-reward expert demonstrations on the embedded web's train split,
    train on them, and return the checkpoint folder (``out_dir/model``) the RL trainer starts from.

    Args:
        program, plan: the compiled graph and its credit plan.
        model_dir: the HF model folder to start from.
        out_dir: where demos, metrics and the checkpoint go.
        demos: demonstrations to train on (trees with full reward; fewer if the expert fails often).
        drills: further demonstrations of which only each trajectory's first turn is trained (opening drills;
            delegating roles, whose context is reports only, are trained on all their turns);
            ignored when `trees` is given.
        epochs, lr, seed: optimisation; further :class:`SFTSettings` fields by keyword.
        env_seed, env_entities, max_hops: the embedded world and the longest question chain to use.
        trees: ready-made demonstrations; when given nothing is generated.
        progress: show a progress bar.
        max_trained_tokens: cap the warm-up at this many trained (loss-mask) tokens: demonstrations and drills
            are taken in their requested proportion until the next would pass it (see
            :func:`~matpo_graph.coldstart.sft_data.within_token_budget`); ask for enough of both to reach it.
        variety: how often the expert departs from its canonical wording, query, page and order (0: one fixed
            way per question; see :class:`~matpo_graph.coldstart.expert.ExpertPolicy`).

    Raises:
        ExpertUnsupported: the expert cannot play the graph (the message names the role and why).
        ValueError: no demonstration earned the full reward.
    """
    from matpo_graph.coldstart.demonstrations import make_demos
    from matpo_graph.coldstart.expert_plan import plan_expert

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    openings: list[RolloutTree] = []
    if trees is None:
        batch = make_demos(program, plan, n=demos + max(0, drills), model_dir=model_dir, seed=seed, env_seed=env_seed,
                           env_entities=env_entities, max_hops=max_hops, variety=variety)
        trees, openings = batch.trees[:demos], batch.trees[demos:]
        if not trees:
            raise ValueError(f"the expert produced no full-reward demonstration out of {batch.tried} tries "
                             f"(rejected: {batch.rejected}); check the embedded web and the graph's tools")
        if progress:
            log.info("expert: %s in %.1fs", batch.describe(), time.perf_counter() - t0)
    # only drills need the expert's view of the roles; ready-made trees may come from a graph it cannot play
    whole_roles = sorted(role for role, strategy in plan_expert(program).items() if strategy.kind == "delegate") if openings else []
    if max_trained_tokens is not None:
        from matpo_graph.coldstart.sft_data import within_token_budget

        asked = (len(trees), len(openings))
        trees, openings = within_token_budget(trees, openings, max_trained_tokens=max_trained_tokens, whole_roles=whole_roles)
        if progress:
            log.info("warm-up token budget %d: %d of %d demonstrations and %d of %d drill trees",
                     max_trained_tokens, len(trees), asked[0], len(openings), asked[1])
        if not trees:
            raise ValueError(f"a warm-up budget of {max_trained_tokens} trained tokens holds no demonstration")
    write_trees(out / "demos.jsonl", trees)
    if openings:
        write_trees(out / "drills.jsonl", openings)
    return train_sft(trees, model_dir=model_dir, out_dir=out, openings=openings, whole_roles=whole_roles,
                     settings=SFTSettings(epochs=epochs, lr=lr, seed=seed, **settings), progress=progress)
