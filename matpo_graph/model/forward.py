"""The policy's forward engine: token logprobs of many rows, each token computed once per shared prefix.

One engine serves the RL update, the old-logprob recomputation, the supervised warm-up and evaluation
losses. Rows are never padded: they are arranged in a prefix trie (rows of one role share a long system
prompt, the G rollouts of a question share it and the question), and each trie node runs once, attending
to its ancestors' keys and values. A root node has no past and runs on sdpa's causal kernel; a padding
mask would knock it off that path (about 1.8x slower attention here). The frozen lower decoder layers
run without autograd; the trained upper ones keep their graph, so gradients reach a shared prefix from
every row below it, exactly as if each row ran whole (a causal model's prefix states do not depend on
what follows). Under ``precision="bf16"`` the decoder layers run under bfloat16 autocast (weights and
optimizer stay float32); the final norm and the vocabulary projection stay float32 and run only at the
positions that are scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from matpo_graph.model.precision import resolve_precision

__all__ = ["ForwardEngine", "Precision", "RowLogprobs", "build_prefix_trie", "chunk_rows", "resolve_precision"]

Precision = Literal["auto", "bf16", "fp32"]

ATTENTION = "matpo_prefix_causal"


def _prefix_causal_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Causal attention of a node's queries over its past and itself, on sdpa's causal kernel.

    The keys hold ``past`` positions before the node's own. sdpa's causal mask is aligned top-left, so the
    queries get ``past`` zero rows in front: row ``past + i`` then sees keys ``0 .. past + i``, which is
    exactly the node's causal pattern. The padded rows' outputs are dropped, so they get no gradient and
    add none to the keys and values.
    """
    if attention_mask is not None:
        raise ValueError("the forward engine's attention takes no mask")
    past = key.shape[2] - query.shape[2]
    if past > 0:
        pad = query.new_zeros(query.shape[0], query.shape[1], past, query.shape[3])
        query = torch.cat([pad, query], dim=2)
    groups = int(getattr(module, "num_key_value_groups", 1))
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, dropout_p=0.0, scale=scaling, is_causal=query.shape[2] > 1, enable_gqa=groups > 1)
    if past > 0:
        out = out[:, :, past:]
    return out.transpose(1, 2).contiguous(), None


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _prefix_causal_attention)


class _EngineAttention:
    """Switches the model's attention to :func:`_prefix_causal_attention` for the engine's forward pass
    (the config is shared by every layer; the padded reference path keeps its own implementation)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.saved: Any = None

    def __enter__(self) -> None:
        self.saved = self.config._attn_implementation
        self.config._attn_implementation = ATTENTION

    def __exit__(self, *exc: object) -> None:
        self.config._attn_implementation = self.saved


@dataclass
class RowLogprobs:
    """Per-row results, in the order of the rows given: logprobs at the target positions (graph kept when
    grad is enabled) and, when asked, the mean entropy over all targets."""

    logprobs: list[torch.Tensor]
    entropy: float | None = None


@dataclass
class _Node:
    """A trie segment: positions [start, end) of every row in `rows` (their tokens agree there)."""

    start: int
    end: int
    rows: list[int]
    children: list[_Node] = field(default_factory=list)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def build_prefix_trie(ids: Sequence[Sequence[int]], rows: list[int], depth: int, min_shared: int) -> list[_Node]:
    """Trie nodes starting at `depth` covering `rows` (sorted by their tokens; all agree before `depth`).

    A common segment shorter than `min_shared` tokens is not worth a node of its own (a node with a past
    needs a masked attention): the rows below it repeat it instead.
    """
    if len(rows) == 1:
        return [_Node(depth, len(ids[rows[0]]), rows)]
    common = _lcp(ids[rows[0]], ids[rows[-1]])  # sorted rows: the first and last agree least
    ending = [r for r in rows if len(ids[r]) == common]
    going = [r for r in rows if len(ids[r]) > common]
    groups: dict[int, list[int]] = {}
    for r in going:
        groups.setdefault(ids[r][common], []).append(r)
    if common - depth >= min_shared or common == depth:
        if common == depth:  # nothing shared here: each group starts its own node at `depth`
            return [n for g in groups.values() for n in build_prefix_trie(ids, g, depth, min_shared)] + [
                _Node(depth, len(ids[r]), [r]) for r in ending]
        node = _Node(depth, common, list(rows))
        node.children = [n for g in groups.values() for n in build_prefix_trie(ids, g, common, min_shared)]
        return [node]
    out = [n for g in groups.values() for n in build_prefix_trie(ids, g, depth, min_shared)]
    return out + [_Node(depth, len(ids[r]), [r]) for r in ending]


def chunk_rows(ids: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
    """Rows in chunks of at most `max_tokens` distinct (trie) tokens each, neighbours in token order
    together so that a chunk keeps its shared prefixes; a row longer than the budget travels alone."""
    order = sorted(range(len(ids)), key=lambda r: tuple(ids[r]))
    chunks: list[list[int]] = []
    current: list[int] = []
    load = 0
    prev: Sequence[int] | None = None
    for r in order:
        new = len(ids[r]) - (_lcp(prev, ids[r]) if prev is not None and current else 0)
        if current and load + new > max_tokens:
            chunks.append(current)
            current, load = [], 0
            new = len(ids[r])
        current.append(r)
        load += new
        prev = ids[r]
    if current:
        chunks.append(current)
    return chunks


class _PastKV:
    """Keys and values of a node's ancestors, duck-typed as a transformers cache for the decoder layers:
    `update` records the node's own keys and values (for its children) and returns them after the past."""

    def __init__(self, past: dict[int, tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        self.past = past or {}
        self.full: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx in self.past:
            pk, pv = self.past[layer_idx]
            keys, values = torch.cat([pk.to(keys.dtype), keys], dim=2), torch.cat([pv.to(values.dtype), values], dim=2)
        self.full[layer_idx] = (keys, values)
        return keys, values


class ForwardEngine:
    """Token logprobs of a causal LM over unpadded rows that share prefixes.

    Args:
        model: an HF causal LM with ``model.layers``, ``model.embed_tokens``, ``model.rotary_emb``,
            ``model.norm`` and ``lm_head`` (through a peft wrapper too).
        precision: ``bf16`` runs the decoder layers under bfloat16 autocast, ``fp32`` does not, ``auto``
            picks bf16 where the CPU has native bfloat16.
        min_shared: the shortest common prefix (tokens) that gets a trie node of its own.
        frozen_precision: the frozen lower stack's precision when it differs from `precision` (the RL
            update keeps it float32, so bf16 rounding does not shift the trained layers' inputs).

    The frozen lower stack is the longest run of leading decoder layers without a trainable parameter
    (none when the input embeddings train); it always runs without autograd.
    """

    def __init__(self, model: Any, *, precision: Precision = "fp32", min_shared: int = 32,
                 frozen_precision: Precision | None = None) -> None:
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.model = model
        self.backbone = getattr(inner, "model", None)
        self.head = getattr(inner, "lm_head", None)
        if self.backbone is None or self.head is None or not all(
                hasattr(self.backbone, a) for a in ("layers", "embed_tokens", "rotary_emb", "norm")):
            raise TypeError(f"{type(inner).__name__} is not a decoder-only LM the forward engine knows "
                            "(it needs model.layers, embed_tokens, rotary_emb, norm and lm_head)")
        self.precision = resolve_precision(precision)
        self.frozen_precision = None if frozen_precision is None else resolve_precision(frozen_precision)
        self.min_shared = max(1, int(min_shared))
        _register_attention()

    @property
    def cut(self) -> int:
        """How many lower decoder layers are frozen (run without autograd)."""
        if self.backbone.embed_tokens.weight.requires_grad:
            return 0
        n = 0
        for layer in self.backbone.layers:
            if any(p.requires_grad for p in layer.parameters()):
                break
            n += 1
        return n

    def _autocast(self, frozen: bool = False) -> Any:
        precision = self.frozen_precision if frozen and self.frozen_precision is not None else self.precision
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def row_logprobs(self, ids: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                     temperatures: Sequence[float] | None = None, *, want_entropy: bool = False) -> RowLogprobs:
        """Logprob of token ``ids[r][t]`` given ``ids[r][:t]`` under ``softmax(logits / temperature[r])``,
        for every t in ``targets[r]`` (each >= 1), one tensor per row in target order.

        All rows run in one trie (callers chunk with :func:`chunk_rows` for memory). Gradients flow to
        the trained layers when grad mode is on.
        """
        n = len(ids)
        if len(targets) != n or (temperatures is not None and len(temperatures) != n):
            raise ValueError("ids, targets and temperatures must have one entry per row")
        for r, ts in enumerate(targets):
            if any(t < 1 or t >= len(ids[r]) for t in ts):
                raise ValueError(f"row {r}: targets must lie in [1, {len(ids[r])})")
        temps = [1.0] * n if temperatures is None else [float(t) for t in temperatures]
        order = sorted(range(n), key=lambda r: tuple(ids[r]))
        roots = build_prefix_trie(ids, order, 0, self.min_shared)
        # Which hidden state (node, offset) predicts each target: position t - 1 lies in one node of the row's path.
        picks: list[tuple[int, int, int, int]] = []  # (row, target index, node id, offset in node)
        hidden: list[torch.Tensor] = []
        layers = list(self.backbone.layers)
        cut = self.cut

        def visit(node: _Node, frozen_past: dict[int, Any] | None, trained_past: dict[int, Any] | None) -> None:
            tokens = torch.tensor([ids[node.rows[0]][node.start: node.end]], dtype=torch.long)
            positions = torch.arange(node.start, node.end).unsqueeze(0)
            mask = None  # causal over past and node: see _prefix_causal_attention
            with self._autocast(frozen=True), torch.no_grad():
                h = self.backbone.embed_tokens(tokens) if cut > 0 else None
                rope = self.backbone.rotary_emb(self.backbone.embed_tokens.weight[:1][None], position_ids=positions)
                fkv = _PastKV(frozen_past)
                for layer in layers[:cut]:
                    h = layer(h, attention_mask=mask, position_ids=positions, past_key_values=fkv, position_embeddings=rope)
            with self._autocast():
                if cut == 0:
                    h = self.backbone.embed_tokens(tokens)
                tkv = _PastKV(trained_past)
                for layer in layers[cut:]:
                    h = layer(h, attention_mask=mask, position_ids=positions, past_key_values=tkv, position_embeddings=rope)
            node_id = len(hidden)
            hidden.append(h[0])
            for r in node.rows:
                for i, t in enumerate(targets[r]):
                    if node.start <= t - 1 < node.end:
                        picks.append((r, i, node_id, t - 1 - node.start))
            for child in node.children:
                visit(child, fkv.full, tkv.full)

        with _EngineAttention(self.backbone.config):
            for root in roots:
                visit(root, None, None)
        if not picks:
            return RowLogprobs([torch.zeros(0) for _ in range(n)], None)
        offsets = [0]
        for h in hidden[:-1]:
            offsets.append(offsets[-1] + h.shape[0])
        flat = torch.cat(hidden) if len(hidden) > 1 else hidden[0]
        index = torch.tensor([offsets[node] + off for _, _, node, off in picks], dtype=torch.long)
        with torch.autocast("cpu", enabled=False):  # the final norm and the projection stay float32
            h = self.backbone.norm(flat[index].float())
            logits = self.head(h).float() / torch.tensor([temps[r] for r, _, _, _ in picks]).unsqueeze(-1)
        labels = torch.tensor([ids[r][targets[r][i]] for r, i, _, _ in picks], dtype=torch.long)
        logz = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - logz
        entropy = None
        if want_entropy:
            with torch.no_grad():
                p = torch.softmax(logits, dim=-1)
                entropy = float((logz - (p * logits).sum(-1)).mean())
        # back to row order: picks are grouped by node, so sort each row's entries by target index
        slots = sorted(range(len(picks)), key=lambda k: (picks[k][0], picks[k][1]))
        ordered = picked[torch.tensor(slots, dtype=torch.long)]
        out: list[torch.Tensor] = []
        at = 0
        for r in range(n):
            k = len(targets[r])
            out.append(ordered[at: at + k])
            at += k
        return RowLogprobs(out, entropy)
