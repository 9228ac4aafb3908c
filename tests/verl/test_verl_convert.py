"""Rollout trees -> AgentLoopOutputs -> veRL's own V1 post-processing and advantages.

Trees are built by hand from real SmolLM2 token ids here; the agent-loop test feeds the same checks
with trees the real model produced.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("verl")

from matpo_graph.core.reward import score_tree, with_reward  # noqa: E402
from matpo_graph.core.rollout import ChatMessage, RewardBreakdown, RolloutTree, Trajectory  # noqa: E402
from matpo_graph.verl_target.convert import TrainedTokensCut, split_trajectory, tree_outputs  # noqa: E402

from verl_helpers import MemoryKV, compile_tiny, compose_verl, patch_transfer_queue, verl_advantages, verl_postprocess  # noqa: E402

pytestmark = pytest.mark.verl


def _traj(tok, rng: random.Random, traj_id: str, parent: str | None, role: str, depth: int, turns: list[str]) -> Trajectory:
    prompt = tok.encode(f"<|im_start|>system\nYou are {role}.<|im_end|>\n<|im_start|>user\nTask {traj_id}<|im_end|>\n")
    ids, mask, lps = list(prompt), [0] * len(prompt), [0.0] * len(prompt)
    for text in turns:
        head = tok.encode("<|im_start|>assistant\n")
        ids += head; mask += [0] * len(head); lps += [0.0] * len(head)
        gen = tok.encode(text) if text else []
        ids += gen; mask += [1] * len(gen); lps += [-rng.random() * 4 for _ in gen]
        tail = tok.encode("<|im_end|>\n<|im_start|>user\nresult<|im_end|>\n")
        ids += tail; mask += [0] * len(tail); lps += [0.0] * len(tail)
    return Trajectory(traj_id=traj_id, parent_id=parent, role=role, depth=depth, token_ids=ids, loss_mask=mask, logprobs=lps,
                      prompt_length=len(prompt), messages=[ChatMessage(role="system", content=role)],
                      final_text=turns[-1] if turns else "")


def _tree(tok, seed: int, children: int, answer: str, uid: str, session: int) -> RolloutTree:
    rng = random.Random(seed)
    trajs = [_traj(tok, rng, "0", None, "planner", 0, ["I will ask.", f"\\boxed{{{answer}}}"])]
    for c in range(children):
        # a worker whose only generation failed has no trained token: it must be left out
        turns = [] if c == 1 else ["Looking it up." * (1 + rng.randrange(3)), "Found it."]
        trajs.append(_traj(tok, rng, f"0.{c + 1}", "0", "helper", 1, turns))
    return RolloutTree(tree_id=f"{uid}/{session}", group_id=uid, question="Q?", answers=["Tesk"], trajectories=trajs)


def _group(tok, plan, uid: str, spec: list[tuple[int, str]]):  # type: ignore[no-untyped-def]
    trees = []
    for session, (children, answer) in enumerate(spec):
        tree = _tree(tok, hash((uid, session)) % 1000, children, answer, uid, session)
        trees.append(with_reward(tree, score_tree(tree, plan)))
    return trees


def _check_rows(tree: RolloutTree, outputs, prompt_length: int, response_length: int) -> None:  # type: ignore[no-untyped-def]
    by_id = {t.traj_id: t for t in tree.trajectories}
    kept = [o.extra_fields["matpo_traj_id"] for o in outputs]
    expected = [t.traj_id for t in tree.descendants if t.num_trained_tokens > 0] + ["0"]
    assert kept == expected  # descendants in creation order, root last
    for out in outputs:
        traj = by_id[out.extra_fields["matpo_traj_id"]]
        n = len(out.response_ids)
        assert len(out.response_mask) == n == len(out.response_logprobs) and 1 <= n <= response_length
        assert len(out.prompt_ids) <= prompt_length
        whole = out.prompt_ids + out.response_ids
        assert whole == traj.token_ids[: len(whole)]  # the executor's ids, never re-tokenised
        start = len(out.prompt_ids)
        assert out.response_mask == traj.loss_mask[start : start + n]
        assert sum(traj.loss_mask[:start]) == 0
        assert all((lp == traj.logprobs[start + i]) if m else lp == 0.0 for i, (m, lp) in enumerate(zip(out.response_mask, out.response_logprobs)))
        assert out.reward_score == tree.reward.total
        assert out.extra_fields["matpo_role"] == traj.role and out.extra_fields["matpo_depth"] == traj.depth
        assert out.extra_fields["matpo_parent"] == (traj.parent_id or "")
        assert "reward_extra_info" in out.extra_fields


def test_tree_outputs_are_consistent_and_root_last(hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    tree = _tree(hf_tokenizer, 0, 3, "Tesk", "u", 0)
    breakdown = RewardBreakdown(total=0.95, accuracy=1.0, format=0.5)
    outputs = tree_outputs(tree, breakdown, prompt_length=512, response_length=512, trained_roles={"planner", "helper"})
    _check_rows(tree.model_copy(update={"reward": breakdown}), outputs, 512, 512)
    assert len(outputs) == 3  # worker 0.2 made no generation
    assert outputs[-1].extra_fields["matpo_reward"]["score"] == 0.95


def test_tree_outputs_leave_out_untrained_roles_but_keep_the_root(hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    tree = _tree(hf_tokenizer, 0, 2, "Tesk", "u", 0)
    breakdown = RewardBreakdown(total=0.0, accuracy=0.0, format=0.0)
    outputs = tree_outputs(tree, breakdown, prompt_length=512, response_length=512, trained_roles={"planner"})
    assert [o.extra_fields["matpo_traj_id"] for o in outputs] == ["0"]


def test_split_trajectory_moves_a_long_prompt_into_the_response_untrained(hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    traj = _tree(hf_tokenizer, 1, 0, "Tesk", "u", 0).root
    row = split_trajectory(traj, prompt_length=5, response_length=len(traj.token_ids))
    assert len(row.prompt_ids) == 5 and row.prompt_ids + row.response_ids == traj.token_ids
    assert row.truncated == 0 and row.response_mask == traj.loss_mask[5:]  # the rest of the prompt rides along, untrained
    assert sum(row.response_mask) == traj.num_trained_tokens  # every trained token stays in the loss
    frozen = split_trajectory(traj, prompt_length=512, response_length=512, trained=False)
    assert not any(frozen.response_mask) and not any(frozen.response_logprobs)


def test_split_trajectory_never_drops_trained_tokens(hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    traj = _tree(hf_tokenizer, 1, 0, "Tesk", "u", 0).root
    last_trained = max(i for i, m in enumerate(traj.loss_mask) if m)
    response_needed = len(traj.token_ids) - 5
    with pytest.raises(TrainedTokensCut, match=rf"data.max_response_length >= {response_needed}"):
        split_trajectory(traj, prompt_length=5, response_length=last_trained - 5)  # the last trained token is past it
    # An untrained tail (a tool result after the last generation) may be cut; it is counted.
    tail = len(traj.token_ids) - 1 - last_trained
    if tail:
        row = split_trajectory(traj, prompt_length=5, response_length=last_trained + 1 - 5)
        assert row.truncated == tail and sum(row.response_mask) == traj.num_trained_tokens
    frozen = split_trajectory(traj, prompt_length=5, response_length=3, trained=False)  # nothing trained to lose
    assert frozen.truncated == len(traj.token_ids) - 8


def test_verl_v1_postprocess_and_grpo_broadcast_each_root_advantage(hf_tokenizer, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.verl import graph_overrides
    from matpo_graph.core.credit import assign_credit

    program, plan, bundle = compile_tiny(tmp_path / "b")
    cfg = compose_verl(graph_overrides(program, plan, bundle_dir=str(bundle.root)))
    store = MemoryKV()
    patch_transfer_queue(monkeypatch, store)

    groups = {
        "qa_1": _group(hf_tokenizer, plan, "qa_1", [(2, "Tesk"), (0, "Orr"), (3, "Orr"), (1, "Nope")]),
        "qa_2": _group(hf_tokenizer, plan, "qa_2", [(1, "Orr"), (2, "Tesk"), (0, "Tesk"), (3, "Orr")]),
    }
    for uid, trees in groups.items():
        outs = [tree_outputs(t, t.reward, prompt_length=cfg.actor_rollout_ref.rollout.prompt_length,
                             response_length=cfg.actor_rollout_ref.rollout.response_length, trained_roles=plan.trained_roles) for t in trees]
        for tree, o in zip(trees, outs, strict=True):
            _check_rows(tree, o, cfg.actor_rollout_ref.rollout.prompt_length, cfg.actor_rollout_ref.rollout.response_length)
        verl_postprocess(outs, uid, hf_tokenizer)

    keys = verl_advantages(cfg, store)

    credited, _ = assign_credit([t for trees in groups.values() for t in trees], plan)
    expected = {t.tree_id: t.root.advantage for t in credited}
    assert len(set(round(a, 6) for a in expected.values())) > 2  # rewards differ: a real test of the broadcast
    total = sum(int(store.rows[k]["response_mask"].sum()) for k in keys)
    trees_with_tokens = len({k.rsplit("_", 1)[0] for k in keys})
    for key in keys:
        row = store.rows[key]
        uid, session, _ = key.rsplit("_", 2)
        tree_id = f"{uid}/{session}"
        mask = row["response_mask"].float()
        assert row["advantages"].tolist() == pytest.approx((expected[tree_id] * mask).tolist(), abs=1e-5)
        tree_tokens = sum(int(store.rows[k]["response_mask"].sum()) for k in keys if k.startswith(f"{uid}_{session}_"))
        assert row["rollout_is_weights"].tolist() == pytest.approx([total / (trees_with_tokens * tree_tokens)] * len(mask))
    for uid, trees in groups.items():
        for session, tree in enumerate(trees):
            last = max(int(k.rsplit("_", 1)[1]) for k in keys if k.startswith(f"{uid}_{session}_"))
            assert store.rows[f"{uid}_{session}_{last}"]["extra_fields"]["matpo_is_root"] is True
