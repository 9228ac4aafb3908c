"""Batch packing and the update schedule: alignment, fixed step count, exact gradient accumulation."""

from __future__ import annotations

from dataclasses import replace
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from matpo_graph.core.credit import assign_credit
from matpo_graph.testing import credit_cases, graphs
from matpo_graph.rl.batch import (
    PackError,
    pack_trees,
    plan_updates,
    row_weights,
    split_microbatches,
    split_minibatches,
)
from matpo_graph.rl.loss import LossConfig, policy_loss, token_logprobs

from credit_helpers import one_torch_thread, plan, planner_tree, traj, tree
from credit_torch_helpers import AGGS, TinyLM

_threads = pytest.fixture(autouse=True, scope="module")(one_torch_thread)

BATCH_PROPS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def credited_pair(workers_a: int = 2, workers_b: int = 1):
    pair = [planner_tree("a", "q", 1.0, workers=workers_a), planner_tree("b", "q", 0.0, workers=workers_b)]
    trees, _ = assign_credit(pair, plan())
    return trees


def test_pack_rows_are_aligned_with_trajectories() -> None:
    trees = credited_pair()
    batch = pack_trees(trees)
    assert len(batch) == 5 and batch.traj_keys[0] == ("a", "0")
    assert batch.role_names == ("planner", "worker")
    assert batch.tree_index.tolist() == [0, 0, 0, 1, 1] and batch.depth.tolist() == [0, 1, 1, 0, 1]
    assert batch.role_index.tolist() == [0, 1, 1, 0, 1]
    worker = trees[0].trajectories[2]  # 7 tokens, padded to 7
    row = 2
    assert batch.input_ids[row].tolist() == worker.token_ids
    assert batch.loss_mask[row].tolist() == worker.loss_mask
    assert batch.advantages[row].tolist() == pytest.approx([worker.advantage * m for m in worker.loss_mask])
    assert batch.old_logprobs[row].tolist() == pytest.approx(worker.logprobs)
    planner_row = batch.attention_mask[0].tolist()
    assert planner_row == [1] * 6 + [0]  # padded on the right
    assert batch.input_ids[0, 6].item() == 0 and batch.loss_weights[0, 6].item() == 0.0


def test_pack_skips_untrained_and_empty_trajectories() -> None:
    trees, _ = assign_credit([planner_tree("a", "q", 1.0), planner_tree("b", "q", 0.0)], plan(strategy="root_only"))
    assert [k[1] for k in pack_trees(trees).traj_keys] == ["0", "0"]
    silent = tree("c", "q", 1.0, [traj("0", mask=[0, 0, 0])])
    out, _ = assign_credit([silent, planner_tree("d", "q", 0.0)], plan())
    assert all(k[0] == "d" for k in pack_trees(out).traj_keys)
    assert len(pack_trees([])) == 0


@pytest.mark.parametrize(
    ("trees", "kwargs", "match"),
    [
        ([tree("t", "q", 1.0, [traj("0", mask=[1, 0]).model_copy(update={"advantage": 1.0})])], {}, "first token"),
        (credited_pair(), {"role_names": ["planner"]}, "not in role_names"),
        (credited_pair(), {"loss_agg": "sum"}, "unknown loss aggregation"),
    ],
)
def test_pack_errors(trees, kwargs, match: str) -> None:
    with pytest.raises(PackError, match=match):
        pack_trees(trees, **kwargs)


def test_row_weights_definitions() -> None:
    assert row_weights([2, 2, 4], [0, 0, 1], "token_mean") == pytest.approx([1 / 8] * 3)
    assert row_weights([2, 2, 4], [0, 0, 1], "seq_mean_token_mean") == pytest.approx([1 / 6, 1 / 6, 1 / 12])
    assert row_weights([2, 2, 4], [0, 0, 1], "tree_token_mean") == pytest.approx([1 / 8, 1 / 8, 1 / 8])
    assert row_weights([1, 3, 4], [0, 0, 1], "tree_token_mean") == pytest.approx([1 / 8, 1 / 8, 1 / 8])
    assert row_weights([1, 1, 4], [0, 0, 1], "tree_token_mean") == pytest.approx([1 / 4, 1 / 4, 1 / 8])


@pytest.mark.parametrize("workers", [0, 1, 3, 8])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_minibatch_count_is_fixed_whatever_the_worker_count(workers: int, k: int) -> None:
    trees = credited_pair(workers_a=workers, workers_b=workers)
    batch = pack_trees(trees)
    minis = split_minibatches(batch, k)
    assert len(minis) == k and all(m.scale == k for m in minis)
    assert sorted(key for m in minis for key in m.traj_keys) == sorted(batch.traj_keys)  # a partition
    schedule = plan_updates(batch, num_minibatches=k, micro_batch_tokens=16)
    assert len(schedule) == k


def test_minibatches_balance_tokens() -> None:
    batch = pack_trees(credited_pair(8, 8))
    loads = [m.num_tokens for m in split_minibatches(batch, 3)]
    assert max(loads) - min(loads) <= max(batch.attention_mask.sum(dim=1).tolist())


def test_microbatches_respect_the_token_budget() -> None:
    batch = pack_trees(credited_pair(8, 8))
    micros = split_microbatches(batch, 16)
    for m in micros:
        assert len(m) == 1 or len(m) * m.input_ids.shape[1] <= 16
    assert sorted(k for m in micros for k in m.traj_keys) == sorted(batch.traj_keys)
    with pytest.raises(PackError):
        split_microbatches(batch, 0)
    with pytest.raises(PackError):
        split_minibatches(batch, 0)


def full_and_accumulated_grads(trees, agg: str, k: int, budget: int):
    batch = pack_trees(trees, loss_agg=agg, dtype=torch.float64)
    model = TinyLM()
    cfg = LossConfig(loss_agg=agg, dual_clip=3.0)
    shift = torch.linspace(-0.4, 0.4, batch.input_ids.shape[1], dtype=torch.float64)

    def backward(b, scale: float = 1.0) -> None:
        logp = token_logprobs(model(b.input_ids), b.input_ids)
        off_policy = replace(b, old_logprobs=(logp.detach() + shift[: b.input_ids.shape[1]]) * b.loss_mask)
        (policy_loss(logp, off_policy, cfg).loss * scale).backward()

    model.zero_grad()
    backward(batch)
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    schedule = plan_updates(batch, num_minibatches=k, micro_batch_tokens=budget)
    for minibatch in schedule:
        for micro in minibatch:
            backward(micro, 1.0 / k)  # the K steps' gradients average to the full-batch gradient
    acc = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    return full, acc, schedule


@BATCH_PROPS
@given(credit_cases(graphs()), st.sampled_from(AGGS), st.integers(1, 3), st.integers(4, 64))
def test_property_accumulated_gradient_equals_full_batch_gradient(case, agg: str, k: int, budget: int) -> None:
    trees, _ = assign_credit(case.trees, case.plan, warn=False)
    assume(pack_trees(trees).num_trained_tokens > 0)
    full, acc, schedule = full_and_accumulated_grads(trees, agg, k, budget)
    assert len(schedule) == k
    for a, b in zip(full, acc, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)


def test_one_minibatch_of_micro_batches_gives_the_full_batch_sgd_step() -> None:
    trees = credited_pair(5, 2)
    full, acc, schedule = full_and_accumulated_grads(trees, "tree_token_mean", 1, 8)
    assert len(schedule) == 1 and len(schedule[0]) > 1  # several micro-batches, one optimizer step
    for a, b in zip(full, acc, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


def test_optimizer_steps_per_rl_step_do_not_depend_on_spawned_workers() -> None:
    steps = {}
    for workers in (0, 2, 9):
        trees = credited_pair(workers, workers)
        model = TinyLM()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        count = 0
        for minibatch in plan_updates(pack_trees(trees, dtype=torch.float64), num_minibatches=2, micro_batch_tokens=12):
            opt.zero_grad()
            for micro in minibatch:
                logp = token_logprobs(model(micro.input_ids), micro.input_ids)
                policy_loss(logp, micro, LossConfig()).loss.backward()
            opt.step()
            count += 1
        steps[workers] = count
    assert steps == {0: 2, 2: 2, 9: 2}
