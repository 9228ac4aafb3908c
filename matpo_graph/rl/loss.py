"""The MATPO policy loss: token-level PPO clip over the augmented batch (roots and descendants).

``loss = scale * sum(weight * (clipped_pg + kl_coef * kl))`` where the per-token weights come
from :mod:`matpo_graph.rl.batch` and encode the aggregation (``tree_token_mean``, the paper's
default; ``token_mean``, verl's default and the reference code's; ``seq_mean_token_mean``). The
clipped term is verl's ``compute_policy_loss_vanilla`` token for token (log-ratio clamped to
[-20, 20]; dual clip optional here, always on in verl with c = 3).

Tokens off the loss mask are replaced by constants before any arithmetic, so they receive exactly
zero gradient even when their logprobs are inf or NaN.

With per-role policies each policy's loss is this function on its own rows
(:func:`matpo_graph.rl.batch.split_by_policy`): the weights stay the whole step's, so the
policies' losses sum to the shared loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from matpo_graph.core.program import CreditPlan
from matpo_graph.rl.batch import LossAgg, PackedBatch

__all__ = [
    "LossConfig",
    "LossOutput",
    "kl_penalty",
    "policy_loss",
    "ppo_token_loss",
    "token_entropy",
    "token_logprobs",
]


@dataclass(frozen=True)
class LossConfig:
    """PPO and KL settings; :meth:`from_plan` reads them from a credit plan."""

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    dual_clip: float | None = None
    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k3"] = "k3"
    loss_agg: LossAgg = "tree_token_mean"

    def __post_init__(self) -> None:
        if not 0.0 < self.clip_ratio_low < 1.0:
            raise ValueError(f"clip_ratio_low must be in (0, 1), got {self.clip_ratio_low}")
        if self.clip_ratio_high <= 0.0:
            raise ValueError(f"clip_ratio_high must be > 0, got {self.clip_ratio_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (it bounds the loss of negative advantages), got {self.dual_clip}")
        if self.kl_estimator not in ("k1", "k3"):
            raise ValueError(f"kl_estimator must be k1 or k3, got {self.kl_estimator!r}")

    @classmethod
    def from_plan(cls, plan: CreditPlan) -> "LossConfig":
        return cls(
            clip_ratio_low=plan.clip_ratio_low,
            clip_ratio_high=plan.clip_ratio_high,
            dual_clip=plan.dual_clip,
            kl_coef=plan.kl_coef,
            kl_estimator=plan.kl_estimator,
            loss_agg=plan.loss_agg,
        )


@dataclass
class LossOutput:
    """The scalar to backpropagate and detached metrics (namespaced ``matpo/loss/...``)."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    num_tokens: int = 0


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Logprob of each token of `input_ids` under a causal LM's `logits` ([N, L, V]); position 0 gets 0.

    The logits at position t - 1 predict token t, so the result is aligned with `input_ids` and
    the batch's ``loss_mask``.
    """
    out = torch.zeros(input_ids.shape, dtype=logits.dtype, device=logits.device)
    if input_ids.shape[1] < 2:
        return out
    shifted = logits[:, :-1, :]
    picked = torch.gather(shifted, -1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out[:, 1:] = picked - torch.logsumexp(shifted, dim=-1)
    return out


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the distribution that predicted each token (aligned like :func:`token_logprobs`)."""
    out = torch.zeros(logits.shape[:2], dtype=logits.dtype, device=logits.device)
    if logits.shape[1] < 2:
        return out
    logp = torch.log_softmax(logits[:, :-1, :].detach(), dim=-1)
    out[:, 1:] = -(logp.exp() * logp).sum(dim=-1)
    return out


def ppo_token_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate loss, with flags for clipped and dual-clipped tokens."""
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    clipped = torch.maximum(loss1, loss2)
    clipped_flag = loss2 > loss1
    if dual_clip is None:
        return clipped, clipped_flag, torch.zeros_like(clipped_flag)
    loss3 = -advantages * dual_clip
    negative = advantages < 0
    lower_flag = (clipped > loss3) & negative
    return torch.where(negative, torch.minimum(loss3, clipped), clipped), clipped_flag, lower_flag


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: Literal["k1", "k3"]) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate: k1 = log(pi/ref); k3 = exp(ref - pi) - (ref - pi) - 1, clamped to [-10, 10]."""
    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k3":
        d = torch.clamp(ref_logprobs - logprobs, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(d) - d - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator {estimator!r}: expected k1 or k3")


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    count = mask.sum()
    return float((values * mask).sum() / count) if count > 0 else 0.0


def policy_loss(
    logprobs: torch.Tensor,
    batch: PackedBatch,
    config: LossConfig,
    *,
    ref_logprobs: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
) -> LossOutput:
    """The batch's share of the RL step's loss.

    Args:
        logprobs: current-policy logprobs aligned with ``batch.input_ids`` ([N, L]); see :func:`token_logprobs`.
        batch: a packed batch, mini-batch or micro-batch.
        config: PPO clip and KL settings. The aggregation is already in ``batch.loss_weights``;
            a config naming a different one is refused rather than silently ignored.
        ref_logprobs: reference-policy logprobs, needed when ``config.kl_coef > 0``.
        logits: the model's logits, only to report the entropy.

    Returns:
        The loss (``batch.scale * sum(weights * token_loss)``) and metrics over this batch's trained tokens.

    Raises:
        ValueError: shape mismatch, a missing reference policy, or an aggregation mismatch.
    """
    if logprobs.shape != batch.input_ids.shape:
        raise ValueError(f"logprobs shape {tuple(logprobs.shape)} != batch shape {tuple(batch.input_ids.shape)}")
    if config.loss_agg != batch.loss_agg:
        raise ValueError(f"the batch was packed for {batch.loss_agg!r} but the loss config says {config.loss_agg!r}")
    if config.kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs from the reference policy")
    on = batch.loss_mask > 0
    mask = batch.loss_mask.to(logprobs.dtype)
    weights = batch.loss_weights.to(logprobs.dtype)
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    lp = torch.where(on, logprobs, zero)
    old = torch.where(on, batch.old_logprobs.to(logprobs.dtype), zero)
    adv = torch.where(on, batch.advantages.to(logprobs.dtype), zero)
    pg, clip_flag, lower_flag = ppo_token_loss(
        lp,
        old,
        adv,
        clip_ratio_low=config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio_high,
        dual_clip=config.dual_clip,
    )
    pg_loss = batch.scale * (torch.where(on, pg, zero) * weights).sum()
    loss = pg_loss
    metrics: dict[str, float] = {}
    if ref_logprobs is not None:
        ref = torch.where(on, ref_logprobs.to(logprobs.dtype), zero)
        kl = torch.where(on, kl_penalty(lp, ref, config.kl_estimator), zero)
        kl_loss = batch.scale * (kl * weights).sum()
        loss = loss + config.kl_coef * kl_loss
        metrics["matpo/loss/kl_ref"] = float(kl_loss.detach())
    with torch.no_grad():
        diff = old - lp.detach()
        metrics.update(
            {
                "matpo/loss/pg_loss": float(pg_loss.detach()),
                "matpo/loss/clip_frac": _masked_mean(clip_flag.to(mask.dtype), mask),
                "matpo/loss/clip_frac_lower": _masked_mean(lower_flag.to(mask.dtype), mask),
                "matpo/loss/ppo_kl": _masked_mean(diff, mask),
                "matpo/loss/approx_kl_k3": _masked_mean(torch.exp(-diff.clamp(-20, 20)) + diff - 1.0, mask),
                "matpo/loss/tokens": float(mask.sum()),
            }
        )
        if logits is not None:
            metrics["matpo/loss/entropy"] = _masked_mean(token_entropy(logits).to(mask.dtype), mask)
    return LossOutput(loss=loss, metrics=metrics, num_tokens=int(mask.sum().item()))
