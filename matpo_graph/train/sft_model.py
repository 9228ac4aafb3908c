"""The model side of supervised warm-up: a float32 causal LM whose lower layers may be frozen and cached.

Training every layer of even a 135M model costs about three forward passes per token on a CPU. A cold
start mostly teaches output *formats*, which the upper layers learn well, so the warm-up can train only
the top ``train_layers`` decoder layers (plus the final norm): the frozen lower stack then runs once per
example without gradients and its output is cached, so later epochs (and the loss evaluations) run only
the upper layers. ``train_layers=0`` trains every decoder layer. Input embeddings (tied to the output
head in SmolLM2) stay frozen unless ``train_embeddings`` is set.

The loss is cross-entropy on the positions whose *next* token has loss mask 1; the output head runs only
there, so the large vocabulary projection is not paid on context tokens.

Examples of one role start with the same long system prompt. When several in a micro-batch share a
prefix, it runs once and its keys and values serve every suffix (``share_prefix``): the same loss and
gradients as running each example whole (a causal model's prefix states do not depend on what follows),
for a fraction of the compute on the short opening drills.
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
        share_prefix: the shortest common prefix (tokens) worth running once for several examples of a
            micro-batch; 0 turns prefix sharing off.
    """

    def __init__(self, model_dir: str | Path, *, train_layers: int = 0, train_embeddings: bool = False,
                 cache_frozen: bool = True, share_prefix: int = 64) -> None:
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
        self.share_prefix = share_prefix if self.split else 0

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

    def _run_layers(self, hidden: torch.Tensor, layers: Sequence[Any], attention: torch.Tensor | None,
                    *, positions: torch.Tensor | None = None, mask: Any = None, kv: _PrefixKV | None = None) -> torch.Tensor:
        inner = self.model.model
        if positions is None:
            positions = torch.arange(hidden.shape[1]).unsqueeze(0)
        if mask is None:
            mask = self._mask(hidden, attention, positions)
        rope = inner.rotary_emb(hidden, position_ids=positions)
        for layer in layers:
            out = layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=positions, past_key_values=kv)
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
        shared, rest = self._prefix_groups(batch)
        parts = [self._shared_prefix_loss(group, n) for group, n in shared]
        if rest:
            parts.append(self._padded_loss(rest))
        loss = parts[0][0]
        for extra, _ in parts[1:]:
            loss = loss + extra
        return loss, sum(n for _, n in parts)

    def _prefix_groups(self, batch: Sequence[SFTExample]) -> tuple[list[tuple[list[SFTExample], int]], list[SFTExample]]:
        """Groups of >= 2 examples that share a prefix worth sharing (with its length), and the others.

        Examples whose frozen output is already cached take the padded path: it skips the frozen stack.
        """
        if self.share_prefix <= 0 or len(batch) < 2:
            return [], list(batch)
        by_head: dict[tuple[int, ...], list[SFTExample]] = {}
        rest: list[SFTExample] = []
        for ex in batch:
            if len(ex) <= self.share_prefix or (self.cache_frozen and ex.key in self._cache):
                rest.append(ex)
            else:
                by_head.setdefault(ex.token_ids[: self.share_prefix], []).append(ex)
        shared = []
        for group in by_head.values():
            n = min(_common_prefix(group), min(len(ex) for ex in group) - 1)  # every example keeps a suffix
            if len(group) >= 2 and n >= self.share_prefix:
                shared.append((group, n))
            else:
                rest.extend(group)
        return shared, rest

    def _shared_prefix_loss(self, group: Sequence[SFTExample], n: int) -> tuple[torch.Tensor, int]:
        """The loss of `group`, whose examples share their first `n` tokens, running those tokens once."""
        inner = self.model.model
        frozen, trained = inner.layers[: self.cut], inner.layers[self.cut :]
        kv = _PrefixKV()

        def stack(ids: torch.Tensor, positions: torch.Tensor, mask: Any) -> torch.Tensor:
            with torch.set_grad_enabled(self.cut == 0):  # as in the padded path: no gradient below the cut
                hidden = self._run_layers(inner.embed_tokens(ids), frozen, None, positions=positions, mask=mask, kv=kv)
            return inner.norm(self._run_layers(hidden, trained, None, positions=positions, mask=mask, kv=kv))

        prefix = torch.tensor([group[0].token_ids[:n]])
        positions = torch.arange(n).unsqueeze(0)
        head = stack(prefix, positions, torch.ones((n, n), dtype=torch.bool).tril()[None, None])[0]
        width = max(len(ex) for ex in group) - n
        ids = torch.full((len(group), width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((len(group), width), dtype=torch.bool)
        for i, ex in enumerate(group):
            ids[i, : len(ex) - n] = torch.tensor(ex.token_ids[n:])
            valid[i, : len(ex) - n] = True
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        mask = torch.cat([torch.ones((len(group), 1, width, n), dtype=torch.bool),
                          (causal.unsqueeze(0) & valid[:, None, :]).unsqueeze(1)], dim=-1)
        kv.batch = len(group)
        tail = stack(ids, (n + torch.arange(width)).unsqueeze(0), mask)
        rows: list[int] = []
        labels: list[int] = []
        for i, ex in enumerate(group):
            for t in range(1, len(ex)):
                if ex.loss_mask[t]:
                    rows.append(t - 1 if t - 1 < n else n + i * width + (t - 1 - n))
                    labels.append(ex.token_ids[t])
        hidden = torch.cat([head, tail.reshape(len(group) * width, -1)])[torch.tensor(rows, dtype=torch.long)]
        logits = self.model.lm_head(hidden)
        loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(labels, dtype=torch.long), reduction="sum")
        return loss, len(labels)

    def _padded_loss(self, batch: Sequence[SFTExample]) -> tuple[torch.Tensor, int]:
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


def _common_prefix(group: Sequence[SFTExample]) -> int:
    first = group[0].token_ids
    n = len(first)
    for ex in group[1:]:
        k = 0
        for a, b in zip(first[:n], ex.token_ids):
            if a != b:
                break
            k += 1
        n = k
    return n


class _PrefixKV:
    """Keys and values of a shared prefix, duck-typed as a transformers cache for the decoder layers.

    On the prefix pass (``batch`` unset) it keeps each layer's keys and values; on the suffix pass it
    returns them broadcast over the batch, ahead of the suffix's own. Gradients flow through both.
    """

    def __init__(self) -> None:
        self.batch: int | None = None
        self._kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.batch is None:
            self._kv[layer_idx] = (keys, values)
            return keys, values
        pk, pv = self._kv[layer_idx]
        b = keys.shape[0]
        return torch.cat([pk.expand(b, -1, -1, -1), keys], dim=2), torch.cat([pv.expand(b, -1, -1, -1), values], dim=2)


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
