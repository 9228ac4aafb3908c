"""`matpo-graph export`: checkpoints (full and LoRA) become HF folders that transformers loads with the
trained weights; LoRA is merged; errors name what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


def make_run(tmp_path: Path, *, lora_rank: int) -> tuple[Path, object]:
    """A run folder with one checkpoint of SmolLM2 whose weights were moved (a LoRA adapter with non-zero B,
    or one changed full matrix), saved through the trainer's own checkpoint writer; returns (run, model)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from matpo_graph.runtime.models import resolve_model
    from matpo_graph.rl.checkpoint import save_checkpoint
    from matpo_graph.rl.config import TrainConfig

    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(TrainConfig(lora_rank=lora_rank).model_dump_json())
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model()), dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    if lora_rank:
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules="all-linear",
                                                 lora_dropout=0.0))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    else:
        with torch.no_grad():
            w = model.model.layers[3].mlp.down_proj.weight
            w.add_(torch.randn(w.shape, generator=gen) * 0.02)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    save_checkpoint(run, step=3, model=model, optimizer=opt, state={"data_position": 6})
    return run, model


def logits(model, ids):  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


IDS = [1, 504, 3622, 314, 260, 2369, 282, 4649, 47]


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_export_writes_a_folder_transformers_loads_with_the_trained_weights(tmp_path, lora_rank):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from matpo_graph.cli import main

    run, trained = make_run(tmp_path, lora_rank=lora_rank)
    out = tmp_path / "exported"
    assert main(["export", str(run), "-o", str(out)]) == 0
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))
    assert (out / "tokenizer.json").is_file() or (out / "tokenizer_config.json").is_file()
    info = json.loads((out / "matpo_graph_export.json").read_text())
    assert info["step"] == 3 and info["lora_merged"] == bool(lora_rank)
    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert not any("lora" in k for k in loaded.state_dict())
    expected = logits(trained, IDS)
    assert torch.allclose(logits(loaded, IDS), expected, atol=1e-4)
    from matpo_graph.runtime.models import resolve_model

    base = AutoModelForCausalLM.from_pretrained(str(resolve_model()), dtype=torch.float32)
    assert not torch.allclose(logits(base, IDS), expected, atol=1e-3)  # the export carries the training
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.chat_template and "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                                                            tokenize=False)


def test_merged_state_dict_for_evaluation_uses_base_names(tmp_path):
    from matpo_graph.rl.export import merged_state_dict

    run, trained = make_run(tmp_path, lora_rank=4)
    state = merged_state_dict(run)
    assert state is not None and not any("lora_" in k or "base_model" in k for k in state)
    assert "lm_head.weight" in state and "model.layers.0.self_attn.q_proj.weight" in state
    merged = trained.merge_and_unload()
    assert torch.allclose(state["model.layers.5.mlp.up_proj.weight"], merged.model.layers[5].mlp.up_proj.weight)


def test_export_errors_name_the_problem(tmp_path, capsys):
    from matpo_graph.cli import main
    from matpo_graph.rl.export import ExportError, export_model

    with pytest.raises(ExportError, match="not a run folder"):
        export_model(tmp_path, tmp_path / "o")
    run = tmp_path / "empty_run"
    run.mkdir()
    (run / "train_config.json").write_text("{}")
    assert main(["export", str(run), "--out", str(tmp_path / "o")]) == 1
    assert "no checkpoint yet and no warm-up model" in capsys.readouterr().err
    with pytest.raises(ExportError, match="no checkpoint for step 7"):
        export_model(run, tmp_path / "o", step=7)
