"""The forward engine (unpadded rows in a prefix trie, frozen stack without autograd) against whole rows.

A small randomly initialised Llama (the real transformers architecture SmolLM2 uses) keeps these fast; the
real model on real trees is checked in test_forward_engine_real.py.
"""

from __future__ import annotations

import random

import pytest
import torch

from matpo_graph.model.forward import ForwardEngine, build_prefix_trie, chunk_rows


def tiny_llama(layers: int = 4, frozen: int = 2):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).float()
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers[frozen:]:
        for p in layer.parameters():
            p.requires_grad_(True)
    model.model.norm.weight.requires_grad_(True)
    return model


def rows_with_shared_prefixes(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    word = lambda n: [rng.randrange(3, 97) for _ in range(n)]  # noqa: E731
    system, question = word(40), word(12)
    rows = [system + question + word(20 + 7 * k) for k in range(3)]  # G rollouts of one question
    rows.append(system + word(33))  # another question
    rows.append(word(25))  # another role
    rows.append(rows[0][:60])  # a prefix of another row
    rows.append(list(rows[1]))  # a duplicate
    rows.append(system[:3] + word(30))  # shares only a few tokens: not worth a node
    return rows


def whole_row_logprobs(model, rows, targets, temps):  # type: ignore[no-untyped-def]
    out = []
    for ids, ts, t in zip(rows, targets, temps):
        logits = model(input_ids=torch.tensor([ids])).logits[0].float() / t
        lp = torch.log_softmax(logits, dim=-1)
        out.append(torch.stack([lp[i - 1, ids[i]] for i in ts]))
    return out


def test_trie_covers_every_position_of_every_row_once():
    rows = rows_with_shared_prefixes()
    order = sorted(range(len(rows)), key=lambda r: tuple(rows[r]))
    seen = {r: [] for r in range(len(rows))}

    def walk(nodes, path):  # type: ignore[no-untyped-def]
        for node in nodes:
            for r in node.rows:
                assert rows[r][node.start: node.end] == rows[node.rows[0]][node.start: node.end]
                seen[r].extend(range(node.start, node.end))
            walk(node.children, path + [node])

    roots = build_prefix_trie(rows, order, 0, 8)
    walk(roots, [])
    assert all(sorted(seen[r]) == list(range(len(rows[r]))) for r in seen)
    # the shared system prompt and question are one node each, not one per row
    distinct = sum(1 for _ in _iter(roots))
    assert distinct < len(rows) + 3
    total = sum(node.end - node.start for node in _iter(roots))
    assert total < sum(len(r) for r in rows) * 0.75


def _iter(nodes):  # type: ignore[no-untyped-def]
    for n in nodes:
        yield n
        yield from _iter(n.children)


def test_chunks_partition_rows_within_the_distinct_token_budget():
    rows = rows_with_shared_prefixes()
    chunks = chunk_rows(rows, 120)
    assert sorted(r for c in chunks for r in c) == list(range(len(rows)))
    for c in chunks:
        ordered = sorted(c, key=lambda r: tuple(rows[r]))
        roots = build_prefix_trie(rows, ordered, 0, 1)
        distinct = sum(n.end - n.start for n in _iter(roots))
        assert distinct <= 120 or len(c) == 1


@pytest.mark.parametrize("frozen", [0, 2, 4])
def test_engine_matches_whole_rows_in_logprobs_and_gradients(frozen):
    model = tiny_llama(frozen=frozen)
    rows = rows_with_shared_prefixes()
    targets = [list(range(max(1, len(r) - 15), len(r))) for r in rows]
    temps = [0.7, 1.0, 0.5, 0.7, 1.3, 0.7, 1.0, 0.7]
    engine = ForwardEngine(model, precision="fp32", min_shared=8)
    assert engine.cut == frozen
    got = engine.row_logprobs(rows, targets, temps, want_entropy=True)
    assert got.entropy is not None and got.entropy > 0
    loss = sum((w + 1) * lp.sum() for w, lp in enumerate(got.logprobs))
    params = [p for p in model.parameters() if p.requires_grad]
    if params:
        loss.backward()
        g_engine = [p.grad.clone() for p in params]
        model.zero_grad()
    want = whole_row_logprobs(model, rows, targets, temps)
    for a, b in zip(got.logprobs, want, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a.detach(), b.detach(), atol=2e-5), float((a - b).abs().max())
    if params:
        sum((w + 1) * lp.sum() for w, lp in enumerate(want)).backward()
        for a, p in zip(g_engine, params, strict=True):
            assert torch.allclose(a, p.grad, rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for layer in model.model.layers[:frozen] for p in layer.parameters())


def test_bf16_engine_stays_close_and_refuses_unknown_precisions():
    model = tiny_llama()
    rows = rows_with_shared_prefixes()
    targets = [list(range(1, len(r))) for r in rows]
    with torch.no_grad():
        exact = ForwardEngine(model, precision="fp32").row_logprobs(rows, targets).logprobs
        fast = ForwardEngine(model, precision="bf16").row_logprobs(rows, targets).logprobs
    gap = max(float((a - b).abs().max()) for a, b in zip(exact, fast, strict=True))
    assert 0 < gap < 0.1  # bf16 matmuls: close, not equal (a test that can fail both ways)
    with pytest.raises(ValueError, match="precision"):
        ForwardEngine(model, precision="fp16")  # type: ignore[arg-type]


def test_engine_rejects_targets_without_context():
    model = tiny_llama()
    with pytest.raises(ValueError, match="targets"):
        ForwardEngine(model).row_logprobs([[5, 6, 7]], [[0, 2]])
