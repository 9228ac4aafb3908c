"""Supervised warm-up: a tiny real run on expert demonstrations lowers the loss and writes a usable model."""

from __future__ import annotations

import json

import pytest

from matpo_graph.coldstart.sft import SFTSettings, run_sft
from matpo_graph.model.precision import cpu_has_native_bf16, resolve_precision

from cs_helpers import demos, load, questions


@pytest.mark.parametrize("bad, match", [
    ({"epochs": 0}, "epochs"), ({"lr": 0.0}, "lr"), ({"lr": float("nan")}, "lr"),
    ({"batch_size": 0}, "batch_size"), ({"train_layers": -1}, "train_layers"), ({"precision": "fp16"}, "precision"),
])
def test_sft_settings_reject_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        SFTSettings(**bad)


@pytest.mark.parametrize("flags, native", [
    ("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", True),
    ("fpu sse2 avx2 amx_bf16 amx_tile", True),
    ("fpu sse2 avx2 avx512f avx512_vnni", False),
    ("", False),
])
def test_auto_precision_uses_bf16_only_where_the_cpu_computes_it_natively(flags, native):
    cpuinfo = f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"
    assert cpu_has_native_bf16(cpuinfo) is native
    assert resolve_precision("auto", cpuinfo) == ("bf16" if native else "fp32")
    assert resolve_precision("fp32", cpuinfo) == "fp32" and resolve_precision("bf16", cpuinfo) == "bf16"


def test_run_sft_without_usable_demonstrations_says_so(tmp_path, model_dir):
    program, plan = load("single_agent")
    with pytest.raises(ValueError, match="no demonstration has generated tokens"):
        run_sft(program, plan, model_dir=model_dir, out_dir=tmp_path, trees=[], progress=False)


@pytest.mark.engine
def test_sft_tiny_run_lowers_loss_and_writes_a_loadable_checkpoint(tmp_path, model_dir, chat, web):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from matpo_graph.coldstart.sft_data import examples_from_trees
    from matpo_graph.coldstart.sft_model import SFTModel

    program, plan = load("single_agent")
    trees = demos(program, plan, questions(web, 2, hops=1), chat, web).trees
    assert len(trees) == 2
    out = run_sft(program, plan, model_dir=model_dir, out_dir=tmp_path, trees=trees, epochs=1, lr=2e-4,
                  train_layers=2, batch_size=1, eval_loss=True, progress=False)
    assert out == tmp_path / "model"
    rows = [json.loads(line) for line in (tmp_path / "metrics_sft.jsonl").read_text().splitlines()]
    summary = rows[-1]
    assert summary["kind"] == "summary" and summary["steps"] == 2 and summary["opening_drills"] == 0
    assert summary["precision"] == resolve_precision("auto")
    assert summary["loss_after"] < summary["loss_before"]
    assert [r["epoch"] for r in rows if r["kind"] == "epoch"] == [1]
    assert (tmp_path / "demos.jsonl").is_file()

    # a complete HF folder: config, tokenizer, weights with an explicit lm_head
    with safe_open(str(out / "model.safetensors"), "pt") as fh:
        assert "lm_head.weight" in fh.keys()
    assert AutoTokenizer.from_pretrained(str(out)).chat_template
    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    base = load_file(str(model_dir / "model.safetensors"))
    new = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in new.values())  # bf16 autocast trains float32 weights
    last = loaded.config.num_hidden_layers - 1
    assert torch.equal(new["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(new[f"model.layers.{last}.mlp.up_proj.weight"], base[f"model.layers.{last}.mlp.up_proj.weight"])

    # the saved weights are the trained ones: the reloaded model reproduces the final loss
    reloaded = SFTModel(out, train_layers=0)
    reloaded.model.eval()
    total = count = 0.0
    with torch.no_grad():
        for ex in examples_from_trees(trees):
            loss, n = reloaded.loss_sum([ex])
            total, count = total + float(loss), count + n
    assert total / count == pytest.approx(summary["loss_after"], rel=1e-4)


def test_opening_drills_add_one_short_example_per_trajectory(tmp_path, model_dir, web, chat):
    from matpo_graph.coldstart.sft import train_sft
    from matpo_graph.coldstart.sft_data import examples_from_trees

    program, plan = load("deep_search")
    trees = demos(program, plan, questions(web, 2, hops=1), chat, web).trees
    assert len(trees) == 2
    train_sft(trees[:1], openings=trees[1:], whole_roles={"planner"}, model_dir=model_dir, out_dir=tmp_path, progress=False,
              settings=SFTSettings(epochs=1, train_layers=1, batch_size=8))
    summary = [json.loads(line) for line in (tmp_path / "metrics_sft.jsonl").read_text().splitlines()][-1]
    full = len(trees[0].trajectories)
    drilled = trees[1].trajectories
    assert summary["opening_drills"] == 1 and summary["drill_examples"] == len(drilled) >= 2
    assert summary["examples"] == full + len(drilled)
    first_turn_ends = [t.loss_mask.index(1) + t.turns[0].num_tokens for t in drilled if t.role != "planner"]
    first_turn_ends.append(max(i for i, m in enumerate(trees[1].root.loss_mask) if m) + 1)  # planner: every turn
    assert summary["tokens"] == sum(len(e) for e in examples_from_trees(trees[:1])) + sum(first_turn_ends)
