"""Loading a causal LM for training and choosing which of its parameters train.

Every trainer loads in float32 (trainer and engine logprobs stay comparable on a CPU) and trains the top of
the decoder stack: a cold start or an RL step mostly reshapes output habits, which the upper layers carry,
and autograd then skips the frozen lower stack entirely.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["backbone_and_head", "decoder_layers", "load_causal_lm", "train_top_layers"]


def load_causal_lm(model_dir: str | Path) -> Any:
    """A float32 Hugging Face causal LM without its generation cache (training never decodes)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.config.use_cache = False
    return model


def backbone_and_head(model: Any) -> tuple[Any, Any]:
    """(decoder stack, lm_head) of an HF causal LM, through a peft wrapper if any; (None, None) if unknown."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = getattr(inner, "model", None)
    head = getattr(inner, "lm_head", None)
    if backbone is None or head is None or not hasattr(backbone, "layers"):
        return None, None
    return backbone, head


def decoder_layers(model: Any) -> list[Any] | None:
    """The decoder layers of a plain HF causal LM, bottom first; None for an architecture without them."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return None if layers is None else list(layers)


def train_top_layers(model: Any, train_layers: int, *, train_embeddings: bool, train_head: bool) -> int:
    """Make the top `train_layers` decoder layers and the final norm trainable and freeze the layers below.

    `train_layers` 0, or at least the model's depth, keeps every decoder layer trainable. The input
    embeddings train only with `train_embeddings`; an output head of its own (not tied to the embeddings)
    only with `train_head`. Returns how many decoder layers are frozen.
    """
    for p in model.parameters():
        p.requires_grad_(True)
    layers = decoder_layers(model)
    depth = len(layers) if layers is not None else 0
    frozen = depth - train_layers if 0 < train_layers < depth else 0
    for layer in (layers or [])[:frozen]:
        for p in layer.parameters():
            p.requires_grad_(False)
    embeddings = model.get_input_embeddings()
    if embeddings is not None:
        embeddings.weight.requires_grad_(train_embeddings)
    head = model.get_output_embeddings()
    if head is not None and (embeddings is None or head.weight is not embeddings.weight):
        head.weight.requires_grad_(train_head)
    return frozen
