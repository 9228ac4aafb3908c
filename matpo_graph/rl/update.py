"""The policy-update half of an RL step: pack credited trees, PPO-clip loss, AdamW with a fixed step count."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from matpo_graph.core.program import CreditPlan
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.model.forward import ForwardEngine, chunk_rows
from matpo_graph.model.loading import backbone_and_head, decoder_layers, load_causal_lm, train_top_layers
from matpo_graph.rl.batch import PackedBatch, pack_trees, plan_updates, split_minibatches
from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.loss import LossConfig, policy_loss, token_logprobs

__all__ = ["PolicyOptimizer"]


class _StepTotals:
    """What the micro-batches of one RL step's update add up to, and the step's metrics built from it (one
    place for both update paths, so the padded reference and the engine report the same names)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.tokens = 0.0
        self.loss = 0.0
        self.pg = 0.0  # veRL's actor/pg_loss: the policy-gradient part, summed over micro-batches
        self.grad_norms: list[float] = []

    def add(self, out: Any) -> None:
        """Count one micro-batch's loss output (before or after its backward pass)."""
        self.loss += float(out.loss.detach())
        self.pg += float(out.metrics.get("matpo/loss/pg_loss", 0.0))
        n = float(out.num_tokens)
        self.tokens += n
        for key, v in out.metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + v * n

    def clip_and_record(self, params: list[torch.Tensor], max_norm: float) -> None:
        for p in params:  # a mini-batch with no row left is a zero gradient, not a skipped step (AdamW skips None)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))

    def metrics(self, steps: int, batch: PackedBatch, pack_s: float) -> dict[str, float]:
        k = max(1, steps)
        mean = {key: v / self.tokens for key, v in self.sums.items()} if self.tokens else {}
        return {
            "loss": self.loss / k,
            "pg_loss": self.pg / k,
            "ppo_kl": mean.get("matpo/loss/ppo_kl", 0.0),
            "clip_fraction": mean.get("matpo/loss/clip_frac", 0.0),
            "kl": mean.get("matpo/loss/approx_kl_k3", 0.0),
            "kl_ref": mean.get("matpo/loss/kl_ref", 0.0),
            "entropy": mean.get("matpo/loss/entropy", 0.0),
            "grad_norm": max(self.grad_norms) if self.grad_norms else 0.0,
            "optimizer_steps": float(steps),
            "trained_rows": float(len(batch)),
            "trained_tokens": float(batch.num_trained_tokens),
            "pack_seconds": pack_s,
        }


@torch.no_grad()
def merged_lora_state(model: Any) -> dict[str, torch.Tensor]:
    """A peft model's weights with every active adapter merged, in the base model's names, built out of place.

    Merging into the base weights and unmerging again (peft's merge_adapter/unmerge_adapter) rounds the
    frozen base a little at every sync and passes over every layer twice; here each adapted weight is one new
    tensor, base + delta, and the model is left bit for bit as it was.
    """
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    sd = {k.replace(".base_layer", ""): v.detach() for k, v in base.state_dict().items() if "lora_" not in k}
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        weight = module.get_base_layer().weight
        adapters = [a for a in module.active_adapters if a in module.lora_A]
        if adapters:
            sd[f"{name}.weight"] = weight + sum(module.get_delta_weight(a).to(weight.dtype) for a in adapters)
    return sd


class PolicyOptimizer:
    """Owns the trainable model and its AdamW state; `train_step` does exactly K optimizer steps."""

    def __init__(self, model_dir: Path, plan: CreditPlan, cfg: TrainConfig,
                 role_temperatures: Mapping[str, float | None] | None = None) -> None:
        from transformers import AutoTokenizer

        torch.manual_seed(cfg.seed)
        self.plan = plan
        self.cfg = cfg
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))
        base = load_causal_lm(model_dir)
        self.lora = cfg.lora_rank > 0
        if self.lora:
            from peft import LoraConfig, get_peft_model

            base = get_peft_model(
                base,
                LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules="all-linear", lora_dropout=0.0),
            )
        if not self.lora and 0 < cfg.train_layers < len(decoder_layers(base) or ()):
            train_top_layers(base, cfg.train_layers, train_embeddings=False, train_head=False)
        self.model = base
        self.model.train()
        self.ref_model = None
        if plan.kl_coef > 0:
            self.ref_model = load_causal_lm(model_dir).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.loss_cfg = LossConfig.from_plan(plan)
        # The engine reports logprobs of the tempered distribution it samples from (a role may override the
        # run's temperature); the ratio must compare like with like.
        default = cfg.temperature if cfg.temperature > 0 else 1.0
        # a greedy role (temperature 0) is reported with raw logprobs, i.e. temperature 1
        self.role_temperatures = {r: default if t is None else (t if t > 0 else 1.0) for r, t in (role_temperatures or {}).items()}
        self.temperature = default
        self.skip_zero_signal = True  # see _zero_signal_step
        # The forward engine (unpadded rows, shared prefixes once, frozen stack without autograd, bf16 where
        # native); None falls back to the padded whole-row path (models the engine does not know, benchmarks).
        self.forward: ForwardEngine | None = None
        self.ref_forward: ForwardEngine | None = None
        try:
            # bf16 only in the trained layers: a bf16 frozen stack shifts every trained layer's input; on real trees
            # it took the gradient's relative error to the float32 reference to 0.17-0.28 (cosine 0.986), against
            # 0.037 (cosine 0.9994) with the frozen stack in float32, at the price of speed (it is 59% of a step)
            self.forward = ForwardEngine(self.model, precision=cfg.precision, frozen_precision="fp32")
            if self.ref_model is not None:
                self.ref_forward = ForwardEngine(self.ref_model, precision=cfg.precision, frozen_precision="fp32")
        except TypeError:
            self.forward = None

    def use_configured_lr(self) -> dict[str, tuple[float, float]]:
        """Set the learning rate this run was given, after a checkpoint's optimizer state brought back its own
        (AdamW saves `lr` in its param groups); returns {"": (checkpoint's lr, now)} when they differed."""
        changed: dict[str, tuple[float, float]] = {}
        for group in self.optimizer.param_groups:
            if group["lr"] != self.cfg.lr:
                changed[""] = (float(group["lr"]), float(self.cfg.lr))
                group["lr"] = self.cfg.lr
        return changed

    def use_padded_reference(self) -> None:
        """Train through the padded, whole-row float32 path instead of the forward engine (the reference
        the engine is checked and benchmarked against)."""
        self.forward = None
        self.ref_forward = None

    def train_step(self, trees: list[RolloutTree]) -> dict[str, float]:
        """One RL step's update: `optimizer_steps_per_rl_step` AdamW steps over the whole augmented batch."""
        t0 = time.perf_counter()
        batch = pack_trees(trees, loss_agg=self.plan.loss_agg, pad_token_id=self.pad_id, trained_roles=self.plan.trained_roles)
        if self.forward is not None:
            minibatches = split_minibatches(batch, self.cfg.optimizer_steps_per_rl_step)
            pack_s = time.perf_counter() - t0
            if self.skip_zero_signal and self.loss_cfg.kl_coef == 0 and not bool((batch.advantages != 0).any()):
                return self._zero_signal_step(len(minibatches) * self.cfg.ppo_epochs, batch, pack_s)
            return self._engine_step(batch, minibatches, pack_s)
        schedule = plan_updates(batch, num_minibatches=self.cfg.optimizer_steps_per_rl_step,
                                micro_batch_tokens=self.cfg.micro_batch_tokens)
        pack_s = time.perf_counter() - t0
        if self.skip_zero_signal and self.loss_cfg.kl_coef == 0 and not bool((batch.advantages != 0).any()):
            return self._zero_signal_step(len(schedule) * self.cfg.ppo_epochs, batch, pack_s)
        totals = _StepTotals()
        for minibatch in schedule * self.cfg.ppo_epochs:
            self.optimizer.zero_grad(set_to_none=True)
            for micro in minibatch:
                if len(micro) == 0 or micro.num_trained_tokens == 0:
                    continue
                out = self._micro_loss(micro)
                out.loss.backward()
                totals.add(out)
            totals.clip_and_record([p for p in self.model.parameters() if p.requires_grad], self.cfg.max_grad_norm)
            self.optimizer.step()
        return totals.metrics(len(schedule) * self.cfg.ppo_epochs, batch, pack_s)

    def train_packed(self, batch: PackedBatch) -> dict[str, float]:
        """What `train_step` does after packing, on a batch packed by the caller: one policy's own rows of the
        RL step, their weights computed over the whole step (see matpo_graph.rl.update_per_role). Through the
        forward engine only; an empty batch takes the K steps on zero gradients."""
        if self.forward is None:
            raise RuntimeError("training a packed batch needs the forward engine")
        t0 = time.perf_counter()
        minibatches = split_minibatches(batch, self.cfg.optimizer_steps_per_rl_step)
        pack_s = time.perf_counter() - t0
        if self.skip_zero_signal and self.loss_cfg.kl_coef == 0 and not bool((batch.advantages != 0).any()):
            return self._zero_signal_step(len(minibatches) * self.cfg.ppo_epochs, batch, pack_s)
        return self._engine_step(batch, minibatches, pack_s)

    def loss_and_gradients(self, trees: list[RolloutTree]) -> tuple[float, list[torch.Tensor]]:
        """The step's full-batch loss and gradient (one per trainable parameter) at the current weights, with
        the packed old logprobs and no optimizer step: what the engine is checked against the reference with."""
        from matpo_graph.rl.batch import split_microbatches

        batch = pack_trees(trees, loss_agg=self.plan.loss_agg, pad_token_id=self.pad_id, trained_roles=self.plan.trained_roles)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer.zero_grad(set_to_none=True)
        micros = self.micro_chunks(batch) if self.forward is not None else split_microbatches(batch, self.cfg.micro_batch_tokens)
        total = 0.0
        for micro in micros:
            if micro.num_trained_tokens == 0:
                continue
            if self.forward is not None:
                logprobs, _ = self.engine_logprobs(micro)
                ref = None
                if self.ref_forward is not None:
                    with torch.no_grad():
                        ref, _ = self.engine_logprobs(micro, reference=True)
                out = policy_loss(logprobs, micro, self.loss_cfg, ref_logprobs=ref)
            else:
                out = self._micro_loss(micro)
            out.loss.backward()
            total += float(out.loss.detach())
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
        self.optimizer.zero_grad(set_to_none=True)
        return total, grads

    # ---------------------------------------------------------------- the forward engine's update

    def micro_chunks(self, minibatch: PackedBatch) -> list[PackedBatch]:
        """A mini-batch cut for the engine: rows in token order, at most `micro_batch_tokens` distinct tokens each."""
        lengths = minibatch.attention_mask.sum(dim=1).tolist()
        ids = [minibatch.input_ids[r, : int(n)].tolist() for r, n in enumerate(lengths)]
        return [minibatch.select(rows) for rows in chunk_rows(ids, self.cfg.micro_batch_tokens)]

    def engine_logprobs(self, micro: PackedBatch, *, reference: bool = False,
                        want_entropy: bool = False) -> tuple[torch.Tensor, float | None]:
        """Tempered logprobs of a micro-batch's trained tokens through the forward engine, as an [N, L] tensor
        aligned with ``input_ids`` (0 off the loss mask), like :meth:`_masked_logprobs`."""
        engine = self.ref_forward if reference else self.forward
        if engine is None:
            raise RuntimeError("no forward engine for this model")
        lengths = micro.attention_mask.sum(dim=1).tolist()
        ids = [micro.input_ids[r, : int(n)].tolist() for r, n in enumerate(lengths)]
        rows, cols = torch.nonzero(micro.loss_mask[:, 1:] > 0, as_tuple=True)
        cols = cols + 1
        targets: list[list[int]] = [[] for _ in ids]
        for r, c in zip(rows.tolist(), cols.tolist()):
            targets[r].append(c)
        temps = self.row_temperatures(micro).tolist()
        got = engine.row_logprobs(ids, targets, temps, want_entropy=want_entropy)
        flat = torch.cat(got.logprobs) if got.logprobs else torch.zeros(0)
        out = torch.zeros(micro.input_ids.shape, dtype=torch.float32)
        out = out.index_put((rows, cols), flat.to(torch.float32))  # nonzero is row-major, as the targets are
        return out, got.entropy

    @torch.no_grad()
    def recompute_old_logprobs(self, minibatch: PackedBatch) -> PackedBatch:
        """The mini-batch with its old logprobs recomputed by the trainer under the current weights, through
        the same chunks and kernels as its update (so the ratio of an update with unchanged weights is 1)."""
        parts = [(micro, self.engine_logprobs(micro)[0]) for micro in self.micro_chunks(minibatch)]
        old = torch.zeros(minibatch.input_ids.shape, dtype=minibatch.old_logprobs.dtype)
        index = {key: i for i, key in enumerate(minibatch.traj_keys)}
        for micro, lp in parts:
            for r, key in enumerate(micro.traj_keys):
                old[index[key], : lp.shape[1]] = lp[r].to(old.dtype)
        return replace(minibatch, old_logprobs=old * (minibatch.loss_mask > 0))

    def rows_with_signal(self, minibatch: PackedBatch) -> PackedBatch:
        """The mini-batch without rows whose every advantage is 0, when their gradient is exactly 0 (no KL term):
        the weights of the other rows were fixed over the whole step when packing, so the update is unchanged."""
        if not self.cfg.drop_zero_advantage_rows or self.loss_cfg.kl_coef != 0 or len(minibatch) == 0:
            return minibatch
        keep = torch.nonzero((minibatch.advantages != 0).any(dim=1), as_tuple=True)[0].tolist()
        return minibatch if len(keep) == len(minibatch) else minibatch.select(keep)

    def _engine_step(self, batch: PackedBatch, minibatches: list[PackedBatch], pack_s: float) -> dict[str, float]:
        """K AdamW steps through the forward engine, `ppo_epochs` times over. With ``old_logprobs="trainer"``
        the old logprobs are the trainer's under the weights before the first step: mini-batches 2..K (all of
        them with several epochs) get a no-grad pass before it, and the first takes its own forward pass's
        values (the same computation, so its ratio is exactly 1)."""
        recompute = self.cfg.old_logprobs == "trainer"
        epochs = self.cfg.ppo_epochs
        minibatches = [self.rows_with_signal(mb) for mb in minibatches]
        t_old = time.perf_counter()
        if recompute:
            first = 1 if epochs == 1 else 0
            minibatches = minibatches[:first] + [self.recompute_old_logprobs(mb) if len(mb) else mb
                                                 for mb in minibatches[first:]]
        old_s = time.perf_counter() - t_old
        totals = _StepTotals()
        gap_sum, gap_max, gap_n = 0.0, 0.0, 0
        ratio_dev = 0.0
        passes = [(epoch, k, mb) for epoch in range(epochs) for k, mb in enumerate(minibatches)]
        for epoch, k, minibatch in passes:
            self.optimizer.zero_grad(set_to_none=True)
            for micro in self.micro_chunks(minibatch) if len(minibatch) else []:
                if micro.num_trained_tokens == 0:
                    continue
                logprobs, entropy = self.engine_logprobs(micro, want_entropy=True)
                on = micro.loss_mask > 0
                if k == 0 and epoch == 0:
                    gap = (logprobs.detach() - micro.old_logprobs.to(logprobs.dtype)).abs()[on]
                    gap_sum, gap_n = gap_sum + float(gap.sum()), gap_n + int(gap.numel())
                    gap_max = max(gap_max, float(gap.max())) if gap.numel() else gap_max
                    if recompute and epochs == 1:
                        micro = replace(micro, old_logprobs=torch.where(on, logprobs.detach(), 0.0).to(micro.old_logprobs.dtype))
                        ratio = torch.exp(logprobs.detach() - micro.old_logprobs.to(logprobs.dtype))[on]
                        ratio_dev = max(ratio_dev, float((ratio - 1).abs().max())) if ratio.numel() else ratio_dev
                ref = None
                if self.ref_forward is not None:
                    with torch.no_grad():
                        ref, _ = self.engine_logprobs(micro, reference=True)
                out = policy_loss(logprobs, micro, self.loss_cfg, ref_logprobs=ref)
                if entropy is not None:
                    out.metrics["matpo/loss/entropy"] = entropy
                out.loss.backward()
                totals.add(out)
            totals.clip_and_record([p for p in self.model.parameters() if p.requires_grad], self.cfg.max_grad_norm)
            self.optimizer.step()
        out_metrics = totals.metrics(len(passes), batch, pack_s)
        out_metrics.update({
            "timing_s/old_log_prob": old_s,
            "matpo/update/rows_forwarded": float(sum(len(mb) for mb in minibatches)),
            "matpo/engine_trainer_logprob_gap": gap_sum / gap_n if gap_n else 0.0,
            "matpo/engine_trainer_logprob_gap_max": gap_max,
            "matpo/trainer_precision_bf16": float(self.forward is not None and self.forward.precision == "bf16"),
        })
        if recompute:
            out_metrics["matpo/first_minibatch_ratio_max_dev"] = ratio_dev
        return out_metrics

    def _zero_signal_step(self, steps: int, batch: Any, pack_s: float) -> dict[str, float]:
        """Every advantage is 0 and there is no KL term, so the loss and its gradient are exactly 0: take the
        same AdamW steps on zero gradients (momentum still moves the weights, as it would after a full
        backward pass) without running the model. On a CPU this saves minutes per all-degenerate step."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        for _ in range(max(1, steps)):
            for p in params:
                p.grad = torch.zeros_like(p)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": 0.0, "pg_loss": 0.0, "ppo_kl": 0.0, "clip_fraction": 0.0, "kl": 0.0, "kl_ref": 0.0, "grad_norm": 0.0,
            "optimizer_steps": float(max(1, steps)), "trained_rows": float(len(batch)),
            "trained_tokens": float(batch.num_trained_tokens), "pack_seconds": pack_s, "zero_signal_step": 1.0,
        }

    def _micro_loss(self, micro: Any) -> Any:
        temps = self.row_temperatures(micro)
        logprobs, entropy = self._masked_logprobs(self.model, micro, temperature=temps)
        ref = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref, _ = self._masked_logprobs(self.ref_model, micro, want_entropy=False, temperature=temps)
        out = policy_loss(logprobs, micro, self.loss_cfg, ref_logprobs=ref)
        if entropy is not None:
            out.metrics["matpo/loss/entropy"] = entropy
        return out

    def row_temperatures(self, micro: Any) -> torch.Tensor:
        """Sampling temperature of each packed row, from its role."""
        per_role = torch.tensor([self.role_temperatures.get(r, self.temperature) for r in micro.role_names],
                                dtype=torch.float32)
        return per_role[micro.role_index]

    @staticmethod
    def _masked_logprobs(model: Any, micro: Any, *, want_entropy: bool = True,
                         temperature: torch.Tensor | float = 1.0) -> tuple[torch.Tensor, float | None]:
        """Logprobs of ``softmax(logits / temperature)`` aligned with input_ids (temperature: a number or one
        per row), projecting to the vocabulary only where the mask is 1.

        Most tokens of a trajectory are prompt, tool results and child reports; projecting only the
        trained positions saves the bulk of the lm_head work and memory.
        """
        backbone, head = backbone_and_head(model)
        ids = micro.input_ids
        temps = torch.as_tensor(temperature, dtype=torch.float32).expand(ids.shape[0])
        if backbone is None:
            logits = model(input_ids=ids, attention_mask=micro.attention_mask).logits.float() / temps[:, None, None]
            lp = token_logprobs(logits, ids)
            return lp, None
        hidden = backbone(input_ids=ids, attention_mask=micro.attention_mask).last_hidden_state
        rows, cols = torch.nonzero(micro.loss_mask[:, 1:] > 0, as_tuple=True)
        cols = cols + 1  # token t is predicted from position t - 1
        logits = head(hidden[rows, cols - 1]).float() / temps[rows].unsqueeze(-1)
        logz = torch.logsumexp(logits, dim=-1)
        picked = torch.gather(logits, -1, ids[rows, cols].unsqueeze(-1)).squeeze(-1) - logz
        out = torch.zeros(ids.shape, dtype=logits.dtype)
        out = out.index_put((rows, cols), picked)
        entropy = None
        if want_entropy and logits.shape[0] > 0:
            with torch.no_grad():
                p = torch.softmax(logits, dim=-1)
                entropy = float((logz - (p * logits).sum(-1)).mean())
        return out, entropy

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        """Full (merged, for LoRA) weights in HF names, lm_head included, for loading into the engine."""
        if self.lora:
            sd = merged_lora_state(self.model)
        else:
            sd = {k: v.detach() for k, v in self.model.state_dict().items()}
        if "lm_head.weight" not in sd and "model.embed_tokens.weight" in sd:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        return sd

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: list[int]) -> list[float]:
        """Per-token logprobs of a fixed sequence under the current weights (for engine-sync checks)."""
        if self.forward is not None and len(token_ids) > 1:
            # always float32 here: this compares the weights the engine serves with the trainer's
            exact = ForwardEngine(self.model, precision="fp32")
            return exact.row_logprobs([list(token_ids)], [list(range(1, len(token_ids)))]).logprobs[0].tolist()
        ids = torch.tensor([token_ids], dtype=torch.long)
        logits = self.model(input_ids=ids).logits.float()
        return token_logprobs(logits, ids)[0, 1:].tolist()
