"""The MATPO loss: masking, aggregation, gradients on a tiny causal LM, padding and permutation."""

from __future__ import annotations

from dataclasses import replace
import math
import random

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from matpo_graph.core.credit import assign_credit
from matpo_graph.testing import credit_cases, graphs
from matpo_graph.rl.batch import PackedBatch, pack_trees
from matpo_graph.rl.loss import LossConfig, kl_penalty, policy_loss, ppo_token_loss, token_entropy, token_logprobs

from credit_helpers import one_torch_thread, planner_tree, plan
from credit_torch_helpers import AGGS, TinyLM

_threads = pytest.fixture(autouse=True, scope="module")(one_torch_thread)

LOSS_PROPS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
MODEL_PROPS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def credited(case, agg: str):
    p = case.plan.model_copy(update={"loss_agg": agg})
    out, _ = assign_credit(case.trees, p, warn=False)
    return out, p


def grads(model: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, list(model.parameters()), allow_unused=False))


def row_logprob_sum(model: TinyLM, ids: list[int], mask: list[int]) -> torch.Tensor:
    """sum of log p(token t | tokens < t) over the trained tokens of ONE unpadded trajectory."""
    x = torch.tensor([ids])
    logp = torch.log_softmax(model(x)[0, :-1], dim=-1).gather(-1, x[0, 1:].unsqueeze(-1)).squeeze(-1)
    return (logp * torch.tensor(mask[1:], dtype=logp.dtype)).sum()


def aggregation_coefficients(trees, agg: str) -> dict[tuple[str, str], float]:
    """Weight of each trained token of each trajectory, straight from the definitions."""
    rows = [(tree, t) for tree in trees for t in tree.trajectories if t.advantage is not None and t.num_trained_tokens]
    if agg == "token_mean":
        total = sum(t.num_trained_tokens for _, t in rows)
        return {(tree.tree_id, t.traj_id): 1 / total for tree, t in rows}
    if agg == "seq_mean_token_mean":
        return {(tree.tree_id, t.traj_id): 1 / (len(rows) * t.num_trained_tokens) for tree, t in rows}
    per_tree: dict[str, int] = {}
    for tree, t in rows:
        per_tree[tree.tree_id] = per_tree.get(tree.tree_id, 0) + t.num_trained_tokens
    return {(tree.tree_id, t.traj_id): 1 / (len(per_tree) * per_tree[tree.tree_id]) for tree, t in rows}


@MODEL_PROPS
@given(credit_cases(graphs(), num_groups=(1, 2), group_size=(2, 3)), st.sampled_from(AGGS))
def test_property_gradient_is_weighted_sum_of_trajectory_policy_gradients(case, agg: str) -> None:
    trees, p = credited(case, agg)
    batch = pack_trees(trees, loss_agg=agg, dtype=torch.float64)
    assume(batch.num_trained_tokens > 0)
    model = TinyLM()
    logp = token_logprobs(model(batch.input_ids), batch.input_ids)
    on_policy = replace(batch, old_logprobs=logp.detach())  # ratio 1: no clipping
    got = grads(model, policy_loss(logp, on_policy, LossConfig(loss_agg=agg)).loss)
    coeff = aggregation_coefficients(trees, agg)
    expected = [torch.zeros_like(g) for g in got]
    for tree in trees:
        for t in tree.trajectories:
            if (tree.tree_id, t.traj_id) not in coeff:
                continue
            g = grads(model, row_logprob_sum(model, t.token_ids, t.loss_mask))
            for e, gi in zip(expected, g, strict=True):
                e -= coeff[(tree.tree_id, t.traj_id)] * t.advantage * gi  # policy gradient: -c * A * grad log pi
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@LOSS_PROPS
@given(credit_cases(graphs()), st.sampled_from(AGGS), st.integers(0, 2**31 - 1))
def test_property_masked_tokens_get_exactly_zero_gradient(case, agg: str, seed: int) -> None:
    trees, _ = credited(case, agg)
    batch = pack_trees(trees, loss_agg=agg, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    raw = batch.old_logprobs + torch.empty(batch.old_logprobs.shape, dtype=torch.float64).uniform_(-1, 1, generator=gen)
    raw = torch.where(batch.loss_mask > 0, raw, torch.full_like(raw, math.nan))  # garbage off the mask
    raw[:, :1] = -math.inf
    logp = raw.clone().requires_grad_(True)
    out = policy_loss(logp, batch, LossConfig(loss_agg=agg, dual_clip=3.0))
    assert torch.isfinite(out.loss)
    (g,) = torch.autograd.grad(out.loss, [logp]) if logp.numel() else (torch.zeros(0),)
    if logp.numel():
        assert torch.all(g[batch.loss_mask == 0] == 0.0)
        assert torch.isfinite(g).all()


def deterministic_logprobs(batch: PackedBatch) -> torch.Tensor:
    """New logprobs that depend only on (tree, trajectory, position), so they follow rows when permuted."""
    out = torch.zeros(batch.old_logprobs.shape, dtype=torch.float64)
    for r, key in enumerate(batch.traj_keys):
        rng = random.Random(f"{key[0]}/{key[1]}")
        for c in range(out.shape[1]):
            out[r, c] = batch.old_logprobs[r, c] + rng.uniform(-0.5, 0.5)
    return out * batch.loss_mask


@LOSS_PROPS
@given(credit_cases(graphs()), st.sampled_from(AGGS), st.randoms(use_true_random=False))
def test_property_permuting_trajectories_keeps_advantages_and_loss(case, agg: str, rnd) -> None:
    trees, p = credited(case, agg)
    shuffled = [
        t.model_copy(update={"trajectories": t.trajectories[:1] + rnd.sample(t.descendants, len(t.descendants))})
        for t in case.trees
    ]
    rnd.shuffle(shuffled)
    trees2, _ = assign_credit(shuffled, p, warn=False)
    adv1 = {(t.tree_id, x.traj_id): x.advantage for t in trees for x in t.trajectories}
    adv2 = {(t.tree_id, x.traj_id): x.advantage for t in trees2 for x in t.trajectories}
    assert adv1 == adv2
    b1, b2 = pack_trees(trees, loss_agg=agg, dtype=torch.float64), pack_trees(trees2, loss_agg=agg, dtype=torch.float64)
    cfg = LossConfig(loss_agg=agg, dual_clip=3.0)
    l1 = policy_loss(deterministic_logprobs(b1), b1, cfg).loss
    l2 = policy_loss(deterministic_logprobs(b2), b2, cfg).loss
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-12)


def pad_more(batch: PackedBatch, rows: int, cols: int) -> PackedBatch:
    """Append `rows` all-padding rows and `cols` padding columns."""
    def grow(x: torch.Tensor, fill: float = 0) -> torch.Tensor:
        wide = torch.cat([x, torch.full((x.shape[0], cols), fill, dtype=x.dtype)], dim=1)
        return torch.cat([wide, torch.full((rows, wide.shape[1]), fill, dtype=x.dtype)], dim=0)

    extra = lambda x: torch.cat([x, torch.zeros(rows, dtype=x.dtype)])  # noqa: E731
    return replace(
        batch,
        **{
            **{
                k: grow(getattr(batch, k))
                for k in ("attention_mask", "loss_mask", "old_logprobs", "advantages", "loss_weights")
            },
            "input_ids": grow(batch.input_ids, 7),
            "tree_index": extra(batch.tree_index),
            "role_index": extra(batch.role_index),
            "depth": extra(batch.depth),
            "traj_keys": batch.traj_keys + tuple(("pad", str(i)) for i in range(rows)),
        }
    )


@MODEL_PROPS
@given(credit_cases(graphs()), st.sampled_from(AGGS), st.integers(1, 3), st.integers(0, 4))
def test_property_padding_rows_and_columns_change_nothing(case, agg: str, rows: int, cols: int) -> None:
    trees, _ = credited(case, agg)
    batch = pack_trees(trees, loss_agg=agg, dtype=torch.float64)
    assume(batch.num_trained_tokens > 0)
    padded = pad_more(batch, rows, cols)
    model = TinyLM()
    cfg = LossConfig(loss_agg=agg, dual_clip=3.0)

    def loss_of(b: PackedBatch) -> torch.Tensor:
        logp = token_logprobs(model(b.input_ids), b.input_ids)
        return policy_loss(logp, b, cfg).loss

    l1, l2 = loss_of(batch), loss_of(padded)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-14)
    for a, b in zip(grads(model, loss_of(batch)), grads(model, loss_of(padded)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


# ----------------------------------------------------------------------------- unit cases


def test_tree_token_mean_weights_trees_equally_whatever_their_worker_count() -> None:
    trees, _ = assign_credit([planner_tree("a", "q", 1.0, workers=0), planner_tree("b", "q", 0.0, workers=2)], plan())
    batch = pack_trees(trees, loss_agg="tree_token_mean")
    per_tree = [float(batch.loss_weights[batch.tree_index == i].sum()) for i in range(2)]
    assert per_tree == pytest.approx([0.5, 0.5])
    token = pack_trees(trees, loss_agg="token_mean")
    assert float(token.loss_weights.sum()) == pytest.approx(1.0)
    assert float(token.loss_weights[token.tree_index == 0].sum()) == pytest.approx(2 / 8)  # 2 of 8 tokens


def test_ppo_token_loss_clips_and_dual_clips() -> None:
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 0.5, 1.5, 10.0]))
    loss, clipped, lower = ppo_token_loss(new, old, adv, clip_ratio_low=0.2, clip_ratio_high=0.2, dual_clip=3.0)
    # clipped high; unclipped; max(-A r, -A clip(r)); dual clip caps the last at 3
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 1.5, 3.0])
    assert clipped.tolist() == [True, False, False, False]  # verl's clip fraction: the clipped term was the larger
    assert lower.tolist() == [False, False, False, True]
    no_dual, _, _ = ppo_token_loss(new, old, adv, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert no_dual[3].item() == pytest.approx(10.0)


def test_kl_estimators() -> None:
    lp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    assert kl_penalty(lp, ref, "k1").tolist() == pytest.approx([0.5, -1.0])
    d = ref - lp
    assert kl_penalty(lp, ref, "k3").tolist() == pytest.approx((torch.exp(d) - d - 1).tolist())
    assert (kl_penalty(lp, ref, "k3") >= 0).all()


def test_kl_term_adds_to_loss_and_needs_reference() -> None:
    trees, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan())
    batch = pack_trees(trees)
    logp = batch.old_logprobs.clone()
    base = policy_loss(logp, batch, LossConfig()).loss
    ref = batch.old_logprobs - 0.3 * batch.loss_mask
    with_kl = policy_loss(logp, batch, LossConfig(kl_coef=0.5, kl_estimator="k1"), ref_logprobs=ref)
    assert float(with_kl.loss - base) == pytest.approx(0.5 * 0.3, rel=1e-5)  # weights sum to 1
    assert with_kl.metrics["matpo/loss/kl_ref"] == pytest.approx(0.3, rel=1e-5)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        policy_loss(logp, batch, LossConfig(kl_coef=0.5))


def test_policy_loss_refuses_mismatched_aggregation_and_shapes() -> None:
    trees, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan())
    batch = pack_trees(trees, loss_agg="token_mean")
    with pytest.raises(ValueError, match="packed for 'token_mean'"):
        policy_loss(batch.old_logprobs, batch, LossConfig(loss_agg="tree_token_mean"))
    with pytest.raises(ValueError, match="shape"):
        policy_loss(batch.old_logprobs[:, :-1], batch, LossConfig(loss_agg="token_mean"))


@pytest.mark.parametrize(
    "kwargs", [{"clip_ratio_low": 1.0}, {"clip_ratio_high": 0.0}, {"dual_clip": 1.0}, {"kl_estimator": "k2"}]
)
def test_loss_config_rejects_bad_values(kwargs) -> None:
    with pytest.raises(ValueError):
        LossConfig(**kwargs)


def test_token_logprobs_and_entropy_are_shifted() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    lp = token_logprobs(logits, ids)
    assert torch.all(lp[:, 0] == 0)
    manual = torch.log_softmax(logits[1, 2], dim=-1)[ids[1, 3]]
    assert lp[1, 3].item() == pytest.approx(manual.item(), rel=1e-6)
    ent = token_entropy(logits)
    p = torch.softmax(logits[0, 1], dim=-1)
    assert ent[0, 2].item() == pytest.approx(float(-(p * p.log()).sum()), rel=1e-5)


def test_metrics_report_clip_fraction_kl_and_entropy() -> None:
    trees, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan())
    batch = pack_trees(trees)
    logits = torch.randn(*batch.input_ids.shape, 32)
    out = policy_loss(batch.old_logprobs + 1.0 * batch.loss_mask, batch, LossConfig(), logits=logits)
    # ratio e > 1.2 everywhere: clipped where the advantage is positive (tree a: half of the tokens)
    assert out.metrics["matpo/loss/clip_frac"] == 0.5
    assert out.metrics["matpo/loss/ppo_kl"] == pytest.approx(-1.0)
    assert out.metrics["matpo/loss/approx_kl_k3"] == pytest.approx(math.exp(1) - 1 - 1, rel=1e-5)
    assert 0 < out.metrics["matpo/loss/entropy"] <= math.log(32) + 1e-6
    assert out.num_tokens == batch.num_trained_tokens
