"""PolicySet on a tiny random Llama (fast, no engine): each policy's optimizer trains its own rows only.

The real model and engine are exercised in test_policy_engine_*.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from matpo_graph.compilers.local import compile_graph  # noqa: E402
from matpo_graph.core.credit import assign_credit  # noqa: E402
from matpo_graph.core.loader import check_text  # noqa: E402
from matpo_graph.core.rollout import RewardBreakdown, RolloutTree, Trajectory  # noqa: E402
from matpo_graph.rl.config import TrainConfig  # noqa: E402

GRAPH = """name: g
root: planner
roles:
  planner: {system: plan, policy: %s}
  worker: {system: work, policy: %s}
edges: [{from: planner, to: worker, as: ask}]
policies:
%s"""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer files (only the tokenizer is copied)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from matpo_graph.runtime.models import cache_root

    src = next((p for p in sorted((cache_root() / "models").glob("smollm2-*"), reverse=True) if (p / "tokenizer.json").exists()), None)
    if src is None:
        pytest.skip("the embedded model's tokenizer is not cached")
    out = tmp_path_factory.mktemp("tiny")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def _compile(tmp_path: Path, planner: str, worker: str, policies: str):  # type: ignore[no-untyped-def]
    check = check_text(GRAPH % (planner, worker, policies), base_dir=tmp_path)
    assert check.graph is not None, check.issues
    return compile_graph(check.graph, tmp_path)


def _traj(traj_id: str, role: str, policy: str, depth: int, parent: str | None, seed: int) -> Trajectory:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 2000, (14,), generator=g).tolist()
    mask = [0] * 6 + [1] * 4 + [0] * 2 + [1] * 2
    return Trajectory(traj_id=traj_id, parent_id=parent, role=role, depth=depth, token_ids=ids, loss_mask=mask,
                      logprobs=[-1.0 * m for m in mask], prompt_length=6, policy=policy)


def _trees(plan, with_workers: bool = True) -> list[RolloutTree]:  # type: ignore[no-untyped-def]
    bound = plan.role_policies
    trees = []
    for i, reward in enumerate([1.0, 0.0, 0.5]):
        ts = [_traj("0", "planner", bound["planner"], 0, None, 10 * i)]
        if with_workers:
            ts.append(_traj("0.1", "worker", bound["worker"], 1, "0", 10 * i + 1))
        trees.append(RolloutTree(tree_id=f"t{i}", group_id="q", question="q", trajectories=ts,
                                 reward=RewardBreakdown(total=reward, accuracy=reward, format=0.0)))
    credited, _ = assign_credit(trees, plan, warn=False)
    return credited


def _cfg(**kw) -> TrainConfig:  # type: ignore[no-untyped-def]
    return TrainConfig(lr=1e-2, precision="fp32", warmstart="none", seed=0, **kw)


def _snapshot(ps, names) -> dict[str, list[torch.Tensor]]:  # type: ignore[no-untyped-def]
    out = {n: [p.detach().clone() for p in ps._params[n]] for n in names}
    out["base"] = [p.detach().clone() for n, p in ps.peft.get_base_model().named_parameters() if "lora_" not in n]
    return out


def _changed(before: list[torch.Tensor], after: list[torch.Tensor]) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_policy_set_each_adapter_trains_on_its_own_rows_and_the_base_stays(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "p", "w", "  p: {kind: lora, rank: 4}\n  w: {kind: lora, rank: 2, target_modules: [q_proj, v_proj]}\n")
    ps = PolicySet(program, plan, _cfg(), tiny_model_dir)
    assert ps.trained_policies == ["p", "w"] and "shared" not in ps.members
    before = _snapshot(ps, ["p", "w"])
    metrics = ps.train_step(_trees(plan))
    after = _snapshot(ps, ["p", "w"])
    assert _changed(before["p"], after["p"]) and _changed(before["w"], after["w"])
    assert not _changed(before["base"], after["base"])
    assert metrics["policy/p/trained_rows"] == 3.0 and metrics["policy/w/trained_rows"] == 3.0
    assert metrics["loss"] == pytest.approx(metrics["policy/p/loss"] + metrics["policy/w/loss"])
    assert all(not p.requires_grad for p in ps.peft.parameters())  # nothing left trainable between steps


def test_policy_set_each_policy_steps_at_its_own_lr(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "p", "judge",
                             f"  p: {{kind: lora, rank: 4, lr: 0.05}}\n  judge: {{kind: separate, model: '{tiny_model_dir}', lr: 0.002}}\n")
    ps = PolicySet(program, plan, _cfg(), tiny_model_dir)
    assert [g["lr"] for g in ps.members["p"].optimizer.param_groups] == [0.05]
    assert [g["lr"] for g in ps.members["judge"].optimizer.param_groups] == [0.002]
    program, plan = _compile(tmp_path, "p", "w", "  p: {kind: lora, rank: 4}\n  w: {kind: lora, rank: 4}\n")
    ps = PolicySet(program, plan, _cfg(), tiny_model_dir)  # no lr given: the run's
    assert {g["lr"] for n in ("p", "w") for g in ps.members[n].optimizer.param_groups} == {1e-2}


def test_policy_set_a_policy_without_rows_does_not_move(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "p", "w", "  p: {kind: lora, rank: 4}\n  w: {kind: lora, rank: 4}\n")
    ps = PolicySet(program, plan, _cfg(weight_decay=0.1), tiny_model_dir)
    before = _snapshot(ps, ["p", "w"])
    metrics = ps.train_step(_trees(plan, with_workers=False))
    after = _snapshot(ps, ["p", "w"])
    assert _changed(before["p"], after["p"])
    assert not _changed(before["w"], after["w"]) and not _changed(before["base"], after["base"])
    assert metrics["policy/w/optimizer_steps"] == 0.0


def test_policy_set_shared_roles_train_the_base_with_adapters_off(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "shared", "w", "  w: {kind: lora, rank: 4}\n")
    ps = PolicySet(program, plan, _cfg(train_layers=1), tiny_model_dir)
    assert ps.trained_policies == ["shared", "w"]
    before = _snapshot(ps, ["w"])
    ps.train_step(_trees(plan))
    after = _snapshot(ps, ["w"])
    assert _changed(before["w"], after["w"]) and _changed(before["base"], after["base"])
    # the shared policy computes without adapters: the base's logprobs equal a plain model's with these weights
    ids = _trees(plan)[0].root.token_ids
    shared_lp = ps.sequence_logprobs("shared", ids)
    with ps.peft.disable_adapter():
        plain = ps.base.sequence_logprobs(ids)
    assert shared_lp == plain
    assert ps.sequence_logprobs("w", ids) != shared_lp  # the trained adapter changes the worker's distribution


def test_policy_set_checkpoint_round_trip(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "p", "w", "  p: {kind: lora, rank: 4}\n  w: {kind: lora, rank: 4}\n")
    ps = PolicySet(program, plan, _cfg(), tiny_model_dir)
    ps.train_step(_trees(plan))
    save_checkpoint(tmp_path / "run", step=1, model=ps.model, optimizer=ps.optimizer, state={})
    trained = _snapshot(ps, ["p", "w"])
    fresh = PolicySet(program, plan, _cfg(), tiny_model_dir)
    load_checkpoint(latest_checkpoint(tmp_path / "run"), model=fresh.model, optimizer=fresh.optimizer)
    loaded = _snapshot(fresh, ["p", "w"])
    for name in ("p", "w", "base"):
        assert not _changed(trained[name], loaded[name]), name
    assert set(fresh.optimizer.state_dict()) == {"p", "w"}
    assert fresh.optimizer.optimizers["p"].state_dict()["state"]  # AdamW moments came back
    # the resumed set trains on exactly as the original does
    a, b = ps.train_step(_trees(plan)), fresh.train_step(_trees(plan))
    assert a["loss"] == b["loss"]
    assert not _changed(_snapshot(ps, ["p", "w"])["p"], _snapshot(fresh, ["p", "w"])["p"])


def test_policy_set_separate_tokenizer_must_match(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.runtime.policies.per_role import TokenizerMismatchError, check_same_tokenizer

    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    check_same_tokenizer(tiny_model_dir, other, policy="judge")  # same files: fine
    (other / "chat_template.jinja").write_text("{{ messages }}")
    with pytest.raises(TokenizerMismatchError, match="separate policy 'judge'.*chat templates differ"):
        check_same_tokenizer(tiny_model_dir, other, policy="judge")


def test_policy_set_separate_model_trains_on_its_own_rows(tmp_path: Path, tiny_model_dir: Path) -> None:
    from matpo_graph.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "shared", "judge", f"  judge: {{kind: separate, model: '{tiny_model_dir}'}}\n")
    ps = PolicySet(program, plan, _cfg(train_layers=1), tiny_model_dir)
    assert ps.trained_policies == ["shared", "judge"] and ps.peft is None
    judge = ps.members["judge"].model
    assert judge is not ps.base.model
    before_base = [p.detach().clone() for p in ps.base.model.parameters()]
    before_judge = [p.detach().clone() for p in judge.parameters()]
    metrics = ps.train_step(_trees(plan))
    assert metrics["policy/judge/trained_rows"] == 3.0 and metrics["policy/shared/trained_rows"] == 3.0
    assert _changed(before_judge, [p.detach() for p in judge.parameters()])
    assert _changed(before_base, [p.detach() for p in ps.base.model.parameters()])
    # the planner-only step trains the base alone; the judge's model stays as it was
    after_judge = [p.detach().clone() for p in judge.parameters()]
    ps.train_step(_trees(plan, with_workers=False))
    assert not _changed(after_judge, [p.detach() for p in judge.parameters()])
    save_checkpoint(tmp_path / "run", step=1, model=ps.model, optimizer=ps.optimizer, state={})
    fresh = PolicySet(program, plan, _cfg(train_layers=1), tiny_model_dir)
    load_checkpoint(latest_checkpoint(tmp_path / "run"), model=fresh.model, optimizer=fresh.optimizer)
    assert not _changed([p.detach() for p in judge.parameters()], [p.detach() for p in fresh.members["judge"].model.parameters()])
    assert not _changed([p.detach() for p in ps.base.model.parameters()], [p.detach() for p in fresh.base.model.parameters()])


def test_policy_set_adapters_step_at_the_base_the_step_started_from(tmp_path: Path, tiny_model_dir: Path) -> None:
    """With shared and lora roles, the adapter's update is the one computed at the step's starting base: the same
    as training the adapter alone, although the base moves in the same step."""
    from matpo_graph.rl.batch import pack_trees, split_by_policy
    from matpo_graph.rl.update_per_role import PolicySet

    program, plan = _compile(tmp_path, "shared", "w", "  w: {kind: lora, rank: 4}\n")
    trees = _trees(plan)
    both = PolicySet(program, plan, _cfg(train_layers=1), tiny_model_dir)
    both.train_step(trees)
    alone = PolicySet(program, plan, _cfg(train_layers=1), tiny_model_dir)
    batch = pack_trees(trees, loss_agg=plan.loss_agg, pad_token_id=alone.pad_id, trained_roles=plan.trained_roles)
    alone.activate("w").train_packed(split_by_policy(batch)["w"])
    assert not _changed([p.detach() for p in both._params["w"]], [p.detach() for p in alone._params["w"]])
    assert _changed(_snapshot(both, [])["base"], _snapshot(alone, [])["base"])  # the base did move in `both`
