"""verl as the oracle: one-role graphs reduce exactly to GRPO, and broadcast equals verl's V1 multi-trajectory rule.

Rewards are dyadic (k/8) so that a group of equal rewards has an exactly representable mean in
verl's float32 arithmetic too; otherwise verl turns the rounding error of a zero-variance group
into a non-zero advantage (residual / 1e-6), where matpo-graph deliberately gives exactly 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from matpo_graph.core.credit import assign_credit, token_advantages
from matpo_graph.testing import credit_cases, graphs, rewards
from matpo_graph.rl.batch import pack_trees
from matpo_graph.rl.loss import LossConfig, policy_loss

from credit_helpers import one_torch_thread, ONE_ROLE

_threads = pytest.fixture(autouse=True, scope="module")(one_torch_thread)

pytestmark = pytest.mark.verl

ORACLE = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def verl():
    pytest.importorskip("verl")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.v1 import utils as v1_utils
        from verl.protocol import DataProto
        from verl.workers.config.actor import ActorConfig
    return {"core": core_algos, "v1": v1_utils, "DataProto": DataProto, "ActorConfig": ActorConfig}


def padded(rows: list[list[float]], dtype=torch.float32) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.zeros((len(rows), width), dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def verl_grpo(verl, case, norm: bool) -> torch.Tensor:
    roots = [t.root for t in case.trees]
    mask = padded([r.loss_mask for r in roots])
    scores = torch.zeros_like(mask)
    scores[:, 0] = torch.tensor([t.reward.total for t in case.trees])  # verl sums token rewards
    index = np.array([t.group_id for t in case.trees], dtype=object)
    grpo = verl["core"].compute_grpo_outcome_advantage
    adv, _ = grpo(scores, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=norm)
    return adv


one_role_cases = st.sampled_from([(2, 6), (1, 1), (1, 4)]).flatmap(
    lambda sizes: credit_cases(
        ONE_ROLE,
        group_size=sizes,
        reward=rewards(dyadic_only=True),
        plan={"single_member": "passthrough", "loss_agg": "token_mean", "dual_clip": 3.0},
    )
)


@ORACLE
@given(one_role_cases)
def test_verl_one_role_advantages_equal_grpo(verl, case) -> None:
    out, _ = assign_credit(case.trees, case.plan, warn=False)
    ours = padded([token_advantages(t.root) for t in out])
    theirs = verl_grpo(verl, case, norm=case.plan.normalization == "std")
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


# For one-role trees the paper's tree_token_mean is verl's seq-mean-token-mean.
VERL_AGG = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "tree_token_mean": "seq-mean-token-mean",
}


@ORACLE
@given(one_role_cases, st.sampled_from(sorted(VERL_AGG)), st.integers(0, 2**31 - 1))
def test_verl_one_role_loss_equals_vanilla_policy_loss(verl, case, agg: str, seed: int) -> None:
    out, _ = assign_credit(case.trees, case.plan, warn=False)
    batch = pack_trees(out, loss_agg=agg)
    assume(batch.num_trained_tokens > 0)
    gen = torch.Generator().manual_seed(seed)
    noise = torch.empty(batch.old_logprobs.shape).uniform_(-0.6, 0.6, generator=gen)
    new = (batch.old_logprobs + noise) * batch.loss_mask
    ours = policy_loss(new, batch, LossConfig.from_plan(case.plan.model_copy(update={"loss_agg": agg})))
    config = verl["ActorConfig"](strategy="fsdp", rollout_n=1, ppo_micro_batch_size=2, clip_ratio=0.2)
    theirs, metrics = verl["core"].compute_policy_loss_vanilla(
        old_log_prob=batch.old_logprobs,
        log_prob=new,
        advantages=batch.advantages,
        response_mask=batch.loss_mask,
        loss_agg_mode=VERL_AGG[agg],
        config=config,
    )
    torch.testing.assert_close(ours.loss, theirs, rtol=1e-5, atol=1e-6)
    assert ours.metrics["matpo/loss/clip_frac"] == pytest.approx(metrics["actor/pg_clipfrac"], abs=1e-6)
    assert ours.metrics["matpo/loss/ppo_kl"] == pytest.approx(metrics["actor/ppo_kl"], abs=1e-5)


@ORACLE
@given(
    st.sampled_from(["std", "mean_only"]).flatmap(
        lambda norm: credit_cases(
            graphs(),
            reward=rewards(dyadic_only=True),
            plan={"single_member": "passthrough", "normalization": norm},
        )
    )
)
def test_verl_broadcast_equals_multi_trajectory_advantage(verl, case) -> None:
    assume(all(t.root.num_trained_tokens > 0 for t in case.trees))  # verl reads the scalar off a root token
    roles = sorted({x.role for t in case.trees for x in t.trajectories})
    trained = case.plan.model_copy(update={"trained_roles": roles})
    out, _ = assign_credit(case.trees, trained, warn=False)
    rows, keys, uids, ours = [], [], [], []
    for ti, (tree, credited) in enumerate(zip(case.trees, out, strict=True)):
        n = len(tree.trajectories)
        # verl's V1 convention: descendants first, the root (the final session) has the highest index
        originals = tree.trajectories[1:] + tree.trajectories[:1]  # root last
        for j, (t, c) in enumerate(zip(originals, credited.trajectories[1:] + credited.trajectories[:1], strict=True)):
            rows.append(t)
            keys.append(f"{tree.group_id}_{ti}_{j if t.parent_id is not None else n - 1}")
            uids.append(tree.group_id)
            ours.append(token_advantages(c))
    mask = padded([t.loss_mask for t in rows])
    scores = torch.zeros_like(mask)
    scores[:, 0] = torch.tensor([case.trees[int(k.split("_")[1])].reward.total for k in keys])
    data = verl["DataProto"].from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    result = verl["v1"].compute_advantage_for_multi_trajectories(
        data,
        keys,
        adv_estimator=verl["core"].AdvantageEstimator.GRPO,
        norm_adv_by_std_in_grpo=case.plan.normalization == "std",
    )
    torch.testing.assert_close(padded(ours), result.batch["advantages"], rtol=1e-5, atol=1e-5)
