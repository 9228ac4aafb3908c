"""The model side of supervised warm-up: a float32 causal LM whose lower layers may be frozen.

Training every layer of even a 135M model costs about three forward passes per token on a CPU. A cold
start mostly teaches output *formats*, which the upper layers learn well, so the warm-up can train only
the top ``train_layers`` decoder layers (plus the final norm): the frozen lower stack then runs without
gradients. ``train_layers=0`` trains every decoder layer. Input embeddings (tied to the output head in
SmolLM2) stay frozen unless ``train_embeddings`` is set.

The loss is cross-entropy on the positions whose *next* token has loss mask 1. It runs through the
policy's forward engine (:mod:`matpo_graph.model.forward`), the one the RL update uses: examples are not
padded, a prefix several examples of a micro-batch share (one role's long system prompt) runs once and
serves its keys and values to every suffix (the same loss and gradients as running each example whole),
and the vocabulary projection runs only at trained positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from matpo_graph.coldstart.sft_data import SFTExample

__all__ = ["SFTModel"]


class SFTModel:
    """A causal LM prepared for warm-up; its losses run through the policy's forward engine.

    Args:
        model_dir: a HuggingFace model folder.
        train_layers: decoder layers trained, counted from the top (0 = all of them).
        train_embeddings: also train the input embeddings (and so a tied output head).
        share_prefix: the shortest common prefix (tokens) worth running once for several examples of a
            micro-batch; 0 turns prefix sharing off.
        precision: matmuls of the decoder layers in ``bf16`` (autocast) or ``fp32``; settable later
            through :attr:`precision`.
    """

    def __init__(self, model_dir: str | Path, *, train_layers: int = 0, train_embeddings: bool = False,
                 share_prefix: int = 64, precision: str = "fp32") -> None:
        from matpo_graph.model.forward import ForwardEngine
        from matpo_graph.model.loading import load_causal_lm, train_top_layers

        self.model = load_causal_lm(model_dir)
        inner = getattr(self.model, "model", None)
        self.split = getattr(inner, "layers", None) is not None and all(
            hasattr(inner, a) for a in ("embed_tokens", "rotary_emb", "norm"))
        self.cut = train_top_layers(self.model, train_layers if self.split else 0, train_embeddings=train_embeddings,
                                    train_head=True)
        self.pad_id = 0
        self.share_prefix = share_prefix if self.split else 0
        # min_shared beyond any length: every example runs whole (unpadded, still one trie node each)
        self.engine = ForwardEngine(self.model, precision=precision, min_shared=share_prefix or 10**9) if self.split else None

    @property
    def precision(self) -> str:
        return self.engine.precision if self.engine is not None else "fp32"

    @precision.setter
    def precision(self, value: str) -> None:
        from matpo_graph.model.precision import resolve_precision

        if self.engine is not None:
            self.engine.precision = resolve_precision(value)

    @property
    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def num_trainable(self) -> int:
        return sum(p.numel() for p in self.trainable)

    # -- forward -------------------------------------------------------------------------------------

    def loss_sum(self, batch: Sequence[SFTExample]) -> tuple[torch.Tensor, int]:
        """Summed cross-entropy over the trained tokens of a micro-batch, and how many there are."""
        if self.engine is None:
            return self._padded_loss(batch)
        targets = [[t for t in range(1, len(ex)) if ex.loss_mask[t]] for ex in batch]
        keep = [i for i, ts in enumerate(targets) if ts]
        if not keep:
            return torch.zeros((), requires_grad=True), 0
        got = self.engine.row_logprobs([batch[i].token_ids for i in keep], [targets[i] for i in keep])
        picked = torch.cat(got.logprobs)
        return -picked.sum(), int(picked.numel())

    def _prefix_groups(self, batch: Sequence[SFTExample]) -> tuple[list[tuple[list[SFTExample], int]], list[SFTExample]]:
        """Groups of >= 2 examples whose common prefix runs once (with its length), and the others: the
        top of the engine's prefix trie for this micro-batch."""
        from matpo_graph.model.forward import build_prefix_trie

        if self.engine is None or self.share_prefix <= 0 or len(batch) < 2:
            return [], list(batch)
        ids = [ex.token_ids for ex in batch]
        order = sorted(range(len(batch)), key=lambda r: tuple(ids[r]))
        shared, rest = [], []
        for node in build_prefix_trie(ids, order, 0, self.engine.min_shared):
            if len(node.rows) >= 2:
                shared.append(([batch[r] for r in sorted(node.rows)], node.end))
            else:
                rest.append(batch[node.rows[0]])
        return shared, rest

    def _padded_loss(self, batch: Sequence[SFTExample]) -> tuple[torch.Tensor, int]:
        """The whole-model path, for models the forward engine does not know."""
        width = max(len(ex) for ex in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        trained = torch.zeros((len(batch), width), dtype=torch.bool)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, ex in enumerate(batch):
            ids[i, : len(ex)] = torch.tensor(ex.token_ids)
            trained[i, : len(ex)] = torch.tensor(ex.loss_mask, dtype=torch.bool)
            attention[i, : len(ex)] = 1
        attn = attention if bool((attention == 0).any()) else None
        targets = trained[:, 1:]
        logits = self.model(input_ids=ids, attention_mask=attn).logits[:, :-1][targets]
        labels = ids[:, 1:][targets]
        loss = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
        return loss, int(labels.numel())

    def clear_cache(self) -> None:
        """Nothing is cached between calls any more (kept for callers of the earlier frozen-layer cache)."""
