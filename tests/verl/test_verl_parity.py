"""Parity of the two engines' credit: the same real rollout trees give the same per-row advantages and
loss weights in the local trainer and on the veRL path, for every loss aggregation veRL can express.

The trees are a real local rollout of the default graph: the expert policy plays it through the real
executor, tokenizer, embedded web and tools (the expert is deterministic, so the trees differ by
question; rewards are set per tree so that groups carry signal). The local side is
:func:`assign_credit` + :func:`pack_trees`; the veRL side is this project's conversion, veRL's own V1
post-processing and ``compute_advantage_for_multi_trajectories``, and the MATPO trainer's weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from matpo_graph.core.rollout import RewardBreakdown, RolloutTree  # noqa: E402

from verl_helpers import REPO, MemoryKV, compose_verl, patch_transfer_queue, verl_advantages, verl_postprocess  # noqa: E402

pytestmark = pytest.mark.verl

GROUP = 4
REWARDS = [1.0, 0.1, 0.55, 0.1, 0.1, 0.1, 1.0, 0.9]  # two groups of four, each with variance


@pytest.fixture(scope="module")
def real_trees(model_dir: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import compile_graph
    from matpo_graph.core.loader import load_graph
    from matpo_graph.coldstart.demonstrations import make_demos

    graph_path = REPO / "graphs" / "deep_search.yaml"
    program, plan = compile_graph(load_graph(graph_path), graph_path.parent)
    batch = make_demos(program, plan, n=len(REWARDS), model_dir=model_dir, seed=5, max_hops=2, keep_all=True)
    assert len(batch.trees) == len(REWARDS)
    trees = [t.model_copy(update={"group_id": f"q{i // GROUP}", "tree_id": f"q{i // GROUP}/{i % GROUP}"})
             for i, t in enumerate(batch.trees)]
    assert sum(len(t.descendants) for t in trees) >= len(trees)  # the planner delegated: real descendants
    return program, plan, trees


def _local(trees: list[RolloutTree], plan, loss_agg: str) -> dict[tuple[str, str], tuple[float, float, int]]:  # type: ignore[no-untyped-def]
    from matpo_graph.core.credit import assign_credit
    from matpo_graph.rl.batch import pack_trees

    rewards = {t.tree_id: r for t, r in zip(trees, REWARDS, strict=True)}
    credited, _ = assign_credit(trees, plan, rewards=rewards, warn=False)
    packed = pack_trees(credited, loss_agg=loss_agg, trained_roles=sorted(plan.trained_roles))
    out = {}
    for i, key in enumerate(packed.traj_keys):
        mask = packed.loss_mask[i].bool()
        out[key] = (float(packed.advantages[i][mask][0]), float(packed.loss_weights[i][mask][0]), int(mask.sum()))
    return out


def _verl(trees: list[RolloutTree], program, plan, loss_agg: str, tokenizer, monkeypatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.verl import compile_verl_bundle, graph_overrides
    from matpo_graph.verl_target.convert import tree_outputs

    plan = plan.model_copy(update={"loss_agg": loss_agg})
    bundle = compile_verl_bundle(None, program, plan, tmp_path / loss_agg)
    cfg = compose_verl(graph_overrides(program, plan, bundle_dir=str(bundle.root)))
    store = MemoryKV()
    patch_transfer_queue(monkeypatch, store)
    rollout = cfg.actor_rollout_ref.rollout
    for uid in sorted({t.group_id for t in trees}):
        group = [t for t in trees if t.group_id == uid]
        outs = [tree_outputs(t, RewardBreakdown(total=REWARDS[trees.index(t)], accuracy=0.0, format=0.0),
                             prompt_length=rollout.prompt_length, response_length=rollout.response_length,
                             trained_roles=plan.trained_roles) for t in group]
        verl_postprocess(outs, uid, tokenizer)
    keys = verl_advantages(cfg, store, loss_agg=loss_agg)
    total = sum(int(store.rows[k]["response_mask"].sum()) for k in keys)
    out = {}
    for key in keys:
        row = store.rows[key]
        fields = row["extra_fields"]
        mask = row["response_mask"].bool()
        # veRL's token-mean divides the weighted token losses by the batch's trained tokens.
        weight = float(row["rollout_is_weights"][mask][0]) / total if loss_agg == "tree_token_mean" else 1.0 / total
        out[(fields["matpo_tree_id"], fields["matpo_traj_id"])] = (float(row["advantages"][mask][0]), weight, int(mask.sum()))
    return out


@pytest.mark.parametrize("loss_agg", ["tree_token_mean", "token_mean"])
def test_local_and_verl_credit_agree_on_real_trees(real_trees, loss_agg: str, hf_tokenizer, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    program, plan, trees = real_trees
    local = _local(trees, plan, loss_agg)
    verl = _verl(trees, program, plan, loss_agg, hf_tokenizer, monkeypatch, tmp_path)
    assert set(local) == set(verl) and len(local) > len(trees)  # the same rows, descendants included
    assert len({round(a, 6) for a, _, _ in local.values()}) > 2  # real, distinct advantages
    for key, (adv, weight, tokens) in local.items():
        v_adv, v_weight, v_tokens = verl[key]
        assert v_tokens == tokens, key
        assert v_adv == pytest.approx(adv, abs=1e-6), key
        assert v_weight == pytest.approx(weight, rel=1e-6, abs=1e-12), key
