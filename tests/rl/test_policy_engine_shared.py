"""Per-role policies through the local trainer on the real engine: a graph whose every role is on the shared
policy takes today's path bit for bit.

Slow: ``pytest -m engine tests/rl/test_policy_engine_shared.py``. Each run is a module of its own, so that
pytest-xdist (--dist loadfile) can give the three runs to different workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("peft")
pytestmark = pytest.mark.engine

from .policy_engine_helpers import _cfg, _compiled, _graph  # noqa: E402


def test_policy_engine_all_shared_graph_is_todays_path_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default graph, and the same graph with every role bound to a declared shared policy: same trees from
    the engine, same loss, same weights after a step with the same seed, both through PolicyOptimizer."""
    import torch

    from matpo_graph.core.credit import assign_credit
    from matpo_graph.core.policies import uses_per_role_policies
    from matpo_graph.rl.update import PolicyOptimizer
    from matpo_graph.rl.rollouts import RolloutSession

    today, plan_a = _compiled(_graph(tmp_path, None, {}), monkeypatch)
    named, plan_b = _compiled(_graph(tmp_path, {"base": {"kind": "shared"}}, {"planner": "base", "browser": "base"}),
                              monkeypatch)
    assert not uses_per_role_policies(today) and not uses_per_role_policies(named)  # the trainer's dispatch
    cfg = _cfg(1)
    from matpo_graph.runtime.models import resolve_model

    model_dir = resolve_model("smollm2-135m-instruct")
    with RolloutSession(today, cfg, model_dir=model_dir, plan=plan_a) as session:
        items = session.train_questions()[:1]
        a = session.score(session.rollout_groups(items, group_size=2, step=0, temperature=0.0), plan_a)
        session._run(session.policy.engine.reset_prefix_cache())
        session.program = named
        b = session.score(session.rollout_groups(items, group_size=2, step=0, temperature=0.0), plan_b)
    assert {t.policy for tr in a for t in tr.trajectories} == {"shared"}
    assert {t.policy for tr in b for t in tr.trajectories} == {"base"}
    for x, y in zip(a, b, strict=True):  # greedy: the same tokens (logprobs up to batching in the engine)
        assert len(x.trajectories) == len(y.trajectories)
        for s, t in zip(x.trajectories, y.trajectories, strict=True):
            assert (s.token_ids, s.loss_mask) == (t.token_ids, t.loss_mask)
            assert s.logprobs == pytest.approx(t.logprobs, abs=1e-4)
    trees_a = assign_credit(a, plan_a, warn=False)[0]
    trees_b = assign_credit(b, plan_b, warn=False)[0]
    temps = {n: r.temperature for n, r in today.roles.items()}
    opt_a = PolicyOptimizer(model_dir, plan_a, cfg, role_temperatures=temps)
    ma = opt_a.train_step(trees_a)
    weights_a = {k: v.detach().clone() for k, v in opt_a.model.state_dict().items()}
    del opt_a
    opt_b = PolicyOptimizer(model_dir, plan_b, cfg, role_temperatures=temps)
    mb = opt_b.train_step(trees_b)
    assert ma["loss"] == mb["loss"] and ma["grad_norm"] == mb["grad_norm"] and ma["grad_norm"] > 0.0
    for k, v in opt_b.model.state_dict().items():
        assert torch.equal(v, weights_a[k]), k
