"""The warm-up's split forward (frozen, cached lower layers) against the model's own forward."""

from __future__ import annotations

import pytest

from matpo_graph.train.sft_data import SFTExample


def example(key, ids, trained_from):
    return SFTExample(key, "r", tuple(ids), tuple(int(i >= trained_from) for i in range(len(ids))))


@pytest.fixture(scope="module")
def batch(chat):
    a = chat.encode("<|im_start|>user\nWho wrote The Amber Ledger?<|im_end|>\n<|im_start|>assistant\nOrla Venn wrote it.<|im_end|>")
    b = chat.encode("<|im_start|>user\nWhere?<|im_end|>\n<|im_start|>assistant\nIn Tarnholm, a city by the sea.<|im_end|>")
    return [example("a", a, len(a) - 6), example("b", b, len(b) - 9)]


def reference_loss(model, ex):
    import torch

    ids = torch.tensor([ex.token_ids])
    logits = model(input_ids=ids).logits[0, :-1]
    mask = torch.tensor(ex.loss_mask[1:], dtype=torch.bool)
    return float(torch.nn.functional.cross_entropy(logits[mask], ids[0, 1:][mask], reduction="sum")), int(mask.sum())


@pytest.mark.parametrize("train_layers", [0, 10])
def test_split_forward_matches_the_plain_forward(model_dir, batch, train_layers):
    import torch

    from matpo_graph.train.sft_model import SFTModel

    m = SFTModel(model_dir, train_layers=train_layers)
    m.model.eval()
    with torch.no_grad():
        for ex in batch:
            got, n = m.loss_sum([ex])
            want, k = reference_loss(m.model, ex)
            assert n == k == ex.trained_tokens
            assert float(got) == pytest.approx(want, rel=1e-4)
        padded, n = m.loss_sum(batch)  # right-padded micro-batch: same sum as one by one
        assert n == sum(ex.trained_tokens for ex in batch)
        assert float(padded) == pytest.approx(sum(reference_loss(m.model, ex)[0] for ex in batch), rel=1e-4)
        cached, _ = m.loss_sum(batch)  # second pass reads the frozen layers' cache (when there is one)
        assert float(cached) == pytest.approx(float(padded), rel=1e-5)


def test_frozen_layers_get_no_gradient_and_trained_ones_do(model_dir, batch):
    from matpo_graph.train.sft_model import SFTModel

    m = SFTModel(model_dir, train_layers=3)
    loss, _ = m.loss_sum(batch)
    loss.backward()
    layers = m.model.model.layers
    assert all(p.grad is None for p in layers[0].parameters())
    assert all(p.grad is not None for p in layers[-1].parameters())
    assert m.model.model.embed_tokens.weight.grad is None
    assert m.num_trainable() == sum(p.numel() for layer in layers[-3:] for p in layer.parameters()) + m.model.model.norm.weight.numel()
