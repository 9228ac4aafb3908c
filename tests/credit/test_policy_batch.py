"""Per-role policies in the batch and the loss: weights over the whole tree first, then rows by policy.

The definition tested here (see :mod:`matpo_graph.rl.batch`): the aggregation weights are exactly
the shared policy's; a policy's loss is the sum over its own rows; the per-policy losses sum to the
shared loss; and each policy's gradient is the gradient of that one loss with respect to its parameters.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from matpo_graph.core.credit import assign_credit
from matpo_graph.core.spec import Graph
from matpo_graph.testing import check_policy_binding, credit_cases, graphs
from matpo_graph.testing.shapes import GraphShape
from matpo_graph.rl.batch import PackedBatch, pack_trees, split_by_policy, split_minibatches
from matpo_graph.rl.loss import LossConfig, policy_loss, token_logprobs

from credit_helpers import PLANNER_WORKER, one_torch_thread, plan, traj, tree
from credit_torch_helpers import AGGS, TinyLM

_threads = pytest.fixture(autouse=True, scope="module")(one_torch_thread)

PROPS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def _credited(case, agg: str):
    p = case.plan.model_copy(update={"loss_agg": agg})
    out, _ = assign_credit(case.trees, p, warn=False)
    return out, p


class PolicyLMs(torch.nn.Module):
    """One tiny LM per policy: a row's logprobs depend only on its own policy's parameters."""

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__()
        self.names = names
        self.lms = torch.nn.ModuleList(TinyLM(seed=i) for i in range(len(names)))

    def logprobs(self, batch: PackedBatch) -> torch.Tensor:
        rows = []
        for r in range(len(batch)):
            lm = self.lms[self.names.index(batch.policy_names[int(batch.policy_index[r])])]
            ids = batch.input_ids[r : r + 1]
            rows.append(token_logprobs(lm(ids), ids)[0])
        return torch.stack(rows) if rows else torch.zeros(batch.input_ids.shape, dtype=torch.float64)


def _loss(model: PolicyLMs, batch: PackedBatch, agg: str) -> torch.Tensor:
    return policy_loss(model.logprobs(batch), batch, LossConfig(loss_agg=agg, dual_clip=3.0)).loss


@PROPS
@given(credit_cases(graphs(policies=True), num_groups=(1, 2), group_size=(2, 3)), st.sampled_from(AGGS))
def test_policy_batch_partition_sums_to_shared_loss_and_gradients(case, agg: str) -> None:
    check_policy_binding(case.trees, case.plan)
    trees, p = _credited(case, agg)
    batch = pack_trees(trees, loss_agg=agg, dtype=torch.float64, trained_roles=p.trained_roles)
    assume(batch.num_trained_tokens > 0)
    parts = split_by_policy(batch)
    # a partition of the rows, each row under the policy that generated it
    keys = [k for part in parts.values() for k in part.traj_keys]
    assert sorted(keys) == sorted(batch.traj_keys) and len(set(keys)) == len(keys)
    policy = {(t.tree_id, x.traj_id): x.policy for t in trees for x in t.trajectories}
    assert all(policy[k] == name for name, part in parts.items() for k in part.traj_keys)
    # the weights are the whole step's, untouched by the split
    for part in parts.values():
        for r, key in enumerate(part.traj_keys):
            full = batch.traj_keys.index(key)
            width = part.loss_weights.shape[1]
            assert torch.equal(part.loss_weights[r], batch.loss_weights[full, :width])
    model = PolicyLMs(batch.policy_names)
    full = _loss(model, batch, agg)
    torch.testing.assert_close(sum(_loss(model, part, agg) for part in parts.values()), full, rtol=1e-12, atol=1e-14)
    # each policy's gradient: of its own part alone == of the shared loss w.r.t. its parameters
    full_grads = torch.autograd.grad(full, list(model.parameters()), allow_unused=True)
    by_param = dict(zip([id(q) for q in model.parameters()], full_grads, strict=True))
    for name, part in parts.items():
        lm = model.lms[batch.policy_names.index(name)]
        own = torch.autograd.grad(_loss(model, part, agg), list(lm.parameters()))
        for q, g in zip(lm.parameters(), own, strict=True):
            torch.testing.assert_close(g, by_param[id(q)], rtol=1e-10, atol=1e-13)
    # a policy with no rows in the step gets no gradient from it
    for i, name in enumerate(batch.policy_names):
        if name not in parts:
            assert all(by_param[id(q)] is None for q in model.lms[i].parameters())


def _with_declared_shared(graph: Graph) -> Graph:
    data = graph.to_yaml_dict()
    data["policies"] = {"base": {"kind": "shared"}}
    for role in data["roles"].values():
        role.pop("policy", None)
    return Graph.model_validate(data)


@PROPS
@given(st.data(), graphs(), st.sampled_from(AGGS))
def test_policy_batch_all_shared_graph_is_todays_batch_and_loss(data, graph: Graph, agg: str) -> None:
    """Binding every role to a declared shared policy packs the same tensors and the same loss as no binding."""
    named = _with_declared_shared(graph)
    case = data.draw(credit_cases(graph, num_groups=(1, 2), group_size=(2, 3)))
    assert {t.policy for tr in case.trees for t in tr.trajectories} == {"shared"}
    renamed = [tr.model_copy(update={"trajectories": [t.model_copy(update={"policy": "base"}) for t in tr.trajectories]})
               for tr in case.trees]
    p_named = case.plan.model_copy(update={"loss_agg": agg, "role_policies": GraphShape.from_graph(named).policies})
    check_policy_binding(renamed, p_named)
    today, _ = _credited(case, agg)
    bound, _ = assign_credit(renamed, p_named, warn=False)
    a = pack_trees(today, loss_agg=agg, dtype=torch.float64)
    b = pack_trees(bound, loss_agg=agg, dtype=torch.float64)
    assume(a.num_trained_tokens > 0)
    for name in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "advantages", "loss_weights",
                 "tree_index", "role_index", "depth", "policy_index"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.traj_keys == b.traj_keys and a.policy_names == ("shared",) and b.policy_names == ("base",)
    (only,) = split_by_policy(b).values()
    assert only.traj_keys == b.traj_keys and torch.equal(only.loss_weights, b.loss_weights)
    lm = TinyLM()
    la = policy_loss(token_logprobs(lm(a.input_ids), a.input_ids), a, LossConfig(loss_agg=agg)).loss
    lb = policy_loss(token_logprobs(lm(only.input_ids), only.input_ids), only, LossConfig(loss_agg=agg)).loss
    assert torch.equal(la, lb)


def _two_policy_step() -> list:
    """Tree t1: planner (policy A, 2 tokens) + worker (policy B, 3 tokens); tree t2: planner only (2 tokens)."""
    p1 = traj("0", role="planner", mask=[0, 1, 1]).model_copy(update={"policy": "A"})
    w1 = traj("0.1", parent="0", role="worker", depth=1, mask=[0, 1, 1, 1]).model_copy(update={"policy": "B"})
    p2 = traj("0", role="planner", mask=[0, 0, 1, 1]).model_copy(update={"policy": "A"})
    return [tree("t1", "q", 1.0, [p1, w1]), tree("t2", "q", 0.0, [p2])]


@pytest.mark.parametrize(
    ("agg", "weights"),
    [
        # per tree: its generated tokens (both policies') divide, then the mean over the 2 trees
        ("tree_token_mean", {("t1", "0"): 1 / (2 * 5), ("t1", "0.1"): 1 / (2 * 5), ("t2", "0"): 1 / (2 * 2)}),
        # one global token mean over all 7 tokens
        ("token_mean", {("t1", "0"): 1 / 7, ("t1", "0.1"): 1 / 7, ("t2", "0"): 1 / 7}),
        # mean over the 3 trajectories of their own token means
        ("seq_mean_token_mean", {("t1", "0"): 1 / (3 * 2), ("t1", "0.1"): 1 / (3 * 3), ("t2", "0"): 1 / (3 * 2)}),
    ],
)
def test_policy_batch_two_policies_in_one_tree_keep_the_trees_weights(agg: str, weights: dict) -> None:
    p = plan(PLANNER_WORKER, loss_agg=agg, role_policies={"planner": "A", "worker": "B"})
    trees, _ = assign_credit(_two_policy_step(), p, warn=False)
    batch = pack_trees(trees, loss_agg=agg, dtype=torch.float64)
    parts = split_by_policy(batch)
    assert {n: part.traj_keys for n, part in parts.items()} == {"A": (("t1", "0"), ("t2", "0")), "B": (("t1", "0.1"),)}
    for part in parts.values():
        for r, key in enumerate(part.traj_keys):
            on = part.loss_mask[r] > 0
            assert torch.allclose(part.loss_weights[r][on], torch.tensor(weights[key], dtype=torch.float64))
    total = sum(float(part.loss_weights.sum()) for part in parts.values())
    assert total == pytest.approx(1.0)  # the shared loss's weights, split, still sum to one


def test_policy_batch_minibatches_keep_each_policys_rows() -> None:
    """Each policy takes its K steps over its own rows (scale K, so a step's loss has full-batch size)."""
    p = plan(PLANNER_WORKER, role_policies={"planner": "A", "worker": "B"})
    trees, _ = assign_credit(_two_policy_step(), p, warn=False)
    batch = pack_trees(trees, loss_agg="tree_token_mean", dtype=torch.float64)
    for name, part in split_by_policy(batch).items():
        minis = split_minibatches(part, 2)
        assert len(minis) == 2 and all(m.scale == 2 for m in minis)
        assert {k for m in minis for k in m.traj_keys} == set(part.traj_keys)
        assert all(m.policy_names[int(i)] == name for m in minis for i in m.policy_index)
