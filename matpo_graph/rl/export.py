"""`matpo-graph export`: a run's trained policy as a Hugging Face model folder that transformers and vLLM load.

RL checkpoints hold the trainer's raw state dict (with LoRA: peft's wrapped names and the adapter
matrices beside the frozen base). Export rebuilds the model the run started from (its warm-up model, or
the base model), loads the checkpoint, merges LoRA into the base weights, and writes a plain model
folder: config, safetensors weights, generation config, tokenizer and chat template, plus
``matpo_graph_export.json`` saying where it came from. :func:`merged_state_dict` is the same merge for
code that wants the weights in memory (evaluation of a LoRA run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matpo_graph.model.folder import Dtype, save_model_folder
from matpo_graph.model.loading import load_causal_lm
from matpo_graph.rl.run_folder import ExportError, checkpoint_base, pick_checkpoint, run_policies, train_config

__all__ = ["ExportError", "checkpoint_base", "export_model", "merged_state_dict", "pick_checkpoint", "train_config"]

_MARKER = "matpo_graph_export.json"


def _load_merged(base_dir: Path, weights: dict[str, Any], lora_rank: int) -> Any:
    """The base model with the checkpoint's weights loaded and any LoRA merged in (a plain HF model)."""
    model = load_causal_lm(base_dir)
    is_lora = any("lora_A" in k for k in weights)
    if is_lora:
        from peft import LoraConfig, get_peft_model

        rank = lora_rank or next(v.shape[0] for k, v in weights.items() if "lora_A" in k)
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear",
                                                 lora_dropout=0.0))
    result = model.load_state_dict(weights, strict=False)
    missing = [k for k in result.missing_keys if "lora_" in k or not is_lora]
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if missing or result.unexpected_keys:
        raise ExportError(f"the checkpoint does not fit {base_dir}: missing {missing[:5]}, "
                          f"unexpected {list(result.unexpected_keys)[:5]}")
    if is_lora:
        model = model.merge_and_unload()
    return model


def _refuse_per_role_policies(weights: dict[str, Any], ckpt: Path) -> None:
    """A run of a graph with lora or separate policies holds several policies (``<policy>::<key>``); one model
    folder cannot hold them, and merging one adapter would silently pick one role's weights for all."""
    if any("::" in k for k in weights):
        policies = sorted({k.split("::", 1)[0] for k in weights if "::" in k})
        raise ExportError(f"{ckpt} holds several policies ({', '.join(policies)}), one model folder holds one: "
                          "export one with --policy NAME")


def merged_state_dict(run_dir: Path, *, step: int | None = None) -> dict[str, Any] | None:
    """A run's checkpoint weights in the base model's names with LoRA merged (None: no checkpoint yet)."""
    from safetensors.torch import load_file

    run_dir = Path(run_dir)
    ckpt = pick_checkpoint(run_dir, step)
    if ckpt is None:
        return None
    weights = load_file(str(ckpt / "model.safetensors"))
    _refuse_per_role_policies(weights, ckpt)
    if not any("lora_" in k for k in weights):
        return weights
    model = _load_merged(checkpoint_base(run_dir), weights, int(train_config(run_dir).get("lora_rank") or 0))
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def export_model(run_dir: Path, out_dir: Path, *, step: int | None = None, dtype: Dtype = "float32",
                 overwrite: bool = False, policy: str | None = None) -> Path:
    """Write RUN_DIR's policy (the latest checkpoint, or `step`) as a HF model folder; returns it.

    A run without RL checkpoints exports its warm-up model. LoRA is merged. A run whose graph declares
    several policies (lora, separate) exports the one named by `policy`.

    Raises:
        ExportError: not a run folder, nothing to export, a checkpoint that does not fit its base model,
            `out_dir` exists and is not empty (without `overwrite`), a per-role run without `policy` (or
            `policy` given for a run with one policy, or naming none of its policies).
    """
    from safetensors.torch import load_file

    from matpo_graph.rl.policy_export import PerRolePolicies

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    cfg = train_config(run_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ExportError(f"{out_dir} exists and is not empty (pass --overwrite to replace it)")
    base = checkpoint_base(run_dir)
    names = run_policies(run_dir)
    if names is not None:
        policy = names[0] if policy is None and len(names) == 1 else policy
        if policy is None or policy not in names:
            got = "" if policy is None else f"no policy {policy!r}; "
            raise ExportError(f"{run_dir}: {got}its graph has several policies ({', '.join(names)}) and a model folder "
                              "holds one: pass --policy NAME")
        policies = PerRolePolicies(run_dir, step=step)
        model = policies.hf_model(policy)
        ckpt = policies.checkpoint
        start = policies.model_dir(policy)
        info = {"base_model": str(start), "lora_merged": policy in policies.policies.lora_specs, "policy": policy,
                "checkpoint": ckpt.name if ckpt else None, "step": policies.step}
        return _write_folder(model, start, out_dir, dtype, run_dir=run_dir, info=info)
    if policy is not None:
        raise ExportError(f"{run_dir} trains one policy; --policy is for graphs that declare several")
    ckpt = pick_checkpoint(run_dir, step)
    if ckpt is None and base != run_dir / "sft" / "model":
        raise ExportError(f"{run_dir}: no checkpoint yet and no warm-up model; nothing trained to export")
    if ckpt is not None:
        weights = load_file(str(ckpt / "model.safetensors"))
        _refuse_per_role_policies(weights, ckpt)
        model = _load_merged(base, weights, int(cfg.get("lora_rank") or 0))
        state = json.loads((ckpt / "state.json").read_text())
        source = {"checkpoint": ckpt.name, "step": int(state.get("step", 0))}
    else:
        model = load_causal_lm(base)
        source = {"checkpoint": None, "step": 0}
    return _write_folder(model, base, out_dir, dtype, run_dir=run_dir,
                         info={"base_model": str(base), "lora_merged": bool(cfg.get("lora_rank")), **source})


def _write_folder(model: Any, tokenizer_dir: Path, out_dir: Path, dtype: Dtype, *, run_dir: Path,
                  info: dict[str, Any]) -> Path:
    """Save `model` with the tokenizer of `tokenizer_dir` and a marker saying which run it came from."""
    marker = {"run": str(run_dir.resolve()), "dtype": dtype, **info}
    return save_model_folder(model, tokenizer_dir, out_dir, dtype=dtype, info_name=_MARKER, info=marker)
