"""The policy-update half of an RL step: pack credited trees, PPO-clip loss, AdamW with a fixed step count."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from matpo_graph.core.program import CreditPlan
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.train.batch import pack_trees, plan_updates
from matpo_graph.train.config import TrainConfig
from matpo_graph.train.loss import LossConfig, policy_loss, token_logprobs

__all__ = ["PolicyOptimizer", "load_causal_lm"]


def load_causal_lm(model_dir: Path) -> Any:
    """A float32 HF causal LM (float32 keeps trainer and engine logprobs comparable on CPU)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.config.use_cache = False
    return model


class PolicyOptimizer:
    """Owns the trainable model and its AdamW state; `train_step` does exactly K optimizer steps."""

    def __init__(self, model_dir: Path, plan: CreditPlan, cfg: TrainConfig) -> None:
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

    def train_step(self, trees: list[RolloutTree]) -> dict[str, float]:
        """One RL step's update: `optimizer_steps_per_rl_step` AdamW steps over the whole augmented batch."""
        t0 = time.perf_counter()
        batch = pack_trees(trees, loss_agg=self.plan.loss_agg, pad_token_id=self.pad_id, trained_roles=self.plan.trained_roles)
        schedule = plan_updates(batch, num_minibatches=self.cfg.optimizer_steps_per_rl_step,
                                micro_batch_tokens=self.cfg.micro_batch_tokens)
        pack_s = time.perf_counter() - t0
        sums: dict[str, float] = {}
        token_total = 0.0
        loss_total = 0.0
        grad_norms: list[float] = []
        for minibatch in schedule:
            self.optimizer.zero_grad(set_to_none=True)
            for micro in minibatch:
                if len(micro) == 0 or micro.num_trained_tokens == 0:
                    continue
                out = self._micro_loss(micro)
                out.loss.backward()
                loss_total += float(out.loss.detach())
                n = float(out.num_tokens)
                token_total += n
                for k, v in out.metrics.items():
                    sums[k] = sums.get(k, 0.0) + v * n
            params = [p for p in self.model.parameters() if p.requires_grad]
            norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
            grad_norms.append(float(norm))
            self.optimizer.step()
        k = max(1, len(schedule))
        mean = {key: v / token_total for key, v in sums.items()} if token_total else {}
        return {
            "loss": loss_total / k,
            "clip_fraction": mean.get("matpo/loss/clip_frac", 0.0),
            "kl": mean.get("matpo/loss/approx_kl_k3", 0.0),
            "kl_ref": mean.get("matpo/loss/kl_ref", 0.0),
            "entropy": mean.get("matpo/loss/entropy", 0.0),
            "grad_norm": max(grad_norms) if grad_norms else 0.0,
            "optimizer_steps": float(len(schedule)),
            "trained_rows": float(len(batch)),
            "trained_tokens": float(batch.num_trained_tokens),
            "pack_seconds": pack_s,
        }

    def _micro_loss(self, micro: Any) -> Any:
        logits = self.model(input_ids=micro.input_ids, attention_mask=micro.attention_mask).logits.float()
        logprobs = token_logprobs(logits, micro.input_ids)
        ref = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logits = self.ref_model(input_ids=micro.input_ids, attention_mask=micro.attention_mask).logits.float()
                ref = token_logprobs(ref_logits, micro.input_ids)
        return policy_loss(logprobs, micro, self.loss_cfg, ref_logprobs=ref, logits=logits.detach())

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        """Full (merged, for LoRA) weights in HF names, lm_head included, for loading into the engine."""
        if self.lora:
            self.model.merge_adapter()
            try:
                base = self.model.get_base_model()
                sd = {k.replace(".base_layer", ""): v.detach().clone() for k, v in base.state_dict().items() if "lora_" not in k}
            finally:
                self.model.unmerge_adapter()
        else:
            sd = {k: v.detach() for k, v in self.model.state_dict().items()}
        if "lm_head.weight" not in sd and "model.embed_tokens.weight" in sd:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        return sd

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: list[int]) -> list[float]:
        """Per-token logprobs of a fixed sequence under the current weights (for engine-sync checks)."""
        ids = torch.tensor([token_ids], dtype=torch.long)
        logits = self.model(input_ids=ids).logits.float()
        return token_logprobs(logits, ids)[0, 1:].tolist()
