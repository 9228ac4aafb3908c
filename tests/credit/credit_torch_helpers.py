"""Torch helpers for the loss and batch tests: a tiny causal LM."""

from __future__ import annotations

import torch

AGGS = ["tree_token_mean", "token_mean", "seq_mean_token_mean"]
VOCAB = 64


class TinyLM(torch.nn.Module):
    """A causal toy LM: each position sees the running mean of the embeddings up to itself."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.mix = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, VOCAB)
        self.double()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        steps = torch.arange(1, ids.shape[1] + 1, dtype=h.dtype).reshape(1, -1, 1)
        return self.out(torch.tanh(self.mix(torch.cumsum(h, dim=1) / steps)))
