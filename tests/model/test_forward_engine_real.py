"""The forward engine on real trees with the real SmolLM2: loss and gradient against the padded float32
reference, and a first mini-batch ratio of exactly 1 when the trainer recomputes the old logprobs.

Tolerances (stated in docs/performance.md): float32 engine, loss within 1e-5 and gradient within 1e-3 (relative
norm of the difference); bf16 engine (the trained layers under bf16 autocast, as the update runs it), loss
within 2e-3 and gradient within 0.35 with cosine >= 0.95. The expert's trees differ from run to run (their URLs
carry the port of a freshly started embedded web), and so does bf16's rounding. The old logprobs of the
rewarded trees are lowered by 0.1 so the loss is not zero by construction (-0.0405); on those trees fp32 matches
within 7e-8 (loss) and < 1e-4 (gradient), bf16 within 2.2e-4 and 0.201 (cosine 0.990) on one run's trees and
0.246 on a clean clone's. A wrong mask, advantage or logprob moves the gradient by order 1, far outside these,
and the gradients of two halves of one real step differ by 1.0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.engine, pytest.mark.filterwarnings("ignore::UserWarning")]

GRAPH = Path(__file__).parents[2] / "graphs" / "deep_search.yaml"


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import load_program
    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.model.loading import load_causal_lm
    from matpo_graph.bench.step_fixture import demo_step, engine_logprobs, with_logprobs

    program, plan = load_program(GRAPH)
    model_dir = resolve_model("smollm2-135m-instruct")
    trees = demo_step(program, plan, model_dir=model_dir, questions=3, group_size=3)
    return plan, model_dir, with_logprobs(trees, engine_logprobs(load_causal_lm(model_dir)))


def optimizer(model_dir, plan, **cfg):  # type: ignore[no-untyped-def]
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.update import PolicyOptimizer

    return PolicyOptimizer(model_dir, plan, TrainConfig(micro_batch_tokens=4096, **cfg), role_temperatures={})


@pytest.fixture(scope="module")
def shifted(setup):  # type: ignore[no-untyped-def]
    """The step with the old logprobs of every other tree (the rewarded ones) lowered by 0.1: a ratio of 1.105,
    inside the clip. With the sampling logprobs as they are the ratio is 1 and group-normalised advantages
    cancel, so the loss is 0 up to rounding and could not tell a right loss from a wrong one."""
    plan, model_dir, trees = setup
    out = []
    for i, tree in enumerate(trees):
        drop = 0.1 if i % 2 == 0 else 0.0
        trajs = [t.model_copy(update={"logprobs": [lp - drop if m else lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True)]})
                 for t in tree.trajectories]
        out.append(tree.model_copy(update={"trajectories": trajs}))
    return plan, model_dir, out


@pytest.fixture(scope="module")
def reference(shifted):  # type: ignore[no-untyped-def]
    plan, model_dir, trees = shifted
    ref = optimizer(model_dir, plan, precision="fp32", old_logprobs="engine")
    ref.use_padded_reference()
    assert ref.forward is None
    return ref.loss_and_gradients(trees)


@pytest.mark.parametrize("precision, loss_tol, grad_tol, min_cos", [("fp32", 1e-5, 1e-3, 0.99999), ("bf16", 2e-3, 0.35, 0.95)])
def test_engine_loss_and_gradient_match_the_float32_reference(shifted, reference, precision, loss_tol, grad_tol, min_cos):
    plan, model_dir, trees = shifted
    want_loss, want = reference
    opt = optimizer(model_dir, plan, precision=precision, old_logprobs="engine")
    assert opt.forward is not None and opt.forward.precision == precision and opt.forward.cut == 20
    loss, got = opt.loss_and_gradients(trees)
    assert abs(want_loss) > 1e-2
    assert abs(loss - want_loss) <= loss_tol
    num = sum(float((a - b).pow(2).sum()) for a, b in zip(got, want, strict=True)) ** 0.5
    den = sum(float(b.pow(2).sum()) for b in want) ** 0.5
    cos = sum(float((a * b).sum()) for a, b in zip(got, want, strict=True)) / (den * sum(float(a.pow(2).sum()) for a in got) ** 0.5)
    assert den > 0 and num / den <= grad_tol and cos >= min_cos


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_first_minibatch_ratio_is_one_when_the_trainer_recomputes_old_logprobs(setup, precision):
    from matpo_graph.rl.batch import pack_trees, split_minibatches

    plan, model_dir, trees = setup
    trees = trees[:3]  # the first group (mixed rewards): the ratio is a per-row property, and a third of the time
    opt = optimizer(model_dir, plan, precision=precision, optimizer_steps_per_rl_step=2)
    # a separate no-grad pass, then the update's forward with gradients: same values
    batch = pack_trees(trees, loss_agg=plan.loss_agg, pad_token_id=opt.pad_id, trained_roles=plan.trained_roles)
    first = split_minibatches(batch, 2)[0]
    recomputed = opt.recompute_old_logprobs(first)
    worst = 0.0
    for micro in opt.micro_chunks(recomputed):
        lp, _ = opt.engine_logprobs(micro)
        on = micro.loss_mask > 0
        ratio = torch.exp(lp.detach() - micro.old_logprobs)[on]
        worst = max(worst, float((ratio - 1).abs().max()))
    assert worst <= 1e-6
    engine_gap = float((recomputed.old_logprobs - first.old_logprobs).abs().max())
    # the trees' logprobs come from a float32 engine: equal to the float32 trainer's, not to the bf16 one's
    assert (engine_gap > 0) if precision == "bf16" else (engine_gap < 1e-4)
    metrics = opt.train_step(trees)
    assert metrics["matpo/first_minibatch_ratio_max_dev"] <= 1e-6
    assert metrics["optimizer_steps"] == 2 and metrics["timing_s/old_log_prob"] > 0
    if precision == "bf16":
        assert metrics["matpo/engine_trainer_logprob_gap"] > 0
    else:
        assert metrics["matpo/engine_trainer_logprob_gap_max"] < 1e-4
