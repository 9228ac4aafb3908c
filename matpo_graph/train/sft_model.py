"""The model side of supervised warm-up: a float32 causal LM whose lower layers may be frozen and cached.

Training every layer of even a 135M model costs about three forward passes per token on a CPU. A cold
start mostly teaches output *formats*, which the upper layers learn well, so the warm-up can train only
the top ``train_layers`` decoder layers (plus the final norm): the frozen lower stack then runs once per
example without gradients and its output is cached, so later epochs (and the loss evaluations) run only
the upper layers. ``train_layers=0`` trains every decoder layer. Input embeddings (tied to the output
head in SmolLM2) stay frozen unless ``train_embeddings`` is set.

The loss is cross-entropy on the positions whose *next* token has loss mask 1; the output head runs only
there, so the large vocabulary projection is not paid on context tokens.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from matpo_graph.train.sft_data import SFTExample

__all__ = ["SFTModel", "save_hf_checkpoint"]


class SFTModel:
    """A causal LM prepared for warm-up.

    Args:
        model_dir: a HuggingFace model folder.
        train_layers: decoder layers trained, counted from the top (0 = all of them).
        train_embeddings: also train the input embeddings (and so a tied output head).
        cache_frozen: keep the frozen lower stack's output per example (memory: 4 bytes x hidden size
            per token) so it is computed once.
    """

    def __init__(self, model_dir: str | Path, *, train_layers: int = 0, train_embeddings: bool = False,
                 cache_frozen: bool = True) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        self.model.config.use_cache = False
        inner = getattr(self.model, "model", None)
        layers = getattr(inner, "layers", None)
        self.split = layers is not None and all(hasattr(inner, a) for a in ("embed_tokens", "rotary_emb", "norm"))
        n = len(layers) if layers is not None else 0
        self.cut = n - train_layers if self.split and 0 < train_layers < n else 0
        for p in self.model.parameters():
            p.requires_grad_(True)
        if self.split:
            inner.embed_tokens.weight.requires_grad_(train_embeddings)
            for layer in layers[: self.cut]:
                for p in layer.parameters():
                    p.requires_grad_(False)
        elif not train_embeddings:
            self.model.get_input_embeddings().weight.requires_grad_(False)
        self.cache_frozen = cache_frozen and self.cut > 0
        self._cache: dict[str, torch.Tensor] = {}
        self.pad_id = 0

    @property
    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def num_trainable(self) -> int:
        return sum(p.numel() for p in self.trainable)

    # -- forward -------------------------------------------------------------------------------------

    def _mask(self, hidden: torch.Tensor, attention: torch.Tensor | None, positions: torch.Tensor) -> Any:
        from transformers.masking_utils import create_causal_mask

        return create_causal_mask(config=self.model.config, inputs_embeds=hidden, attention_mask=attention,
                                  past_key_values=None, position_ids=positions)

    def _run_layers(self, hidden: torch.Tensor, layers: Sequence[Any], attention: torch.Tensor | None) -> torch.Tensor:
        inner = self.model.model
        positions = torch.arange(hidden.shape[1]).unsqueeze(0)
        mask = self._mask(hidden, attention, positions)
        rope = inner.rotary_emb(hidden, position_ids=positions)
        for layer in layers:
            out = layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=positions)
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden

    def _frozen(self, batch: Sequence[SFTExample], ids: torch.Tensor, attention: torch.Tensor | None) -> torch.Tensor:
        """Output of the frozen lower stack for a padded batch, from the cache when possible."""
        inner = self.model.model
        width = ids.shape[1]
        if self.cache_frozen and all(ex.key in self._cache for ex in batch):
            rows = [torch.nn.functional.pad(self._cache[ex.key], (0, 0, 0, width - len(ex))) for ex in batch]
            return torch.stack(rows)
        with torch.no_grad():
            hidden = self._run_layers(inner.embed_tokens(ids), inner.layers[: self.cut], attention)
        if self.cache_frozen:
            for row, ex in zip(hidden, batch):
                self._cache[ex.key] = row[: len(ex)].clone()
        return hidden

    def _final_hidden(self, batch: Sequence[SFTExample], ids: torch.Tensor, attention: torch.Tensor | None) -> torch.Tensor:
        if not self.split:
            raise RuntimeError("unreachable: split forward on a model without decoder layers")
        inner = self.model.model
        if self.cut > 0:
            hidden = self._frozen(batch, ids, attention)
            hidden = self._run_layers(hidden, inner.layers[self.cut :], attention)
        else:
            hidden = self._run_layers(inner.embed_tokens(ids), inner.layers, attention)
        return inner.norm(hidden)

    def loss_sum(self, batch: Sequence[SFTExample]) -> tuple[torch.Tensor, int]:
        """Summed cross-entropy over the trained tokens of a micro-batch, and how many there are."""
        width = max(len(ex) for ex in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        trained = torch.zeros((len(batch), width), dtype=torch.bool)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, ex in enumerate(batch):
            ids[i, : len(ex)] = torch.tensor(ex.token_ids)
            trained[i, : len(ex)] = torch.tensor(ex.loss_mask, dtype=torch.bool)
            attention[i, : len(ex)] = 1
        padded = bool((attention == 0).any())
        attn = attention if padded else None
        targets = trained[:, 1:]
        if self.split:
            hidden = self._final_hidden(batch, ids, attn)[:, :-1][targets]
            logits = self.model.lm_head(hidden)
        else:
            logits = self.model(input_ids=ids, attention_mask=attn).logits[:, :-1][targets]
        labels = ids[:, 1:][targets]
        loss = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
        return loss, int(labels.numel())

    def clear_cache(self) -> None:
        self._cache.clear()


def save_hf_checkpoint(model: Any, tokenizer_dir: str | Path, out: str | Path, *, info: dict[str, Any] | None = None) -> Path:
    """Write a complete HF model folder (config, tokenizer, model.safetensors with ``lm_head.weight``).

    The folder is written under a temporary name and renamed, so a reader never sees half of it.
    ``lm_head.weight`` is stored even when tied to the embeddings: an inference engine reloading
    weights in place keeps its old head otherwise.
    """
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    state = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    if "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(tmp)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(tmp)
    if info is not None:
        (tmp / "matpo_graph_sft.json").write_text(json.dumps(info, indent=2, sort_keys=True))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
